//! The templates a new library file starts from (`GET
//! /api/configurations/:kind/template?source=`): the bundled examples, or
//! this hub's own startup settings (`deployment`), so a hub-wide launcher,
//! Docker or custom command, or mock-provider setup can move into the
//! library. No session token or secret of the hub's is ever written into
//! one; provider profiles are copied as written (`${VAR}` references stay
//! unexpanded).
//!
//! Pure.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::worker::{
    CONFIRM_PLACEHOLDER, DIRECTORY_PLACEHOLDER, EVENTS_PLACEHOLDER, TOOLS_PLACEHOLDER,
};
use super::{Kind, LibraryError, TemplateSource, DEFAULT_WORKER, DOCKER_LAUNCH, LOCAL_LAUNCH};
use crate::config::Config;
use crate::supervisor::render::{self, Endpoints};

/// The template text of `kind` from `source`. `spec` is a session spec
/// normalized with this hub's defaults (the mock profile's when the mock
/// provider is on), used for the deployment worker template.
pub fn template(
    config: &Config,
    spec: &Value,
    kind: Kind,
    source: TemplateSource,
) -> Result<String, LibraryError> {
    Ok(match (kind, source) {
        (Kind::Launch, TemplateSource::Default) => LOCAL_LAUNCH.to_string(),
        (Kind::Launch, TemplateSource::Docker) => DOCKER_LAUNCH.to_string(),
        (Kind::Worker, TemplateSource::Docker) => {
            return Err(LibraryError::invalid(
                "docker is a template of launch files only",
            ))
        }
        (Kind::Launch, TemplateSource::Deployment) => deployment_launch(config),
        (Kind::Worker, TemplateSource::Default) => DEFAULT_WORKER.to_string(),
        (Kind::Worker, TemplateSource::Deployment) => deployment_worker(config, spec),
    })
}

/// This hub's `launcher`, the launch fields of its `worker` and its
/// advertised `endpoints`, as a launch file.
fn deployment_launch(config: &Config) -> String {
    let l = &config.launcher;
    let w = &config.worker;
    let mut endpoints = Map::new();
    for (name, origin) in [
        ("events", &config.endpoints.events),
        ("confirm", &config.endpoints.confirm),
        ("tools", &config.endpoints.tools),
    ] {
        if !origin.is_empty() {
            endpoints.insert(name.into(), Value::String(origin.clone()));
        }
    }
    let doc = json!({
        "launcher": {
            "kind": l.kind.as_str(),
            "command": l.command,
            "args": l.args,
            "cwd": l.cwd,
            "pidFile": l.pid_file,
            "dockerManagementEnv": l.docker_management_env,
        },
        "worker": {
            "bin": w.bin.display().to_string(),
            "args": w.args,
            "threads": w.threads,
            "connectHost": w.connect_host,
            "stopTimeoutMs": w.stop_timeout_ms,
            "sigtermGraceMs": w.sigterm_grace_ms,
            "sigkillGraceMs": w.sigkill_grace_ms,
        },
        "env": {},
        "endpoints": endpoints,
    });
    format!(
        "// Copied from this hub's startup configuration. Edit before saving.\n{}\n",
        serde_json::to_string_pretty(&doc).expect("JSON encodes")
    )
}

/// The worker document this hub would render for a new session with
/// `spec`, its hub-owned fields holding their placeholders.
fn deployment_worker(config: &Config, spec: &Value) -> String {
    let endpoints = Endpoints {
        events: EVENTS_PLACEHOLDER.into(),
        confirm: CONFIRM_PLACEHOLDER.into(),
        tools: TOOLS_PLACEHOLDER.into(),
    };
    let mut doc = render::render(config, spec, Path::new(DIRECTORY_PLACEHOLDER), &endpoints);
    if let Some(p) = doc.get_mut("persistence").and_then(Value::as_object_mut) {
        p.insert("directory".into(), Value::from(DIRECTORY_PLACEHOLDER));
    }
    format!(
        "# Copied from this hub's startup configuration. Edit before saving.\n{}\n",
        serde_json::to_string_pretty(&doc).expect("JSON encodes")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{launch, worker};

    #[test]
    fn deployment_templates_follow_the_hub_and_validate() {
        let config = crate::config::test_config(
            r#"{"launcher": {"kind": "command", "command": ["run-worker", "{config}"]},
                "worker": {"threads": 4, "connectHost": "gw.lan"},
                "endpoints": {"events": "wss://proxy.example/w"}}"#,
        );
        let text = template(
            &config,
            &Value::Null,
            Kind::Launch,
            TemplateSource::Deployment,
        )
        .unwrap();
        assert!(text.starts_with("// Copied from"));
        let doc = launch::parse(&text).unwrap();
        assert_eq!(doc.launcher.command, ["run-worker", "{config}"]);
        assert_eq!(doc.threads, 4);
        assert_eq!(doc.connect_host, "gw.lan");
        assert_eq!(doc.endpoints.events, "wss://proxy.example/w");

        let defaults = crate::session::SpecDefaults::from_config(&config);
        let spec = crate::session::normalize_spec(None, &defaults).unwrap();
        let text = template(&config, &spec, Kind::Worker, TemplateSource::Deployment).unwrap();
        let doc = worker::read_checked(&text).unwrap();
        assert_eq!(doc["client"]["endpoint"], EVENTS_PLACEHOLDER);
        assert_eq!(doc["persistence"]["directory"], DIRECTORY_PLACEHOLDER);
        assert!(template(&config, &spec, Kind::Worker, TemplateSource::Docker).is_err());
        assert_eq!(
            template(&config, &spec, Kind::Launch, TemplateSource::Docker).unwrap(),
            DOCKER_LAUNCH
        );
    }
}
