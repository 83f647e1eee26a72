//! An agent as Shard describes it (seed 004 §11 `AgentInfo`, the `sync`
//! capabilities), pure: every session is an agent, its worker is the
//! agent's runtime. A [`Snapshot`] copies what is needed out of the
//! session record (under the registry lock, by the caller); the rest
//! renders from it.

use serde_json::{json, Map, Value};

use super::track::{Derived, Facts, Runtime};
use crate::ops::worker::DEFAULT_MODE;
use crate::session::{PromptState, Session};
use crate::util::time;

/// How a runtime last ended, when it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub reason: String,
    pub code: Option<i32>,
}

/// What Shard reads of one session.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub agent_id: String,
    pub created_at_ms: u64,
    /// The worker's workspace (empty: the worker's default).
    pub cwd: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// The parent session of a headless child.
    pub parent: Option<String>,
    pub facts: Facts,
    pub mode: String,
    /// Worker incarnations seen (`runtime_epoch`).
    pub epoch: u64,
    /// What the connected worker advertises.
    pub worker_capabilities: Vec<String>,
    pub exit: Option<Exit>,
    pub headless: bool,
}

impl Snapshot {
    /// From the session record; `profiles` are the configured provider
    /// profiles (a profile's model when the spec names none). A headless
    /// child's launch details are the hub's own and are left out.
    pub fn of(s: &Session, profiles: &Map<String, Value>) -> Snapshot {
        let headless = s.is_headless();
        let spec = s.spec();
        let string = |key: &str| {
            spec.get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let provider = if headless { None } else { string("provider") };
        let model = if headless {
            None
        } else {
            string("model").or_else(|| {
                let profile = profiles.get(provider.as_deref()?)?;
                profile.get("model")?.as_str().map(str::to_string)
            })
        };
        let process = s.process();
        let state = process.map(|p| p.state.as_str());
        let connected = s.connected();
        let runtime = Runtime::of(state, connected);
        let exit = process
            .filter(|_| runtime == Runtime::Failed)
            .map(|p| Exit {
                reason: p
                    .error
                    .clone()
                    .unwrap_or_else(|| "the worker failed".into()),
                code: p.exit_code,
            });
        Snapshot {
            agent_id: s.id().to_string(),
            created_at_ms: time::millis_from_rfc3339(s.created_at()).unwrap_or(0),
            cwd: if headless {
                String::new()
            } else {
                string("workspace").unwrap_or_default()
            },
            provider,
            model,
            parent: s.headless().map(|c| c.parent().session_id.clone()),
            facts: Facts {
                runtime,
                connected,
                decidable: s
                    .prompts()
                    .iter()
                    .filter(|p| p.state == PromptState::AwaitingDecision)
                    .count(),
            },
            mode: s.mode().unwrap_or(DEFAULT_MODE).to_string(),
            epoch: s.stats().incarnations,
            worker_capabilities: s.capabilities().map(<[String]>::to_vec).unwrap_or_default(),
            exit,
            headless,
        }
    }

    /// The runtime's capabilities as `sync` advertises them: the mode
    /// catalog and switch (the confirmation policy sent with later
    /// prompts), the model catalog (the provider profiles; no switch), and
    /// `context-compact` when the worker advertises it. A headless child's
    /// conversation is its parent's, so it offers none of these.
    pub fn capabilities(&self) -> Vec<&'static str> {
        if self.headless {
            return Vec::new();
        }
        let mut caps = vec!["mode-catalog", "mode-switch", "model-catalog"];
        if self
            .worker_capabilities
            .iter()
            .any(|c| c == "context-compact")
        {
            caps.push("context-compact");
        }
        caps
    }
}

/// The seed's `AgentInfo`.
pub fn info(snap: &Snapshot, now: &Derived) -> Value {
    let mut out = json!({
        "agent_id": snap.agent_id,
        "name": snap.agent_id,
        "cwd": snap.cwd,
        "mode": snap.mode,
        "status": now.status.as_str(),
        "runtime_state": now.runtime.as_str(),
        "created_at": snap.created_at_ms,
    });
    for (key, value) in [
        ("model", &snap.model),
        ("provider", &snap.provider),
        ("parent_agent_id", &snap.parent),
    ] {
        if let Some(value) = value {
            out[key] = json!(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::track::{Status, Track};
    use crate::transcript::Transcript;

    #[test]
    fn an_ordinary_session_is_an_agent() {
        let s = Session::new(
            "a1".into(),
            "2026-01-01T00:00:00.123Z".into(),
            json!({"provider": "mock", "model": "", "workspace": "/w"}),
            "token".into(),
            "l".into(),
            Transcript::new(10, 1 << 20),
        );
        let mut profiles = Map::new();
        profiles.insert("mock".into(), json!({"model": "m-1", "plugin": "p"}));
        let snap = Snapshot::of(&s, &profiles);
        assert_eq!(snap.agent_id, "a1");
        assert_eq!(snap.facts.runtime, Runtime::Stopped);
        assert_eq!(snap.mode, "ask");
        assert!(!snap.headless);
        let now = Track::default().derive(&snap.facts);
        assert_eq!(now.status, Status::Idle);
        assert_eq!(
            info(&snap, &now),
            json!({"agent_id": "a1", "name": "a1", "cwd": "/w", "mode": "ask", "status": "idle",
                "runtime_state": "stopped", "created_at": 1_767_225_600_123u64,
                "model": "m-1", "provider": "mock"})
        );
        assert_eq!(
            snap.capabilities(),
            ["mode-catalog", "mode-switch", "model-catalog"]
        );
    }
}
