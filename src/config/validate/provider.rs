//! The model providers: the offline model provider's keys (`mock.*`,
//! checked with `mock_provider`'s own parsers) and `providerProfiles`.

use serde_json::{Map, Value};

use super::check::{placeholder, Check};

impl Check<'_> {
    // The offline model provider's keys (`mock_provider`).

    pub(super) fn mock_listen(&mut self, path: &str) -> String {
        let listen = self.string(path, false);
        if let Err(rule) = crate::mock_provider::parse_listen(&listen) {
            if self.ok(path) {
                self.fail(path, Value::from(listen), rule.to_string());
            }
            return String::new();
        }
        listen
    }

    pub(super) fn mock_scenario(&mut self, path: &str) -> String {
        let scenario = self.string(path, false);
        if crate::mock_provider::Scenario::parse(&scenario).is_none() && self.ok(path) {
            self.fail(
                path,
                Value::from(scenario.as_str()),
                format!("must be one of {}", crate::mock_provider::Scenario::names()),
            );
        }
        scenario
    }

    pub(super) fn mock_tool_command(&mut self, path: &str) -> String {
        let command = self.string(path, false);
        if !command.is_empty() && command.trim().is_empty() {
            self.fail(
                path,
                Value::from(command),
                "must not be blank; leave it empty for the default command",
            );
            return String::new();
        }
        command
    }

    pub(super) fn profiles(&mut self, path: &str) -> Map<String, Value> {
        let profiles = match self.get(path) {
            Some(Value::Object(profiles)) if !profiles.is_empty() => profiles,
            Some(other) => {
                self.fail(
                    path,
                    placeholder(other),
                    "must be an object with at least one profile",
                );
                return Map::new();
            }
            None => return Map::new(),
        };
        for (name, profile) in profiles {
            match profile {
                Value::Object(fields) => match fields.get("model") {
                    Some(Value::String(model)) if !model.is_empty() => {}
                    other => self.fail_at(
                        path,
                        format!("{path}.{name}.model"),
                        other.cloned().unwrap_or(Value::Null),
                        "must be a non-empty string",
                    ),
                },
                other => self.fail_at(
                    path,
                    format!("{path}.{name}"),
                    placeholder(other),
                    "must be an object",
                ),
            }
        }
        profiles.clone()
    }
}
