//! One Shard connection's own state, pure: the agents it is attached to
//! (role, what it may see, the last transcript entry delivered, the
//! permission requests shown) and the commands whose `response` waits for
//! the worker (a prompt until the worker admits or rejects it, a
//! compaction until it finishes).

use std::collections::{HashMap, HashSet};

use crate::ops::sessions::Watch;
use crate::session::RequestState;
use crate::wire::shard::catalog::Role;

/// Commands one connection may have waiting for the worker at once.
pub const MAX_PENDING: usize = 256;

/// One agent this connection is attached to.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub role: Role,
    pub watch: Watch,
    /// Newest `hub_sequence` delivered (by `sync` or live).
    pub cursor: u64,
    /// Permission requests shown (in `sync` or live), so none is shown
    /// twice.
    shown: HashSet<String>,
    /// Its last `sync` was of a ready runtime (a worker connected that had
    /// told its capabilities); when not, the next one's `ready` brings a
    /// fresh `sync`.
    pub ready: bool,
}

/// What a waiting command waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaiting {
    /// A prompt: the worker's admission or rejection.
    Prompt,
    /// A follow-up prompt, answered as soon as it is sent (seed 004 §9.2:
    /// success means accepted or queued): only a rejection, or an unknown
    /// outcome, is told later, as an `error` event.
    Queued,
    /// A compaction: admission, then its `compact_finished` or its run's
    /// end.
    Compact { admitted: bool },
}

/// A command whose `response` waits for the worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub agent: String,
    /// The payload's request id.
    pub request_id: String,
    /// The command's correlation id and type, for its `response`.
    pub id: Option<String>,
    pub command: &'static str,
    pub awaiting: Awaiting,
}

/// How the worker settled a payload (its request record's `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Admitted,
    Rejected,
    Unknown,
}

impl Settled {
    /// How a request in `state` settled (`None` while it is sent).
    pub fn of(state: RequestState) -> Option<Settled> {
        match state {
            RequestState::Sent => None,
            RequestState::Admitted => Some(Settled::Admitted),
            RequestState::Rejected => Some(Settled::Rejected),
            RequestState::Unknown => Some(Settled::Unknown),
        }
    }
}

/// Delegated requests one connection holds at most (the oldest is
/// forgotten first; it can still be answered from the child's own
/// attachment or the panel).
pub const MAX_DELEGATED: usize = 256;

/// A connection's attachments and waiting commands.
#[derive(Debug, Default)]
pub struct ConnState {
    attachments: HashMap<String, Attachment>,
    pending: Vec<Pending>,
    /// Requests of descendants shown here through an interactive
    /// attachment to their nearest interactive ancestor (seed 004 §6.3):
    /// Oldest first. This connection may answer them without being
    /// attached to the child.
    delegated: Vec<Delegated>,
}

/// A descendant's request shown through an ancestor's attachment.
#[derive(Debug)]
struct Delegated {
    ancestor: String,
    child: String,
    request_id: String,
}

impl ConnState {
    /// Attaches (or re-attaches, starting over) to `agent`, delivered up
    /// to `cursor`, with `shown` requests already on screen.
    pub fn attach(
        &mut self,
        agent: &str,
        role: Role,
        watch: Watch,
        cursor: u64,
        shown: impl IntoIterator<Item = String>,
        ready: bool,
    ) -> bool {
        let again = self.attachments.contains_key(agent);
        self.attachments.insert(
            agent.to_string(),
            Attachment {
                role,
                watch,
                cursor,
                shown: shown.into_iter().collect(),
                ready,
            },
        );
        !again
    }

    /// Neither attached to an agent nor waiting for a command (a
    /// connection may become a direct one only then).
    pub fn is_idle(&self) -> bool {
        self.attachments.is_empty() && self.pending.is_empty()
    }

    /// Detaches; false when it was not attached.
    pub fn detach(&mut self, agent: &str) -> bool {
        self.attachments.remove(agent).is_some()
    }

    /// Detaches from everything (the connection ends); returns the agents.
    pub fn detach_all(&mut self) -> Vec<String> {
        self.pending.clear();
        self.delegated.clear();
        self.attachments.drain().map(|(agent, _)| agent).collect()
    }

    pub fn attachment(&self, agent: &str) -> Option<&Attachment> {
        self.attachments.get(agent)
    }

    /// Whether a transcript event of `agent` is to be delivered: attached
    /// with the whole transcript in view, and newer than the cursor (which
    /// it advances). `seq` `None` is a transient event (always, when
    /// attached).
    pub fn take_event(&mut self, agent: &str, seq: Option<u64>) -> bool {
        let Some(a) = self.attachments.get_mut(agent) else {
            return false;
        };
        if a.watch != Watch::Everything {
            return false;
        }
        match seq {
            Some(seq) if seq > a.cursor => {
                a.cursor = seq;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Whether permission request `request_id` of `agent` is to be shown
    /// now: an attachment that has not seen it (it is then marked seen).
    /// Observers see requests too (seed 004 §6.3: broadcast to every
    /// attached client); they cannot answer them.
    pub fn show_request(&mut self, agent: &str, request_id: &str) -> bool {
        match self.attachments.get_mut(agent) {
            Some(a) => a.shown.insert(request_id.to_string()),
            None => false,
        }
    }

    /// The agent's runtime went away: its next `ready` re-syncs this
    /// attachment.
    pub fn unready(&mut self, agent: &str) {
        if let Some(a) = self.attachments.get_mut(agent) {
            a.ready = false;
        }
    }

    /// Whether this attachment is to get a fresh `sync` now that the
    /// agent's runtime is ready (its last was not a ready runtime's); it is
    /// then taken as sent.
    pub fn resync_due(&mut self, agent: &str) -> bool {
        match self.attachments.get_mut(agent) {
            Some(a) if !a.ready => {
                a.ready = true;
                true
            }
            _ => false,
        }
    }

    /// Whether this connection is attached to `agent` (resolutions and
    /// status go to every attachment).
    pub fn attached(&self, agent: &str) -> bool {
        self.attachments.contains_key(agent)
    }

    /// Request `request_id` of descendant `child` is shown here through an
    /// interactive attachment to `ancestor`; false when it already was.
    pub fn delegate(&mut self, ancestor: &str, child: &str, request_id: &str) -> bool {
        if self
            .delegated
            .iter()
            .any(|d| d.child == child && d.request_id == request_id)
        {
            return false;
        }
        if self.delegated.len() >= MAX_DELEGATED {
            self.delegated.remove(0);
        }
        self.delegated.push(Delegated {
            ancestor: ancestor.to_string(),
            child: child.to_string(),
            request_id: request_id.to_string(),
        });
        true
    }

    /// Whether this connection may answer request `request_id` of `child`
    /// as its delegate: it was delegated here and the attachment to the
    /// ancestor it came through is still interactive.
    pub fn answers_for(&self, child: &str, request_id: &str) -> bool {
        self.delegated.iter().any(|d| {
            d.child == child && d.request_id == request_id && self.interactive(&d.ancestor)
        })
    }

    /// The delegated request resolved: forgotten; whether it was here.
    pub fn undelegate(&mut self, child: &str, request_id: &str) -> bool {
        let before = self.delegated.len();
        self.delegated
            .retain(|d| !(d.child == child && d.request_id == request_id));
        self.delegated.len() != before
    }

    /// Whether this connection may answer `agent`'s requests: attached to
    /// it as interactive.
    pub fn interactive(&self, agent: &str) -> bool {
        self.attachments
            .get(agent)
            .is_some_and(|a| a.role == Role::Interactive)
    }

    /// A command now waits for the worker; false when too many already do.
    pub fn wait(&mut self, pending: Pending) -> bool {
        if self.pending.len() >= MAX_PENDING {
            return false;
        }
        self.pending.push(pending);
        true
    }

    /// The command that waited on `request_id` is no longer waiting (its
    /// send failed).
    pub fn forget(&mut self, request_id: &str) -> Option<Pending> {
        let pos = self
            .pending
            .iter()
            .position(|p| p.request_id == request_id)?;
        Some(self.pending.remove(pos))
    }

    /// The worker settled payload `request_id` of `agent`: the command to
    /// answer now, if one waited for that. An admitted compaction waits on
    /// for its end.
    pub fn settle(&mut self, agent: &str, request_id: &str, how: Settled) -> Option<Pending> {
        let pos = self
            .pending
            .iter()
            .position(|p| p.agent == agent && p.request_id == request_id)?;
        let pending = &mut self.pending[pos];
        if let (Awaiting::Compact { admitted }, Settled::Admitted) = (&mut pending.awaiting, how) {
            *admitted = true;
            return None;
        }
        Some(self.pending.remove(pos))
    }

    /// The admitted compaction of `agent` under `request_id`, if one
    /// waits for its end (which has come).
    pub fn finish(&mut self, agent: &str, request_id: &str) -> Option<Pending> {
        let pos = self.pending.iter().position(|p| {
            p.agent == agent
                && p.request_id == request_id
                && p.awaiting == Awaiting::Compact { admitted: true }
        })?;
        Some(self.pending.remove(pos))
    }

    /// Every admitted compaction of `agent`: its worker's connection
    /// closed, so no end will be reported.
    pub fn orphaned(&mut self, agent: &str) -> Vec<Pending> {
        let (gone, kept) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.agent == agent && p.awaiting == Awaiting::Compact { admitted: true });
        self.pending = kept;
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(request_id: &str, awaiting: Awaiting) -> Pending {
        Pending {
            agent: "a".into(),
            request_id: request_id.into(),
            id: Some("c1".into()),
            command: "prompt",
            awaiting,
        }
    }

    #[test]
    fn a_delegated_request_is_answerable_while_the_ancestor_attachment_is_interactive() {
        let mut c = ConnState::default();
        assert!(c.attach("p", Role::Interactive, Watch::Everything, 0, [], true));
        assert!(c.delegate("p", "child", "r1"));
        assert!(!c.delegate("p", "child", "r1"), "once");
        assert!(c.answers_for("child", "r1"));
        assert!(!c.answers_for("child", "r2"));
        assert!(!c.answers_for("other", "r1"));
        // Re-attached as an observer: no longer a delegate.
        c.attach("p", Role::Observer, Watch::Everything, 0, [], true);
        assert!(!c.answers_for("child", "r1"));
        c.attach("p", Role::Interactive, Watch::Everything, 0, [], true);
        assert!(c.answers_for("child", "r1"));
        assert!(c.undelegate("child", "r1"));
        assert!(!c.undelegate("child", "r1"));
        assert!(!c.answers_for("child", "r1"));
        // Bounded: the oldest is forgotten first.
        for i in 0..=MAX_DELEGATED {
            c.delegate("p", "child", &format!("x{i}"));
        }
        assert!(!c.answers_for("child", "x0"));
        assert!(c.answers_for("child", &format!("x{MAX_DELEGATED}")));
        c.detach_all();
        assert!(!c.answers_for("child", &format!("x{MAX_DELEGATED}")));
    }

    #[test]
    fn events_are_delivered_once_after_the_cursor() {
        let mut c = ConnState::default();
        assert!(!c.take_event("a", Some(1)), "not attached");
        assert!(c.attach("a", Role::Observer, Watch::Everything, 5, [], true));
        assert!(!c.take_event("a", Some(5)), "already in the sync");
        assert!(c.take_event("a", Some(6)));
        assert!(!c.take_event("a", Some(6)));
        assert!(c.take_event("a", None));
        // A child's transcript is not shown.
        assert!(!c.attach("a", Role::Interactive, Watch::Approvals, 0, [], true));
        assert!(!c.take_event("a", Some(9)));
        assert!(c.detach("a"));
        assert!(!c.detach("a"));
        assert!(!c.attached("a"));
    }

    #[test]
    fn requests_are_shown_to_every_attachment_once() {
        let mut c = ConnState::default();
        c.attach(
            "a",
            Role::Interactive,
            Watch::Everything,
            0,
            ["p1".to_string()],
            false,
        );
        assert!(!c.show_request("a", "p1"), "shown in the sync");
        // Attached before the runtime was ready: re-synced once.
        assert!(c.resync_due("a"));
        assert!(!c.resync_due("a"));
        c.unready("a");
        assert!(c.resync_due("a"));
        assert!(!c.resync_due("x"), "not attached");
        assert!(c.show_request("a", "p2"));
        assert!(!c.show_request("a", "p2"));
        c.attach("o", Role::Observer, Watch::Everything, 0, [], true);
        assert!(c.show_request("o", "p3"), "observers see requests");
        assert!(!c.show_request("o", "p3"));
        assert!(!c.show_request("x", "p3"), "not attached");
    }

    #[test]
    fn prompts_settle_once_and_compactions_wait_for_their_end() {
        let mut c = ConnState::default();
        assert!(c.wait(pending("q1", Awaiting::Prompt)));
        assert!(c.wait(pending("q2", Awaiting::Compact { admitted: false })));
        assert!(
            c.settle("b", "q1", Settled::Admitted).is_none(),
            "another agent"
        );
        assert_eq!(
            c.settle("a", "q1", Settled::Admitted).unwrap().request_id,
            "q1"
        );
        assert!(c.settle("a", "q1", Settled::Rejected).is_none(), "once");
        assert!(c.settle("a", "q2", Settled::Admitted).is_none());
        assert!(c.finish("a", "q1").is_none());
        assert_eq!(c.finish("a", "q2").unwrap().request_id, "q2");
        c.wait(pending("q3", Awaiting::Compact { admitted: false }));
        assert_eq!(
            c.settle("a", "q3", Settled::Unknown).unwrap().request_id,
            "q3"
        );
        c.wait(pending("q4", Awaiting::Compact { admitted: false }));
        c.settle("a", "q4", Settled::Admitted);
        c.wait(pending("q5", Awaiting::Prompt));
        let gone = c.orphaned("a");
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].request_id, "q4");
        assert!(c.forget("q5").is_some());
        for i in 0..MAX_PENDING {
            assert!(c.wait(pending(&format!("x{i}"), Awaiting::Prompt)));
        }
        assert!(!c.wait(pending("over", Awaiting::Prompt)));
    }
}
