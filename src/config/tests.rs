//! Unit tests of the configuration's loading, merge, overrides, first-run
//! file and redaction.

use super::load::load_in;
use super::redact::is_env_reference;
use super::*;
use crate::util::testkit::TempDir;
use serde_json::json;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const CWD: &str = "/work/cwd";
const HOME: &str = "/home/op";

fn resolve_text(path: &str, text: &str, overrides: &Overrides) -> Result<Loaded, ConfigError> {
    resolve(
        Some((Path::new(path), text)),
        overrides,
        Path::new(CWD),
        Path::new(HOME),
        Feature::ALL,
    )
}

#[test]
fn defaults_resolve_with_every_feature_and_with_the_built_set() {
    for features in [Feature::ALL, BUILT_FEATURES] {
        let loaded = resolve(
            None,
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            features,
        )
        .unwrap();
        assert_eq!(loaded.source, ConfigSource::Defaults);
        assert_eq!(loaded.config.data_dir, Path::new("/home/op/.simplex/hub"));
        assert_eq!(loaded.config.worker.bin, Path::new("simplex_worker"));
        // No file: the built-in worker, and the mock profile by default.
        assert_eq!(loaded.config.launcher.kind, LauncherKind::BuiltIn);
        assert_eq!(loaded.resolved["launcher"]["kind"], "built-in");
        assert_eq!(loaded.config.default_provider(), "mock");
        assert!(loaded.config.is_loopback());
        assert!(!loaded.config.mock.enabled);
        // Keys of unbuilt features still get their defaults.
        assert_eq!(loaded.config.tool_requests.port, 8801);
        assert_eq!(loaded.config.limits.confirm_identity_hold_ms, 15_000);
        assert_eq!(loaded.config.subagents.max_live, 16);
    }
}

#[test]
fn resolved_json_is_in_schema_order_and_holds_only_built_keys() {
    let all = resolve(
        None,
        &Overrides::default(),
        Path::new(CWD),
        Path::new(HOME),
        Feature::ALL,
    )
    .unwrap();
    let keys: Vec<&String> = all.resolved.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "listen",
            "dataDir",
            "panel",
            "mock",
            "forceKillProcessGroup",
            "providerProfiles",
            "launcher",
            "endpoints",
            "worker",
            "http",
            "limits",
            "toolRequests",
            "subagents",
            "shard"
        ]
    );
    let core = resolve(
        None,
        &Overrides::default(),
        Path::new(CWD),
        Path::new(HOME),
        &[Feature::Core],
    )
    .unwrap();
    assert!(core.resolved.get("toolRequests").is_none());
    assert!(core.resolved.get("limits").is_none());
    assert_eq!(
        core.resolved["worker"],
        json!({"bin": "simplex_worker", "args": [], "threads": 1})
    );
    assert_eq!(core.resolved["dataDir"], "/home/op/.simplex/hub");
}

#[test]
fn file_then_overrides_win_and_arrays_replace() {
    let text = r#"{
            // the operator's choices
            "listen": { "port": 9000, "allowedHosts": ["a.example", "b.example"] },
            "worker": { "args": ["--x"] },
            "providerProfiles": { "extra": { "model": "m", "endpoint": {"base_url": "http://x"} } },
            "mock": { "enabled": false }
        }"#;
    let overrides = Overrides {
        listen: Some(("localhost".into(), 9100)),
        mock: Some(true),
        panel_token: Some("t".into()),
        force_kill_process_group: true,
        ..Overrides::default()
    };
    let loaded = resolve_text("/etc/simplex/hub.config.jsonc", text, &overrides).unwrap();
    let c = &loaded.config;
    assert_eq!((c.listen.host.as_str(), c.listen.port), ("localhost", 9100));
    assert_eq!(c.listen.allowed_hosts, ["a.example", "b.example"]);
    assert_eq!(c.worker.args, ["--x"]);
    assert!(c.mock.enabled);
    assert_eq!(c.panel.token, "t");
    assert!(c.force_kill_process_group);
    let names: Vec<&String> = c.provider_profiles.keys().collect();
    assert_eq!(names, ["deepseek", "mock", "extra"]);
    assert_eq!(
        loaded.source,
        ConfigSource::File(PathBuf::from("/etc/simplex/hub.config.jsonc"))
    );

    // An array in the file replaces the default array outright.
    let loaded = resolve_text(
        "/x/c.jsonc",
        r#"{"launcher": {"kind": "command", "command": ["a", "b"]}}"#,
        &Overrides::default(),
    )
    .unwrap();
    let text = r#"{"launcher": {"kind": "command", "command": ["only"]}}"#;
    let replaced = resolve_text("/x/c.jsonc", text, &Overrides::default()).unwrap();
    assert_eq!(loaded.config.launcher.command, ["a", "b"]);
    assert_eq!(replaced.config.launcher.command, ["only"]);
}

#[test]
fn file_paths_resolve_against_the_file_and_override_paths_against_cwd() {
    let text =
        r#"{"dataDir": "../data", "worker": {"bin": "bin/w", "environment": {"workspace": "ws"}}}"#;
    let loaded = resolve_text("/etc/simplex/hub.jsonc", text, &Overrides::default()).unwrap();
    assert_eq!(loaded.config.data_dir, Path::new("/etc/data"));
    assert_eq!(loaded.config.worker.bin, Path::new("/etc/simplex/bin/w"));
    assert_eq!(
        loaded.config.worker.environment.workspace,
        "/etc/simplex/ws"
    );
    assert_eq!(loaded.resolved["dataDir"], "/etc/data");

    let overrides = Overrides {
        data_dir: Some("state".into()),
        worker_bin: Some("./tools/w".into()),
        ..Overrides::default()
    };
    let loaded = resolve_text("/etc/simplex/hub.jsonc", text, &overrides).unwrap();
    assert_eq!(loaded.config.data_dir, Path::new("/work/cwd/state"));
    assert_eq!(loaded.config.worker.bin, Path::new("/work/cwd/tools/w"));

    // A bare name stays a command name from either source.
    let overrides = Overrides {
        worker_bin: Some("simplex".into()),
        ..Overrides::default()
    };
    let loaded = resolve_text("/etc/simplex/hub.jsonc", "{}", &overrides).unwrap();
    assert_eq!(loaded.config.worker.bin, Path::new("simplex"));

    // A relative config path is first made absolute against cwd.
    let loaded = resolve_text(
        "conf/hub.jsonc",
        r#"{"dataDir": "d"}"#,
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(loaded.config.data_dir, Path::new("/work/cwd/conf/d"));
    assert_eq!(
        loaded.source,
        ConfigSource::File(PathBuf::from("/work/cwd/conf/hub.jsonc"))
    );
}

#[test]
fn tilde_in_data_dir_expands_with_home() {
    let loaded = resolve_text(
        "/etc/h.jsonc",
        r#"{"dataDir": "~/hub-data"}"#,
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(loaded.config.data_dir, Path::new("/home/op/hub-data"));
    let overrides = Overrides {
        data_dir: Some("~".into()),
        ..Overrides::default()
    };
    let loaded = resolve_text("/etc/h.jsonc", "{}", &overrides).unwrap();
    assert_eq!(loaded.config.data_dir, Path::new("/home/op"));

    // No home: fine unless a `~` survives the merge.
    let no_home = |overrides: &Overrides| {
        resolve(None, overrides, Path::new(CWD), Path::new(""), Feature::ALL)
    };
    assert!(matches!(
        no_home(&Overrides::default()),
        Err(ConfigError::NoHome { .. })
    ));
    let overrides = Overrides {
        data_dir: Some("/srv/hub".into()),
        ..Overrides::default()
    };
    assert_eq!(
        no_home(&overrides).unwrap().config.data_dir,
        Path::new("/srv/hub")
    );
}

#[test]
fn syntax_errors_name_the_file_and_the_original_position() {
    let text =
        "{\n  /* comment\n     spanning */\n  \"listen\": { \"port\": 1 }\n  \"dataDir\": \"x\"\n}";
    let err = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap_err();
    let ConfigError::Syntax { line, .. } = &err else {
        panic!("unexpected error {err:?}");
    };
    assert_eq!(*line, 5);
    assert_eq!(
        err.to_string(),
        "/etc/h.jsonc:5:3: invalid JSON: expected `,` or `}`"
    );
    assert!(std::error::Error::source(&err).is_some());

    let err = resolve_text("/etc/h.jsonc", "{ /* open", &Overrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/h.jsonc:1:3: unterminated block comment"
    );

    let err = resolve_text("/etc/h.jsonc", "[1]", &Overrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/h.jsonc: the top level must be a JSON object, found an array"
    );
}

#[test]
fn unknown_keys_are_all_named_in_one_error() {
    let text = r#"{"listen": {"bogus": 1}, "nope": true, "mock": {"speed": "auto"}}"#;
    let err = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown configuration key(s): listen.bogus, nope, mock.speed"
    );
}

#[test]
fn unbuilt_feature_keys_are_refused_by_the_built_set_only() {
    let text = r#"{"toolRequests": {"port": 9001}, "limits": {"pingIntervalMs": 0}}"#;
    let built = resolve(
        Some((Path::new("/etc/h.jsonc"), text)),
        &Overrides::default(),
        Path::new(CWD),
        Path::new(HOME),
        &[Feature::Core],
    )
    .unwrap_err();
    assert_eq!(
        built.to_string(),
        "unknown configuration key(s): toolRequests.port (not supported by this build yet), \
         limits.pingIntervalMs (not supported by this build yet)"
    );
    let all = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap();
    assert_eq!(all.config.tool_requests.port, 9001);
    assert_eq!(all.config.limits.ping_interval_ms, 0);
}

#[test]
fn overrides_are_validated_too() {
    let overrides = Overrides {
        listen: Some(("0.0.0.0".into(), 8800)),
        ..Overrides::default()
    };
    let err = resolve(
        None,
        &overrides,
        Path::new(CWD),
        Path::new(HOME),
        Feature::ALL,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("listen.host = \"0.0.0.0\""),
        "{err}"
    );
    let overrides = Overrides {
        listen: Some(("0.0.0.0".into(), 8800)),
        panel_token: Some("secret".into()),
        ..Overrides::default()
    };
    let loaded = resolve(
        None,
        &overrides,
        Path::new(CWD),
        Path::new(HOME),
        Feature::ALL,
    )
    .unwrap();
    assert!(!loaded.config.is_loopback());
}

#[test]
fn parse_listen_accepts_host_port_and_bracketed_ipv6() {
    assert_eq!(
        parse_listen("127.0.0.1:8800").unwrap(),
        ("127.0.0.1".into(), 8800)
    );
    assert_eq!(parse_listen("[::1]:8800").unwrap(), ("::1".into(), 8800));
    assert_eq!(
        parse_listen("localhost:0").unwrap(),
        ("localhost".into(), 0)
    );
    assert_eq!(parse_listen("h:65535").unwrap(), ("h".into(), 65535));
    for bad in [
        ":8800",
        "[]:8800",
        "h:65536",
        "h:",
        "h:-1",
        "h:+80",
        "h: 80",
        "h",
        "::1:8800",
        "[::1]",
        "[::1]8800",
        "[::1:80",
        "a b:80",
    ] {
        let err = parse_listen(bad).unwrap_err();
        assert!(matches!(err, ConfigError::Listen { .. }), "{bad}: {err}");
    }
    assert_eq!(
        parse_listen(":8800").unwrap_err().to_string(),
        "invalid listen address \":8800\": the host is empty"
    );
    assert_eq!(
        parse_listen("h:70000").unwrap_err().to_string(),
        "invalid listen address \"h:70000\": the port must be a number from 0 to 65535"
    );
}

#[test]
fn redaction_hides_tokens_and_literal_keys_but_not_env_references() {
    let text = r#"{
            "panel": {"token": "hunter2"},
            "providerProfiles": {
                "literal": {"model": "m", "endpoint": {"auth": {"api_key": "sk-live", "Password": 7}},
                            "headers": [{"token": "abc"}], "apiKey": ""},
                "mock": {"secret": null}
            }
        }"#;
    let loaded = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap();
    let shown = redacted(&loaded);
    assert_eq!(shown["panel"]["token"], "<redacted>");
    let literal = &shown["providerProfiles"]["literal"];
    assert_eq!(literal["endpoint"]["auth"]["api_key"], "<redacted>");
    assert_eq!(literal["endpoint"]["auth"]["Password"], "<redacted>");
    assert_eq!(literal["headers"][0]["token"], "<redacted>");
    assert_eq!(literal["apiKey"], "");
    assert_eq!(literal["model"], "m");
    assert_eq!(shown["providerProfiles"]["mock"]["secret"], Value::Null);
    assert_eq!(
        shown["providerProfiles"]["deepseek"]["endpoint"]["auth"]["api_key"],
        "${DEEPSEEK_API_KEY}"
    );
    let text = shown.to_string();
    assert!(!text.contains("hunter2") && !text.contains("sk-live") && !text.contains("abc"));
    // The original is untouched.
    assert_eq!(loaded.resolved["panel"]["token"], "hunter2");

    let defaults = resolve(
        None,
        &Overrides::default(),
        Path::new(CWD),
        Path::new(HOME),
        Feature::ALL,
    )
    .unwrap();
    assert_eq!(redacted(&defaults)["panel"]["token"], "");
}

#[test]
fn env_reference_shape() {
    assert!(is_env_reference("${MODEL_API_KEY}"));
    assert!(is_env_reference("${_x1}"));
    assert!(!is_env_reference("${1X}"));
    assert!(!is_env_reference("${}"));
    assert!(!is_env_reference("Bearer ${X}"));
    assert!(!is_env_reference("$X"));
}

#[test]
fn first_run_writes_once_private_and_round_trips() {
    let tmp = TempDir::new("first-run");
    let data_dir = tmp.join("nested").join("data");
    let overrides = Overrides {
        data_dir: Some(data_dir.clone()),
        panel_token: Some("tok".into()),
        ..Overrides::default()
    };
    let loaded = resolve(
        None,
        &overrides,
        Path::new(CWD),
        Path::new(HOME),
        BUILT_FEATURES,
    )
    .unwrap();
    let written = write_first_run(&loaded)
        .unwrap()
        .expect("a file is written");
    assert_eq!(written, data_dir.join("hub.config.jsonc"));
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data_dir), 0o700);
    assert_eq!(mode(&tmp.join("nested")), 0o700);
    assert_eq!(mode(&written), 0o600);
    let text = fs::read_to_string(&written).unwrap();
    assert!(text.starts_with("// simplex-hub configuration"));

    // The written file is a valid configuration with the same meaning.
    let again = resolve(
        Some((&written, &text)),
        &Overrides::default(),
        Path::new("/"),
        Path::new(HOME),
        BUILT_FEATURES,
    )
    .unwrap();
    assert_eq!(again.resolved, loaded.resolved);

    // Create-exclusive: a second first run leaves the file alone.
    fs::write(&written, "{}").unwrap();
    assert_eq!(write_first_run(&loaded).unwrap(), None);
    assert_eq!(fs::read_to_string(&written).unwrap(), "{}");
    assert_eq!(mode(&written), 0o600);

    // Nothing is written for a configuration that came from a file.
    let from_file = Loaded {
        source: ConfigSource::File(written.clone()),
        ..loaded
    };
    fs::remove_file(&written).unwrap();
    assert_eq!(write_first_run(&from_file).unwrap(), None);
    assert!(!written.exists());
}

#[test]
fn load_prefers_explicit_then_jsonc_then_json_then_defaults() {
    let tmp = TempDir::new("load");
    let data = tmp.join("data");
    fs::create_dir_all(&data).unwrap();
    let home = tmp.join("home");
    let overrides = Overrides {
        data_dir: Some("data".into()),
        ..Overrides::default()
    };
    let load =
        |explicit: Option<&Path>| load_in(explicit, &overrides, tmp.path(), &home, Feature::ALL);

    assert_eq!(load(None).unwrap().source, ConfigSource::Defaults);
    fs::write(
        data.join("hub.config.json"),
        r#"{"worker": {"threads": 3}}"#,
    )
    .unwrap();
    let loaded = load(None).unwrap();
    assert_eq!(
        loaded.source,
        ConfigSource::File(data.join("hub.config.json"))
    );
    assert_eq!(loaded.config.worker.threads, 3);
    fs::write(
        data.join("hub.config.jsonc"),
        "// c\n{\"worker\": {\"threads\": 4}}",
    )
    .unwrap();
    assert_eq!(load(None).unwrap().config.worker.threads, 4);

    fs::write(tmp.join("explicit.jsonc"), r#"{"worker": {"threads": 5}}"#).unwrap();
    let loaded = load(Some(Path::new("explicit.jsonc"))).unwrap();
    assert_eq!(loaded.config.worker.threads, 5);
    // The override still decides dataDir, against the current directory.
    assert_eq!(loaded.config.data_dir, data);

    let err = load(Some(Path::new("missing.jsonc"))).unwrap_err();
    let ConfigError::Io { source, .. } = &err else {
        panic!("unexpected error {err:?}");
    };
    assert_eq!(source.kind(), io::ErrorKind::NotFound);
    assert!(err.to_string().starts_with("cannot read "), "{err}");

    // Without an override the lookup happens under the default dataDir.
    let default_dir = home.join(".simplex/hub");
    fs::create_dir_all(&default_dir).unwrap();
    fs::write(
        default_dir.join("hub.config.jsonc"),
        r#"{"worker": {"threads": 6}}"#,
    )
    .unwrap();
    let loaded = load_in(None, &Overrides::default(), tmp.path(), &home, Feature::ALL).unwrap();
    assert_eq!(loaded.config.worker.threads, 6);
}

/// Every leaf path of `value` with its value (arrays are leaves).
fn leaf_values(value: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if prefix != "providerProfiles" => {
            for (key, value) in map {
                leaf_values(value, &schema::join(prefix, key), out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

#[test]
fn a_node_hub_first_run_file_loads_and_means_what_it_meant_there() {
    let path = "/home/op/.simplex/hub/hub.config.jsonc";
    let text = include_str!("../../tests/fixtures/node-hub-first-run.config.jsonc");
    let loaded = resolve(
        Some((Path::new(path), text)),
        &Overrides::default(),
        Path::new(CWD),
        Path::new(HOME),
        BUILT_FEATURES,
    )
    .unwrap();
    // Every key keeps the value the Node hub wrote.
    let mut written = Vec::new();
    leaf_values(&serde_json::from_str(text).unwrap(), "", &mut written);
    assert_eq!(written.len(), 64, "every key of the Node hub's file");
    for (key, value) in &written {
        let mut found = &loaded.resolved;
        for part in key.split('.') {
            found = &found[part];
        }
        assert_eq!(found, value, "{key}");
    }
    // And it means the same: the worker binary for every session, the
    // first profile by default, no mock provider, nothing daemonizing.
    let c = &loaded.config;
    assert_eq!(c.launcher.kind, LauncherKind::SimplexWorker);
    assert_eq!(
        c.worker.bin,
        Path::new(
            "/home/op/.npm-global/lib/node_modules/@hazer-bjtu/simplex-hub/build/bin/simplex_worker"
        )
    );
    assert_eq!(c.data_dir, Path::new("/home/op/.simplex/hub"));
    assert_eq!(c.default_provider(), "deepseek");
    assert!(!c.mock.enabled);
    assert_eq!(c.mock.listen, "127.0.0.1:0");
    assert_eq!(c.mock.scenario, "auto");
    assert_eq!((c.mock.slow_ms, c.mock.tool_command.as_str()), (1500, ""));
    assert_eq!(c.launcher.pid_file, "");
    assert!(c.launcher.docker_management_env.is_empty());
    assert_eq!(
        (
            c.worker.auto_compact_threshold,
            c.worker.max_auto_compactions
        ),
        (0, 5)
    );
    assert!(c.worker.hub_remote_call);
    assert_eq!(c.endpoints, AdvertisedEndpoints::default());
    assert_eq!((c.listen.port, c.tool_requests.port), (8800, 8801));
    assert_eq!(c.subagents.conversation_bytes, 1_048_576);
    assert_eq!(c.limits.transcript_bytes, 33_554_432);
}

#[test]
fn docs_list_every_key() {
    let docs = include_str!("../../docs/configuration.md");
    for (key, _) in schema::KEYS {
        assert!(
            docs.contains(&format!("| `{key}` |")),
            "docs/configuration.md lacks a row for {key}"
        );
    }
}
