//! The resolved configuration as shown to an operator ([`redacted`]): the
//! panel token and secret-named provider profile keys replaced, environment
//! references kept.

use serde_json::Value;

use super::Loaded;

/// Placeholder for a redacted secret.
const REDACTED: &str = "<redacted>";

/// Key names inside provider profiles that hold secrets (compared without
/// regard to ASCII case).
const SECRET_KEYS: [&str; 5] = ["api_key", "apiKey", "token", "secret", "password"];

/// The resolved configuration with secrets replaced by `"<redacted>"`:
/// a non-empty `panel.token`, and any secret-named key inside a provider
/// profile unless its value is an environment reference like
/// `"${DEEPSEEK_API_KEY}"` (or empty or null, which hide nothing).
pub fn redacted(loaded: &Loaded) -> Value {
    let mut value = loaded.resolved.clone();
    if let Some(Value::String(token)) = value.pointer_mut("/panel/token") {
        if !token.is_empty() {
            *token = REDACTED.to_owned();
        }
    }
    if let Some(Value::Object(profiles)) = value.get_mut("providerProfiles") {
        for profile in profiles.values_mut() {
            redact_secrets(profile);
        }
    }
    value
}

fn redact_secrets(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                let secret = SECRET_KEYS
                    .iter()
                    .any(|name| key.eq_ignore_ascii_case(name));
                let harmless = match value {
                    Value::Null => true,
                    Value::String(s) => s.is_empty() || is_env_reference(s),
                    _ => false,
                };
                if secret && !harmless {
                    *value = Value::String(REDACTED.to_owned());
                } else {
                    redact_secrets(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secrets),
        _ => {}
    }
}

/// `${NAME}` with NAME matching `[A-Za-z_][A-Za-z0-9_]*`: a value the
/// worker takes from its environment, not a secret itself.
pub(super) fn is_env_reference(s: &str) -> bool {
    let Some(name) = s.strip_prefix("${").and_then(|rest| rest.strip_suffix('}')) else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
