//! Typed views of a session and its parts: taken under the registry lock,
//! owning what they show (they outlive the lock), and rendered by each
//! front-end into its own wire: the panel protocol's JSON by
//! `panel::render` (the HTTP API's too), Shard's events by
//! `shard::render`, a child's status by the subagent routes. Nothing here
//! knows a wire; the one shape two wires share, a headless child's block,
//! is rendered once beside its record (`headless::block`).

use serde_json::{Map, Value};

use super::headless::{self, ChildView};
use super::{
    ClosedPrompt, IdentityState, Prompt, PromptState, RequestRecord, Session, Stats,
    MIN_PREVIEW_BYTES,
};
use crate::supervisor::process::ProcessView;
use crate::wire::worker::display;

/// One session as every front-end may show it.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub id: String,
    /// `ordinary` or `headless`.
    pub kind: String,
    pub created_at: String,
    /// The operator's launch spec (a headless child has none of its own).
    pub spec: Option<Value>,
    pub connected: bool,
    /// From the latest `ready`/`status` of the current connection.
    pub capabilities: Option<Vec<String>>,
    pub identity: IdentityView,
    pub stats: Stats,
    /// The run most recently named by an envelope.
    pub last_run_id: Option<String>,
    pub last_event_at: Option<String>,
    pub last_event: Option<String>,
    /// The open confirmation prompts, oldest first.
    pub confirmations: Vec<PromptView>,
    pub process: Option<ProcessView>,
    /// The most recent payload outcomes, oldest first.
    pub requests: Vec<RequestRecord>,
    /// Set for a headless child.
    pub child: Option<ChildView>,
}

/// What the hub knows of the worker's identity on its event connection.
#[derive(Debug, Clone)]
pub struct IdentityView {
    pub state: IdentityState,
    /// The worker id of the newest incarnation seen.
    pub worker_id: Option<String>,
    pub since: Option<String>,
}

/// A confirmation prompt as shown, its arguments previewed within a
/// budget. The decision always applies to the original call, never to
/// this preview.
#[derive(Debug, Clone)]
pub struct PromptView {
    pub session_id: String,
    /// A headless child's parent session: the prompt is labelled with the
    /// child and its parent, so an operator sees whose request it is.
    pub parent_session_id: Option<String>,
    pub confirmation_id: String,
    pub worker_id: String,
    pub run_id: String,
    pub state: PromptState,
    /// Closed without an answer.
    pub retired: bool,
    pub verified: bool,
    pub identity_state: IdentityState,
    pub received_at: String,
    pub deadline_at: String,
    pub settled_at: Option<String>,
    pub decision: Option<bool>,
    pub reason: Option<String>,
    /// The call object with its `arguments` previewed (a call that is not
    /// an object is shown as `{"value": …}`).
    pub call: Map<String, Value>,
    /// The arguments' encoded size, when the preview shortened them.
    pub arguments_bytes: Option<usize>,
}

impl PromptView {
    /// The tool the call names (empty when it names none).
    pub fn tool(&self) -> &str {
        self.call.get("name").and_then(Value::as_str).unwrap_or("")
    }

    /// The previewed arguments, if the call has any.
    pub fn arguments(&self) -> Option<&Value> {
        self.call.get("arguments")
    }
}

impl Prompt {
    /// This prompt in session `session_id` (of parent `parent` for a
    /// headless child), its arguments previewed within `budget` bytes of
    /// encoded JSON.
    pub fn view(&self, session_id: &str, parent: Option<&str>, budget: usize) -> PromptView {
        let mut call = match &self.request.call {
            Value::Object(map) => map.clone(),
            other => {
                let mut m = Map::new();
                m.insert("value".into(), other.clone());
                m
            }
        };
        let mut arguments_bytes = None;
        if let Some(args) = call.get("arguments") {
            let preview = display::preview(args, budget);
            if preview.truncated {
                arguments_bytes = Some(preview.original_bytes);
            }
            call.insert("arguments".into(), preview.value);
        }
        PromptView {
            session_id: session_id.to_string(),
            parent_session_id: parent.map(str::to_string),
            confirmation_id: self.request.confirmation_id.clone(),
            worker_id: self.request.worker_id.clone(),
            run_id: self.request.run_id.clone(),
            state: self.state,
            retired: false,
            verified: self.verified,
            identity_state: self.identity_state,
            received_at: self.received_at.clone(),
            deadline_at: self.deadline_at.clone(),
            settled_at: self.settled_at.clone(),
            decision: self.decision,
            reason: self.reason.clone(),
            call,
            arguments_bytes,
        }
    }
}

impl ClosedPrompt {
    /// Its final view: an unanswered one is retired.
    pub fn view(&self) -> PromptView {
        let mut view = self.prompt.view(
            &self.session_id,
            self.parent_session_id.as_deref(),
            super::PROMPT_PREVIEW_BYTES,
        );
        view.retired = self.prompt.decision.is_none();
        view
    }
}

impl Session {
    /// The view with approval `i`'s preview bounded to `budget(i)` (at
    /// least [`MIN_PREVIEW_BYTES`]).
    pub fn view(&self, budget: &mut dyn FnMut(usize) -> usize) -> SessionView {
        let child = self.headless().map(|c| headless::view(self, c));
        SessionView {
            id: self.id().to_string(),
            kind: self.kind().to_string(),
            created_at: self.created_at().to_string(),
            // No operator spec for a child: an empty one, as the Node hub
            // shows it.
            spec: child.is_none().then(|| self.spec().clone()),
            connected: self.connected(),
            capabilities: self.capabilities().map(<[String]>::to_vec),
            identity: self.identity_view(),
            stats: self.stats().clone(),
            last_run_id: self.last_run_id().map(str::to_string),
            last_event_at: self.last_event_at().map(str::to_string),
            last_event: self.last_event().map(str::to_string),
            confirmations: self
                .prompts()
                .iter()
                .enumerate()
                .map(|(i, p)| self.prompt_view(p, budget(i).max(MIN_PREVIEW_BYTES)))
                .collect(),
            process: self.process_view(),
            requests: self.requests().cloned().collect(),
            child,
        }
    }

    /// The worker identity as shown.
    pub fn identity_view(&self) -> IdentityView {
        IdentityView {
            state: self.identity(),
            worker_id: self.worker_id().map(str::to_string),
            since: self.identity_since().map(str::to_string),
        }
    }

    /// A prompt of this session, previewed within `budget`; a headless
    /// child's prompt names its parent.
    pub fn prompt_view(&self, prompt: &Prompt, budget: usize) -> PromptView {
        let parent = self.headless().map(|c| c.parent().session_id.as_str());
        prompt.view(self.id(), parent, budget)
    }
}
