//! Configuration library commands (`library`): list, templates, read,
//! save, delete, rename, validate and the endpoint preview; and replacing
//! a stopped session's configuration snapshot. Sessions created from the
//! library go through `sessions::create`.

use serde_json::{json, Map, Value};

use super::{operable, ErrorKind, OpError};
use crate::hub::Hub;
use crate::library::store::{ConfigFile, Library};
use crate::library::{launch, template, Kind, LibraryError, Selection, TemplateSource};
use crate::session::Note;
use crate::supervisor::render;

/// The library's file names by kind (never their text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub launch: Vec<String>,
    pub worker: Vec<String>,
}

pub fn list(hub: &Hub) -> Result<Listing, OpError> {
    Ok(Listing {
        launch: hub.library.list(Kind::Launch)?,
        worker: hub.library.list(Kind::Worker)?,
    })
}

/// A template's text (`source` absent means `default`).
pub fn template(hub: &Hub, kind: &str, source: Option<&str>) -> Result<String, OpError> {
    let kind = Kind::parse(kind)?;
    let source = TemplateSource::parse(source)?;
    // The spec a new session of this hub would get (the mock profile's
    // while the offline provider is on).
    let raw = if hub.config.mock.enabled {
        json!({"provider": hub.config.mock.profile})
    } else {
        json!({})
    };
    let spec = hub
        .normalize_spec(&raw)
        .map_err(|e| OpError::new(ErrorKind::Internal, e.to_string()))?;
    Ok(template::template(&hub.config, &spec, kind, source)?)
}

pub fn read(hub: &Hub, kind: &str, id: &str) -> Result<ConfigFile, OpError> {
    Ok(hub.library.read(Kind::parse(kind)?, id)?)
}

/// Saves `text` as `id`: `revision` `None` creates, else it must be the
/// file's current revision.
pub fn save(
    hub: &Hub,
    kind: &str,
    id: &str,
    text: &str,
    revision: Option<&str>,
) -> Result<ConfigFile, OpError> {
    Ok(hub.library.save(Kind::parse(kind)?, id, text, revision)?)
}

pub fn validate(kind: &str, text: &str) -> Result<(), OpError> {
    Ok(Library::validate(Kind::parse(kind)?, text)?)
}

pub fn remove(hub: &Hub, kind: &str, id: &str, revision: Option<&str>) -> Result<(), OpError> {
    Ok(hub.library.remove(Kind::parse(kind)?, id, revision)?)
}

pub fn rename(
    hub: &Hub,
    kind: &str,
    id: &str,
    to: &str,
    revision: Option<&str>,
) -> Result<ConfigFile, OpError> {
    Ok(hub.library.rename(Kind::parse(kind)?, id, to, revision)?)
}

/// The endpoints a worker launched from the launch file `text` would be
/// given, with `SESSION_ID` and `SESSION_TOKEN` for a session's identity:
/// this hub's live listeners, or the file's advertised origins and connect
/// host.
pub fn preview(hub: &Hub, text: &str) -> Result<render::Endpoints, OpError> {
    if text.len() > crate::library::MAX_FILE_BYTES {
        return Err(LibraryError::TooLarge("a configuration is at most 1 MiB".into()).into());
    }
    let doc = launch::parse(text)?;
    let config = doc.apply(&hub.config, std::path::Path::new("/"));
    let (main, tools) = hub.worker_addrs();
    Ok(render::session_endpoints(
        &config,
        main,
        tools,
        launch::PREVIEW_SESSION,
        launch::PREVIEW_TOKEN,
    ))
}

/// `POST /api/sessions/:id/configurations`: replaces the configuration
/// snapshot of session `id`, which must be stopped and disconnected, with
/// the pair `body` names, and records the pair in its spec. Answers the
/// session's description.
pub fn apply(
    hub: &Hub,
    id: &str,
    body: &Map<String, Value>,
) -> Result<crate::session::SessionView, OpError> {
    operable(hub, id, "a configuration snapshot")?;
    let selected = Selection::from_object(body)
        .map_err(|e| OpError::new(ErrorKind::InvalidConfiguration, e.message()))?
        .ok_or_else(|| {
            OpError::new(
                ErrorKind::InvalidConfiguration,
                "select both configurations: launchConfig and workerConfig",
            )
        })?;
    let snapshot = hub.library.prepare_snapshot(&selected)?;
    hub.sessions
        .with(id, |s| s.begin_reconfigure())
        .ok_or_else(|| OpError::unknown_session(id))?
        .map_err(|reason| {
            OpError::new(
                ErrorKind::SessionBusy,
                format!("stop and disconnect the worker before applying a configuration: {reason}"),
            )
        })?;
    let published = snapshot.publish(&hub.session_dir(id));
    if published.is_ok() {
        let mut spec = hub
            .sessions
            .with(id, |s| s.spec().clone())
            .unwrap_or_default();
        if let Value::Object(map) = &mut spec {
            map.insert("launchConfig".into(), Value::from(selected.launch.as_str()));
            map.insert("workerConfig".into(), Value::from(selected.worker.as_str()));
        }
        hub.persist_spec(id, &spec);
    }
    hub.sessions.with(id, |s| s.end_reconfigure());
    published?;
    hub.publisher.notify(Note::SessionChanged {
        session: id.to_string(),
    });
    hub.session_view(id)
        .ok_or_else(|| OpError::unknown_session(id))
}
