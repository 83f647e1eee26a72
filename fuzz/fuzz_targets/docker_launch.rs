//! `supervisor::docker`: recognising a Docker launch, reading what `docker
//! inspect` printed, and reading a kept management context back.
//!
//! Input, as text: the first character picks the case.
//!
//! - `0`: one argument per line, the program first. A recognised container
//!   has a valid name, global options that are the command line's first
//!   arguments, an executable named `docker`; its management commands
//!   start with those options and end with the container; its kept context
//!   reads back equal.
//! - `1`: the second character is the exit status (`0`, `1`, anything else
//!   a signal), then stdout, a blank line, stderr. Running or stopped only
//!   from a clean exit with a state object on stdout, gone only from a
//!   failed one; an id is 64 hex digits; an unknown reason stays short.
//! - `2`: a kept context (JSON). What reads back reads back the same after
//!   writing it again, keeps only allow-listed or named variables, and has
//!   absolute paths.
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::harness::docker::{
    self, from_json, inspect_args, kill_args, read_inspect, recognise, to_json, valid_id,
    valid_name, Inspected, Management, Recognised, Signal, Stored, MANAGEMENT_ENV,
};
use simplex_hub_fuzz::text;

fuzz_target!(|data: &[u8]| {
    let input = text(data);
    let mut chars = input.chars();
    match chars.next() {
        Some('0') => launch(chars.as_str()),
        Some('1') => {
            let status = match chars.next() {
                Some('0') => Some(0),
                Some('1') => Some(1),
                _ => None,
            };
            let rest = chars.as_str();
            let (stdout, stderr) = rest.split_once("\n\n").unwrap_or((rest, ""));
            inspect(status, stdout.as_bytes(), stderr.as_bytes());
        }
        Some('2') => kept(chars.as_str()),
        _ => {}
    }
});

fn launch(text: &str) {
    let mut lines = text.split('\n').map(str::to_owned);
    let program = lines.next().unwrap_or_default();
    let args: Vec<String> = lines.collect();
    let Recognised::Container(target) = recognise(&program, &args) else {
        return;
    };
    assert!(valid_name(&target.name), "{:?}", target.name);
    assert_eq!(
        std::path::Path::new(&program)
            .file_name()
            .and_then(|n| n.to_str()),
        Some(docker::DOCKER)
    );
    assert!(args.starts_with(&target.global_args));
    let kill = kill_args(&target, &target.name, Signal::Term);
    assert!(kill.starts_with(&target.global_args));
    assert_eq!(
        kill[target.global_args.len()..],
        ["kill", "--signal", "TERM", &target.name]
    );
    let inspect = inspect_args(&target, &target.name);
    assert_eq!(inspect.last(), Some(&target.name));
    let stored = Stored {
        session: "s".into(),
        lifecycle_id: "l".into(),
        management: Management {
            executable: "/usr/bin/docker".into(),
            cwd: "/".into(),
            env: vec![],
            pass_through: vec![],
            target,
        },
    };
    assert_eq!(from_json(&to_json(&stored)).as_ref(), Ok(&stored));
}

fn inspect(status: Option<i32>, stdout: &[u8], stderr: &[u8]) {
    let seen = read_inspect(status, stdout, stderr);
    match &seen {
        Inspected::Running { .. } | Inspected::Stopped { .. } => {
            assert_eq!(status, Some(0));
            let value: serde_json::Value =
                serde_json::from_str(String::from_utf8_lossy(stdout).trim()).unwrap();
            assert!(value["State"].is_object());
        }
        Inspected::Gone => assert_ne!(status, Some(0)),
        Inspected::Unknown(why) => assert!(why.len() <= 300, "{why}"),
    }
    if let Some(id) = seen.id() {
        assert!(valid_id(id));
    }
    assert!(!seen.over(true) || seen == Inspected::Gone);
    assert_eq!(seen.over(false), seen.runs_nothing());
}

fn kept(text: &str) {
    let Ok(value) = serde_json::from_str(text) else {
        return;
    };
    let Ok(stored) = from_json(&value) else {
        return;
    };
    assert_eq!(from_json(&to_json(&stored)).as_ref(), Ok(&stored));
    let m = &stored.management;
    assert!(m.executable.is_absolute() && m.cwd.is_absolute());
    for (name, _) in &m.env {
        assert!(MANAGEMENT_ENV.contains(&name.as_str()) || m.pass_through.contains(name));
    }
}
