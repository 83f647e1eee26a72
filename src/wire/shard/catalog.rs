//! The Shard command catalog (seed 004 §9 and §10), pure: which message
//! types this hub takes, whether each is an orchestrator or a per-agent
//! command, and the validation of each one's fields into a [`Command`].
//! Commands of the seed that the worker protocol has no equivalent for
//! are parsed into [`Command::Unsupported`] with the reason, so they are
//! refused the same way everywhere (and never faked).

use serde_json::{Map, Value};

use super::message::{Incoming, Refusal};

/// The message type that binds a unix-socket connection to one agent
/// (this hub's extension; `direct`).
pub const DIRECT_BIND: &str = "direct.bind";

/// Who a command is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The registry (`agent.*`, `daemon.*`): no routing `agent_id`.
    Orchestrator,
    /// One attached agent, named by the routing `agent_id`.
    Agent,
    /// The connection itself: `direct.bind`, this hub's extension that
    /// makes a unix-socket connection a direct one (`direct`).
    Connection,
}

/// How an attachment may act on its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Interactive,
    /// Watches; never answers permission requests.
    Observer,
}

/// `agent.create`'s fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Create {
    pub cwd: String,
    pub session_id: Option<String>,
    pub name: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub mode: Option<String>,
}

/// What `direct.bind` binds the connection to.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// An existing agent (`agent_id`).
    Agent(String),
    /// A new agent, made as `agent.create` makes one (`create`).
    Create(Create),
}

/// An image of a prompt (`{type: "image", data, mime_type}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub data: String,
    pub mime_type: String,
}

/// How a permission request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Allow, and allow this exact request from now on (a grant).
    AllowAlways,
    Deny,
}

/// One command, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    AgentList,
    AgentCreate(Create),
    AgentAttach {
        agent_id: String,
        role: Role,
    },
    AgentDetach {
        agent_id: String,
    },
    AgentTerminate {
        agent_id: String,
    },
    AgentKill {
        agent_id: String,
        force: bool,
    },
    AgentStatus {
        agent_id: Option<String>,
    },
    DaemonShutdown {
        force: bool,
    },
    DirectBind(Bind),
    /// `prompt`; `follow_up` is `streaming_behavior: "follow_up"`.
    Prompt {
        message: String,
        images: Vec<Image>,
        follow_up: bool,
    },
    Abort,
    ListModes,
    SetMode {
        mode: String,
    },
    ListModels,
    SessionCompact,
    SessionList,
    PermissionResponse {
        request_id: String,
        decision: Decision,
        reason: Option<String>,
    },
    UiResponse {
        request_id: String,
    },
    /// A command or behaviour of the seed the runtime cannot honour.
    Unsupported {
        what: &'static str,
        why: &'static str,
    },
}

const NO_STEER: &str = "the worker protocol cannot deliver a message into a turn in progress; \
     send a prompt with streaming_behavior follow_up to queue it behind the active run";
const NO_MODEL_SWITCH: &str = "a worker's model profile is fixed in its generated configuration \
     for the life of the process; there is no switch at the next provider call";
const NO_FORK: &str = "the worker protocol has no operation that forks a conversation at an entry";
const NO_REASONING: &str = "the worker protocol advertises no reasoning catalog";
const NO_SUBAGENT_JOBS: &str = "background subagent jobs are not built in this hub yet \
     (headless subagents are forked by their parent worker's clean-fork tool)";
const NO_WORKSPACES: &str = "managed workspaces are not built in this hub yet";

/// The scope of message type `kind`, `None` for a type this catalog does
/// not know.
pub fn scope(kind: &str) -> Option<Scope> {
    match kind {
        "agent.list" | "agent.create" | "agent.attach" | "agent.detach" | "agent.terminate"
        | "agent.kill" | "agent.status" | "daemon.shutdown" => Some(Scope::Orchestrator),
        "prompt"
        | "steer"
        | "abort"
        | "list_modes"
        | "set_mode"
        | "list_models"
        | "set_model"
        | "session_op"
        | "permission_response"
        | "ui_response"
        | "list_reasoning_levels"
        | "set_reasoning_level" => Some(Scope::Agent),
        k if k.starts_with("subagent.") || k.starts_with("workspace.") => Some(Scope::Orchestrator),
        DIRECT_BIND => Some(Scope::Connection),
        _ => None,
    }
}

/// Validates `msg` into a command. An unknown type is `INVALID_REQUEST`.
/// (Whether a per-agent command's `agent_id` names an attachment is the
/// connection's to judge.)
pub fn parse(msg: &Incoming) -> Result<Command, Refusal> {
    let b = &msg.body;
    let agent = || -> Result<String, Refusal> {
        msg.agent_id
            .clone()
            .ok_or_else(|| Refusal::invalid("agent_id is required"))
    };
    Ok(match msg.kind.as_str() {
        "agent.list" => Command::AgentList,
        "agent.create" => Command::AgentCreate(create(b)?),
        "agent.attach" => {
            let role = match opt_str(b, "role")? {
                None | Some("interactive") => Role::Interactive,
                Some("observer") => Role::Observer,
                Some(other) => {
                    return Err(Refusal::invalid(format!(
                        "role must be interactive or observer, not {other:?}"
                    )))
                }
            };
            Command::AgentAttach {
                agent_id: agent()?,
                role,
            }
        }
        "agent.detach" => Command::AgentDetach { agent_id: agent()? },
        "agent.terminate" => Command::AgentTerminate { agent_id: agent()? },
        "agent.kill" => Command::AgentKill {
            agent_id: agent()?,
            force: opt_bool(b, "force")?.unwrap_or(false),
        },
        "agent.status" => Command::AgentStatus {
            agent_id: msg.agent_id.clone(),
        },
        "daemon.shutdown" => Command::DaemonShutdown {
            force: opt_bool(b, "force")?.unwrap_or(false),
        },
        DIRECT_BIND => match (b.get("create").filter(|v| !v.is_null()), &msg.agent_id) {
            (Some(_), Some(_)) => {
                return Err(Refusal::invalid(
                    "agent_id and create are mutually exclusive",
                ))
            }
            (Some(Value::Object(fields)), None) => {
                Command::DirectBind(Bind::Create(create(fields)?))
            }
            (Some(_), None) => return Err(Refusal::invalid("create must be an object")),
            (None, Some(agent)) => Command::DirectBind(Bind::Agent(agent.clone())),
            (None, None) => return Err(Refusal::invalid("agent_id or create is required")),
        },
        "prompt" => {
            let message = req_str(b, "message")?.to_string();
            let images = images(b)?;
            let follow_up = match opt_str(b, "streaming_behavior")? {
                None => false,
                Some("follow_up") => true,
                Some("steer") => {
                    return Ok(Command::Unsupported {
                        what: "streaming_behavior steer",
                        why: NO_STEER,
                    })
                }
                Some(other) => {
                    return Err(Refusal::invalid(format!(
                        "streaming_behavior must be steer or follow_up, not {other:?}"
                    )))
                }
            };
            if message.is_empty() && images.is_empty() {
                return Err(Refusal::invalid("message must not be empty"));
            }
            Command::Prompt {
                message,
                images,
                follow_up,
            }
        }
        "steer" => Command::Unsupported {
            what: "steer",
            why: NO_STEER,
        },
        "abort" => Command::Abort,
        "list_modes" => Command::ListModes,
        "set_mode" => Command::SetMode {
            mode: req_str(b, "mode")?.to_string(),
        },
        "list_models" => Command::ListModels,
        "set_model" => Command::Unsupported {
            what: "set_model",
            why: NO_MODEL_SWITCH,
        },
        "list_reasoning_levels" | "set_reasoning_level" => Command::Unsupported {
            what: "reasoning levels",
            why: NO_REASONING,
        },
        "session_op" => match req_str(b, "op")? {
            "compact" => {
                if let Some(args) = b.get("args").filter(|a| !a.is_null()) {
                    let Value::Object(args) = args else {
                        return Err(Refusal::invalid("args must be an object"));
                    };
                    if let Some(keep) = args.get("keep_recent_tokens") {
                        if keep.as_u64().is_none_or(|n| n == 0) {
                            return Err(Refusal::invalid(
                                "keep_recent_tokens must be a positive integer",
                            ));
                        }
                        return Ok(Command::Unsupported {
                            what: "keep_recent_tokens",
                            why: "the worker's compaction takes no token budget",
                        });
                    }
                }
                Command::SessionCompact
            }
            "list" => Command::SessionList,
            "fork" => {
                let from = b
                    .get("args")
                    .and_then(|a| a.get("from_entry_id"))
                    .and_then(Value::as_str);
                if from.is_none_or(str::is_empty) {
                    return Err(Refusal::invalid(
                        "args.from_entry_id must be a non-empty string",
                    ));
                }
                Command::Unsupported {
                    what: "session_op fork",
                    why: NO_FORK,
                }
            }
            other => {
                return Err(Refusal::invalid(format!(
                    "op must be list, compact or fork, not {other:?}"
                )))
            }
        },
        "permission_response" => {
            let request_id = req_str(b, "request_id")?.to_string();
            let reason = opt_str(b, "reason")?.map(str::to_string);
            let choice = b.get("choice_id").filter(|v| !v.is_null());
            let decision = b.get("decision").filter(|v| !v.is_null());
            let decision = match (choice, decision) {
                (Some(_), Some(_)) => {
                    return Err(Refusal::invalid(
                        "choice_id and decision are mutually exclusive",
                    ))
                }
                (None, None) => return Err(Refusal::invalid("decision is required")),
                (Some(choice), None) => {
                    // This hub offers no structured choices, so no
                    // choice id names one (the request stays pending).
                    let shown = choice.as_str().unwrap_or("");
                    return Err(Refusal::invalid(format!(
                        "unknown choice_id {shown:?}: this request offers no choices"
                    )));
                }
                (None, Some(decision)) => match decision.as_str() {
                    Some("allow") => Decision::Allow,
                    Some("deny") => Decision::Deny,
                    Some("allow_always") => Decision::AllowAlways,
                    _ => {
                        return Err(Refusal::invalid(
                            "decision must be allow, allow_always or deny",
                        ))
                    }
                },
            };
            Command::PermissionResponse {
                request_id,
                decision,
                reason,
            }
        }
        "ui_response" => {
            if !b.contains_key("value") {
                return Err(Refusal::invalid("value is required"));
            }
            Command::UiResponse {
                request_id: req_str(b, "request_id")?.to_string(),
            }
        }
        k if k.starts_with("subagent.") => Command::Unsupported {
            what: "subagent jobs",
            why: NO_SUBAGENT_JOBS,
        },
        k if k.starts_with("workspace.") => Command::Unsupported {
            what: "workspaces",
            why: NO_WORKSPACES,
        },
        other => return Err(Refusal::invalid(format!("unknown message type {other:?}"))),
    })
}

/// `agent.create`'s fields; the managed-child and tool fields are refused.
fn create(b: &Map<String, Value>) -> Result<Create, Refusal> {
    for field in [
        "tools",
        "skills",
        "system_prompt",
        "launch_policy",
        "alias",
        "definition_name",
        "display_name",
        "names",
        "headless_policy",
    ] {
        if b.get(field).is_some_and(|v| !v.is_null()) {
            return Err(Refusal::unsupported(
                field,
                "the worker's tools, prompts and policies come from its configuration",
            ));
        }
    }
    if b.get("parent_agent_id").is_some_and(|v| !v.is_null())
        || b.get("depth").is_some_and(|v| !v.is_null())
    {
        return Err(Refusal::unsupported(
            "parent_agent_id",
            "headless children are forked by their parent worker",
        ));
    }
    let cwd = req_str(b, "cwd")?;
    if !cwd.starts_with('/') || cwd.contains('\0') {
        return Err(Refusal::invalid("cwd must be an absolute path"));
    }
    Ok(Create {
        cwd: cwd.to_string(),
        session_id: opt_str(b, "session_id")?.map(str::to_string),
        name: opt_str(b, "name")?.map(str::to_string),
        model: opt_str(b, "model")?.map(str::to_string),
        provider: opt_str(b, "provider")?.map(str::to_string),
        mode: opt_str(b, "mode")?.map(str::to_string),
    })
}

/// `images: [{type: "image", data, mime_type}]`.
fn images(b: &Map<String, Value>) -> Result<Vec<Image>, Refusal> {
    let Some(list) = b.get("images").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Array(list) = list else {
        return Err(Refusal::invalid("images must be an array"));
    };
    list.iter()
        .map(|image| {
            let image = image
                .as_object()
                .ok_or_else(|| Refusal::invalid("an image must be an object"))?;
            if image.get("type").and_then(Value::as_str) != Some("image") {
                return Err(Refusal::invalid("an image's type must be \"image\""));
            }
            let data = req_str(image, "data")?;
            let mime_type = req_str(image, "mime_type")?;
            if data.is_empty() || mime_type.is_empty() {
                return Err(Refusal::invalid("an image needs data and mime_type"));
            }
            Ok(Image {
                data: data.to_string(),
                mime_type: mime_type.to_string(),
            })
        })
        .collect()
}

fn req_str<'a>(b: &'a Map<String, Value>, key: &str) -> Result<&'a str, Refusal> {
    b.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Refusal::invalid(format!("{key} must be a string")))
}

fn opt_str<'a>(b: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, Refusal> {
    match b.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Refusal::invalid(format!("{key} must be a string"))),
    }
}

fn opt_bool(b: &Map<String, Value>, key: &str) -> Result<Option<bool>, Refusal> {
    match b.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(v)) => Ok(Some(*v)),
        Some(_) => Err(Refusal::invalid(format!("{key} must be a boolean"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::shard::message::{self, Code};

    fn cmd(v: Value) -> Result<Command, Refusal> {
        parse(&message::parse(&v.to_string()).unwrap())
    }

    #[test]
    fn every_seed_type_has_a_scope() {
        for kind in [
            "agent.list",
            "agent.create",
            "agent.attach",
            "agent.detach",
            "agent.terminate",
            "agent.kill",
            "agent.status",
            "daemon.shutdown",
            "subagent.create",
            "workspace.list",
        ] {
            assert_eq!(scope(kind), Some(Scope::Orchestrator), "{kind}");
        }
        for kind in [
            "prompt",
            "steer",
            "abort",
            "list_modes",
            "set_mode",
            "list_models",
            "set_model",
            "session_op",
            "permission_response",
            "ui_response",
        ] {
            assert_eq!(scope(kind), Some(Scope::Agent), "{kind}");
        }
        assert_eq!(scope("tool_call"), None);
        assert_eq!(
            cmd(json!({"type": "nope"})).unwrap_err().code,
            Code::InvalidRequest
        );
    }

    #[test]
    fn prompts_take_text_images_and_follow_up_only() {
        let p = cmd(json!({"type": "prompt", "agent_id": "a", "message": "hi",
            "streaming_behavior": "follow_up",
            "images": [{"type": "image", "data": "AAAA", "mime_type": "image/png"}]}))
        .unwrap();
        assert_eq!(
            p,
            Command::Prompt {
                message: "hi".into(),
                images: vec![Image {
                    data: "AAAA".into(),
                    mime_type: "image/png".into()
                }],
                follow_up: true
            }
        );
        assert!(matches!(
            cmd(json!({"type": "prompt", "message": "x", "streaming_behavior": "steer"})),
            Ok(Command::Unsupported {
                what: "streaming_behavior steer",
                ..
            })
        ));
        for bad in [
            json!({"type": "prompt"}),
            json!({"type": "prompt", "message": ""}),
            json!({"type": "prompt", "message": 3}),
            json!({"type": "prompt", "message": "x", "streaming_behavior": "later"}),
            json!({"type": "prompt", "message": "x", "images": [{"type": "png"}]}),
        ] {
            assert_eq!(
                cmd(bad.clone()).unwrap_err().code,
                Code::InvalidRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn permission_responses_are_one_legacy_decision() {
        assert_eq!(
            cmd(json!({"type": "permission_response", "request_id": "r", "decision": "deny", "reason": "no"}))
                .unwrap(),
            Command::PermissionResponse {
                request_id: "r".into(),
                decision: Decision::Deny,
                reason: Some("no".into())
            }
        );
        assert!(matches!(
            cmd(
                json!({"type": "permission_response", "request_id": "r", "decision": "allow_always"})
            ),
            Ok(Command::PermissionResponse {
                decision: Decision::AllowAlways,
                ..
            })
        ));
        for bad in [
            json!({"type": "permission_response", "request_id": "r"}),
            json!({"type": "permission_response", "request_id": "r", "choice_id": "c"}),
            json!({"type": "permission_response", "request_id": "r", "choice_id": "c", "decision": "allow"}),
            json!({"type": "permission_response", "decision": "allow"}),
            json!({"type": "permission_response", "request_id": "r", "decision": "maybe"}),
        ] {
            assert_eq!(
                cmd(bad.clone()).unwrap_err().code,
                Code::InvalidRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn creates_need_an_absolute_cwd_and_refuse_managed_fields() {
        let c = cmd(json!({"type": "agent.create", "cwd": "/w", "provider": "mock", "name": "n"}))
            .unwrap();
        let Command::AgentCreate(c) = c else { panic!() };
        assert_eq!(
            (c.cwd.as_str(), c.provider.as_deref()),
            ("/w", Some("mock"))
        );
        for bad in [
            json!({"type": "agent.create"}),
            json!({"type": "agent.create", "cwd": "rel"}),
            json!({"type": "agent.create", "cwd": "/w", "tools": ["x"]}),
            json!({"type": "agent.create", "cwd": "/w", "parent_agent_id": "p"}),
        ] {
            assert_eq!(
                cmd(bad.clone()).unwrap_err().code,
                Code::InvalidRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bind_names_one_agent_or_creates_one() {
        assert_eq!(scope("direct.bind"), Some(Scope::Connection));
        assert_eq!(
            cmd(json!({"type": "direct.bind", "agent_id": "a"})).unwrap(),
            Command::DirectBind(Bind::Agent("a".into()))
        );
        let Command::DirectBind(Bind::Create(c)) =
            cmd(json!({"type": "direct.bind", "create": {"cwd": "/w", "model": "m"}})).unwrap()
        else {
            panic!()
        };
        assert_eq!((c.cwd.as_str(), c.model.as_deref()), ("/w", Some("m")));
        for bad in [
            json!({"type": "direct.bind"}),
            json!({"type": "direct.bind", "create": "/w"}),
            json!({"type": "direct.bind", "create": {"cwd": "rel"}}),
            json!({"type": "direct.bind", "agent_id": "a", "create": {"cwd": "/w"}}),
        ] {
            assert_eq!(
                cmd(bad.clone()).unwrap_err().code,
                Code::InvalidRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn session_ops_and_the_unsupported_rest() {
        assert_eq!(
            cmd(json!({"type": "session_op", "op": "compact"})).unwrap(),
            Command::SessionCompact
        );
        assert_eq!(
            cmd(json!({"type": "session_op", "op": "list"})).unwrap(),
            Command::SessionList
        );
        assert_eq!(
            cmd(json!({"type": "session_op", "op": "fork"}))
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
        assert_eq!(
            cmd(json!({"type": "session_op", "op": "compact", "args": {"keep_recent_tokens": 0}}))
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
        for kind in [
            json!({"type": "session_op", "op": "fork", "args": {"from_entry_id": "e"}}),
            json!({"type": "steer", "message": "x"}),
            json!({"type": "set_model", "model": "m"}),
            json!({"type": "subagent.create"}),
        ] {
            assert!(
                matches!(cmd(kind.clone()), Ok(Command::Unsupported { .. })),
                "{kind}"
            );
        }
        assert_eq!(
            cmd(json!({"type": "agent.attach", "agent_id": "a", "role": "observer"})).unwrap(),
            Command::AgentAttach {
                agent_id: "a".into(),
                role: Role::Observer
            }
        );
        assert_eq!(
            cmd(json!({"type": "agent.attach", "agent_id": "a", "role": "boss"}))
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
    }
}
