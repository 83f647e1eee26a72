//! A session's creation (validated, recorded durably, its directory
//! made, prepared, then visible) and removal (refused while busy; the
//! record, then the files).

use std::path::Path;

use serde_json::Value;

use crate::session::{self, SessionView};
use crate::store::{SessionRecord, StoreError};
use crate::util::{fsutil, time};

use super::{HubError, Services};

impl Services {
    /// Creates a session: validates, records it durably, creates its
    /// directory, runs `prepare` on it (a configuration snapshot), then
    /// makes it visible. A failed `prepare` undoes the creation.
    pub fn create_session_with<E: From<HubError>>(
        &self,
        id: &str,
        spec: Option<&Value>,
        prepare: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<SessionView, E> {
        session::check_new_id(id).map_err(|e| HubError::InvalidSession(e.to_string()))?;
        let spec = session::normalize_spec(spec, &self.spec_defaults())
            .map_err(|e| HubError::InvalidSession(e.to_string()))?;
        if self.sessions.contains(id) {
            return Err(HubError::SessionExists(id.into()).into());
        }
        let record = SessionRecord {
            id: id.into(),
            created_at: time::now_rfc3339(),
            spec,
            token: new_token(),
            lifecycle_id: uuid::Uuid::new_v4().to_string(),
            kind: "ordinary".into(),
        };
        match self.store.lock().insert_session(&record) {
            Ok(()) => {}
            Err(StoreError::SessionExists { .. }) => {
                return Err(HubError::SessionExists(id.into()).into())
            }
            Err(err) => return Err(HubError::Store(err).into()),
        }
        let dir = self.session_dir(id);
        let existed = std::fs::symlink_metadata(&dir).is_ok();
        if let Err(err) = fsutil::create_private_dir(&dir) {
            let _ = self.store.lock().delete_session(id);
            return Err(HubError::Files { path: dir, err }.into());
        }
        if let Err(err) = prepare(&dir) {
            let _ = self.store.lock().delete_session(id);
            if !existed {
                let _ = remove_session_dir(&dir);
            }
            return Err(err);
        }
        let created = self.new_session(record);
        let view = created.view(&mut |_| session::PROMPT_PREVIEW_BYTES);
        self.sessions.insert(created);
        log::info!("session {id} created");
        Ok(view)
    }

    /// Deletes a session that is not busy: the store record, then the whole
    /// session directory.
    pub fn delete_session(&self, id: &str) -> Result<(), HubError> {
        self.sessions
            .with(id, |s| s.begin_removal())
            .ok_or_else(|| HubError::UnknownSession(id.into()))?
            .map_err(|reason| HubError::SessionBusy {
                id: id.into(),
                reason,
            })?;
        let result = self
            .store
            .lock()
            .delete_session(id)
            .map_err(HubError::Store);
        if let Err(err) = result {
            self.sessions.with(id, |s| s.cancel_removal());
            return Err(err);
        }
        // Taken out of the registry first: the files are closed with no
        // lock held, before the directory goes.
        let removed = self.sessions.remove(id);
        if let Some(mut removed) = removed {
            let log_file = removed.take_log_file();
            for file in removed.events_file().into_iter().chain(log_file.as_ref()) {
                file.close(std::time::Duration::from_millis(200));
            }
        }
        let dir = self.session_dir(id);
        if let Err(err) = remove_session_dir(&dir) {
            // The session is gone from the store; a leftover directory is
            // reported, and a later create of the same id starts over it.
            log::warn!("session {id} removed, but {} remains: {err}", dir.display());
        }
        log::info!("session {id} deleted");
        Ok(())
    }
}

/// Removes a session directory without following a symlink in its place.
pub fn remove_session_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "refusing to delete through a symlink",
        )),
        Ok(_) => std::fs::remove_dir_all(dir),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// A fresh per-session worker token: 256 random bits as hex.
pub fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
