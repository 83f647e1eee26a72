//! A session's plan: read from the store, replaced under the plan lock
//! (store commit, then the `plan.json` mirror, the session's cache and
//! the panel note, in that order).

use crate::session::Note;
use crate::util::{fsutil, time};
use crate::wire::worker::plan::PlanRecord;

use super::{HubError, Services};

/// The outcome of [`Services::replace_plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChange {
    pub plan: PlanRecord,
    /// False when the text was identical (nothing was written).
    pub changed: bool,
}

impl Services {
    /// The stored plan of session `id` (revision 0, empty, no timestamp
    /// when none was ever written).
    pub fn read_plan(&self, id: &str) -> Result<PlanRecord, HubError> {
        self.store.lock().get_plan(id).map_err(HubError::Store)
    }

    /// Replaces the plan of session `id` with `markdown` (already
    /// validated and normalized by the caller). Identical text changes
    /// nothing. Otherwise the revision is bumped and committed to the store
    /// first; then `plan.json` is mirrored (best effort: the store is the
    /// authority) and panels are notified. The caller answers the worker
    /// after this returns, so the commit precedes the reply.
    pub fn replace_plan(&self, id: &str, markdown: &str) -> Result<PlanChange, HubError> {
        let _publishing = self.plan_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.read_plan(id)?;
        if current.markdown == markdown {
            return Ok(PlanChange {
                plan: current,
                changed: false,
            });
        }
        let next = PlanRecord {
            markdown: markdown.to_string(),
            revision: current.revision + 1,
            updated_at: Some(time::now_rfc3339()),
        };
        self.store
            .lock()
            .put_plan(id, &next)
            .map_err(HubError::Store)?;
        let value = crate::wire::worker::plan::read_result(&next);
        let path = self.session_dir(id).join("plan.json");
        let text = serde_json::to_vec_pretty(&value).unwrap_or_default();
        if let Err(err) = fsutil::write_private_atomic(&path, &text) {
            log::warn!(
                "session {id}: plan revision {} stored, but {} not written: {err}",
                next.revision,
                path.display()
            );
        }
        log::info!("session {id}: plan revision {}", next.revision);
        // Published to the cache before the broadcast, under the lock that
        // subscriptions take: a subscriber sees this revision either in its
        // `subscribed` frame or in the `plan` message after it.
        self.sessions.with(id, |s| s.publish_plan(next.clone()));
        self.publisher.notify(Note::Plan {
            session: id.to_string(),
            plan: next.clone(),
        });
        Ok(PlanChange {
            plan: next,
            changed: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::PlanChange;
    use crate::services::testkit::open_services;
    use crate::services::HubError;
    use crate::util::testkit::TempDir;
    use crate::wire::worker::plan::PlanRecord;

    #[test]
    fn plans_bump_only_on_change_and_are_mirrored() {
        let tmp = TempDir::new("hub-plan");
        let hub = open_services(&tmp, json!({}));
        hub.create_session_with("p", None, |_| Ok::<(), HubError>(()))
            .unwrap();
        assert_eq!(hub.read_plan("p").unwrap(), PlanRecord::default());
        let first = hub.replace_plan("p", "# one").unwrap();
        assert!(first.changed);
        assert_eq!(first.plan.revision, 1);
        assert!(first.plan.updated_at.is_some());
        let same = hub.replace_plan("p", "# one").unwrap();
        assert_eq!(
            same,
            PlanChange {
                plan: first.plan.clone(),
                changed: false
            }
        );
        let cleared = hub.replace_plan("p", "").unwrap();
        assert_eq!((cleared.plan.revision, cleared.changed), (2, true));
        assert_eq!(
            hub.sessions.with("p", |s| s.plan().clone()),
            Some(cleared.plan.clone())
        );
        let file = hub.session_dir("p").join("plan.json");
        let mirrored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            mirrored,
            crate::wire::worker::plan::read_result(&cleared.plan)
        );
        // A session that does not exist cannot get a plan.
        assert!(matches!(
            hub.replace_plan("nope", "x"),
            Err(HubError::Store(_))
        ));
    }
}
