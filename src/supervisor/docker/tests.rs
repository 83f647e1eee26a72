//! Unit tests of Docker launches' pure part: recognition, the management
//! command lines, inspect's output and the kept context.

use super::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

fn container(program: &str, words: &[&str]) -> Target {
    match recognise(program, &argv(words)) {
        Recognised::Container(target) => target,
        other => panic!("{words:?}: {other:?}"),
    }
}

fn unmanaged(words: &[&str]) -> String {
    match recognise("docker", &argv(words)) {
        Recognised::Unmanaged(why) => why.to_string(),
        other => panic!("{words:?}: {other:?}"),
    }
}

#[test]
fn a_foreground_named_run_is_managed_by_its_container() {
    // The Node hub's docker launch template.
    let node = [
        "run",
        "--rm",
        "--init",
        "--name",
        "simplex-worker-s1",
        "--add-host",
        "host.docker.internal:host-gateway",
        "--user",
        "0:1000",
        "-e",
        "MODEL_API_KEY",
        "-v",
        "/d/s1:/d/s1",
        "--entrypoint",
        "/bin/sh",
        "simplex-worker:latest",
        "-c",
        "exec \"$@\"",
    ];
    let t = container("docker", &node);
    assert_eq!(t.name, "simplex-worker-s1");
    assert!(t.global_args.is_empty());
    assert!(t.auto_remove);
    assert!(!container("docker", &["run", "--name", "w1", "i"]).auto_remove);
    assert!(
        !container(
            "docker",
            &["run", "--rm", "--rm=false", "--name", "w1", "i"]
        )
        .auto_remove
    );
    // Any directory, `--name=`, `container run`, the last --name wins.
    assert_eq!(
        container("/usr/local/bin/docker", &["run", "--name=w1", "img"]).name,
        "w1"
    );
    assert_eq!(
        container(
            "docker",
            &["container", "run", "--name", "a", "--name", "b1", "i"]
        )
        .name,
        "b1"
    );
    // Combined short flags and short options with their value attached
    // or following; `--detach=false` is a foreground run.
    for words in [
        &["run", "-it", "--name", "w1", "img"][..],
        &["run", "-e", "--name", "--name", "w1", "img"],
        &["run", "-eA=1", "-ti", "-v/x:/y", "--name", "w1", "img"],
        &["run", "-ite", "X", "--name", "w1", "img"],
        &["run", "--detach=false", "-d=0", "--name", "w1", "img"],
        &["run", "--detach-keys", "ctrl-x", "--name", "w1", "img"],
        &["run", "--some-new-option", "v", "--name", "w1", "img"],
        &["run", "--name", "w1", "--", "img", "-d"],
    ] {
        assert_eq!(container("docker", words).name, "w1", "{words:?}");
    }
}

#[test]
fn a_name_after_the_image_belongs_to_the_container_command() {
    assert_eq!(
        unmanaged(&["run", "--rm", "img", "--name", "w1"]),
        "docker run has no --name to manage its container by"
    );
    // A value option swallows what follows, as the CLI does.
    assert!(unmanaged(&["run", "-e", "--name", "w1"]).contains("no --name"));
    assert_eq!(
        container("docker", &["run", "--name", "w1", "img", "--name", "w2"]).name,
        "w1"
    );
}

#[test]
fn global_options_are_kept_for_the_management_commands() {
    let t = container(
        "docker",
        &[
            "--context",
            "remote",
            "-H=tcp://h:2376",
            "--tlsverify",
            "-D",
            "--log-level=warn",
            "run",
            "--name",
            "w1",
            "img",
        ],
    );
    assert_eq!(
        t.global_args,
        argv(&[
            "--context",
            "remote",
            "-H=tcp://h:2376",
            "--tlsverify",
            "-D",
            "--log-level=warn"
        ])
    );
    assert_eq!(
        kill_args(&t, "w1", Signal::Term),
        argv(&[
            "--context",
            "remote",
            "-H=tcp://h:2376",
            "--tlsverify",
            "-D",
            "--log-level=warn",
            "kill",
            "--signal",
            "TERM",
            "w1"
        ])
    );
    // An unknown global option cannot be replayed safely.
    assert!(unmanaged(&["--frobnicate", "run", "--name", "w1", "i"]).contains("--frobnicate"));
    assert!(unmanaged(&["-x", "run", "--name", "w1", "i"]).contains("-x"));
}

#[test]
fn what_is_not_a_managed_run() {
    for (program, words) in [
        ("/bin/sh", &["-c", "docker run --name w1 img"][..]),
        ("dockerd", &["run", "--name", "w1", "img"]),
        ("docker-compose", &["run", "--name", "w1", "img"]),
        ("docker", &["start", "w1"]),
        ("docker", &["exec", "w1", "sh"]),
        ("docker", &["container", "start", "w1"]),
        ("docker", &["--version"]),
        ("docker", &["-v", "run", "--name", "w1"]),
        ("docker", &["run", "--help", "--name", "w1"]),
        ("docker", &[]),
        ("docker", &["--context", "a\0b", "run", "--name", "w1"]),
    ] {
        assert_eq!(
            recognise(program, &argv(words)),
            Recognised::NotDocker,
            "{program} {words:?}"
        );
    }
    for words in [
        &["run", "-d", "--name", "w1", "img"][..],
        &["run", "-dit", "--name", "w1", "img"],
        &["run", "--detach", "--name", "w1", "img"],
        &["run", "--name", "w1", "--detach=true", "img"],
    ] {
        assert!(unmanaged(words).contains("detached"), "{words:?}");
    }
    assert!(unmanaged(&["run", "--name", "-bad", "img"]).contains("not a container name"));
    assert!(unmanaged(&["run", "--name=", "img"]).contains("not a container name"));
    assert!(unmanaged(&["run", "--name", "a/b", "img"]).contains("not a container name"));
    let long = "a".repeat(202);
    assert!(unmanaged(&["run", "--name", &long, "img"]).contains("not a container name"));
    assert!(unmanaged(&["run", "--rm=maybe", "--name", "w1"]).contains("true or false"));
    assert!(unmanaged(&["run", "-Z", "--name", "w1"]).contains("-Z"));
    assert!(unmanaged(&["run", "--name"]).contains("needs a value"));
    assert!(unmanaged(&["run", "-e"]).contains("needs a value"));
}

#[test]
fn names_docker_accepts() {
    for good in ["a", "A1", "simplex-worker-s_1.x", &"b".repeat(201)] {
        assert!(valid_name(good), "{good}");
    }
    for bad in ["", "_a", ".a", "-a", "a b", "a/b", "ä", &"b".repeat(202)] {
        assert!(!valid_name(bad), "{bad}");
    }
}

#[test]
fn inspect_asks_for_the_container_and_its_state_only() {
    let t = container("docker", &["run", "--name", "w1", "i"]);
    assert_eq!(
        inspect_args(&t, "w1"),
        argv(&[
            "inspect",
            "--type",
            "container",
            "--format",
            INSPECT_FORMAT,
            "w1"
        ])
    );
    assert_eq!(
        kill_args(&t, "w1", Signal::Kill),
        argv(&["kill", "--signal", "KILL", "w1"])
    );
}

const ID: &str = "0512f5bb4758dfb884c1e347bc5f91f0086341beebd90b9b8765943ed6e82828";

fn state(fields: &str) -> Vec<u8> {
    format!(r#"{{"Id":"{ID}","State":{{{fields}}}}}"#).into_bytes()
}

#[test]
fn inspect_output_decides_running_stopped_gone_or_unknown() {
    let id = Some(ID.to_owned());
    // What the real CLI printed for a running and an exited container.
    let running = state(
        r#""Dead":false,"Error":"","ExitCode":0,"FinishedAt":"0001-01-01T00:00:00Z","OOMKilled":false,"Paused":false,"Pid":26253,"Restarting":false,"Running":true,"StartedAt":"2026-12-01T14:12:08.030533185Z","Status":"running""#,
    );
    assert_eq!(
        read_inspect(Some(0), &running, b""),
        Inspected::Running { id: id.clone() }
    );
    let exited = state(
        r#""Dead":false,"ExitCode":3,"Paused":false,"Pid":0,"Restarting":false,"Running":false,"Status":"exited""#,
    );
    assert_eq!(
        read_inspect(Some(0), &exited, b""),
        Inspected::Stopped {
            id: id.clone(),
            code: Some(3)
        }
    );
    for (fields, expect_running) in [
        (r#""Running":true,"Paused":true,"Status":"paused""#, true),
        (
            r#""Running":false,"Restarting":true,"Status":"restarting""#,
            true,
        ),
        (r#""Running":false,"Status":"created","ExitCode":0"#, false),
        (r#""Running":false,"Status":"removing","ExitCode":0"#, false),
        (r#""Running":false,"Status":"dead","ExitCode":137"#, false),
    ] {
        let got = read_inspect(Some(0), &state(fields), b"");
        assert_eq!(
            matches!(got, Inspected::Running { .. }),
            expect_running,
            "{fields}"
        );
        assert_eq!(got.runs_nothing(), !expect_running, "{fields}");
        assert_eq!(got.over(false), !expect_running, "{fields}");
        assert!(
            !got.over(true),
            "{fields}: a --rm container is over once removed"
        );
    }
    // Only exited and dead containers have an exit status.
    assert_eq!(
        read_inspect(
            Some(0),
            &state(r#""Running":false,"Status":"created","ExitCode":0"#),
            b""
        ),
        Inspected::Stopped {
            id: id.clone(),
            code: None
        }
    );
    // A missing container, in the words of current and older CLIs.
    for stderr in [
        "Error: No such container: w1\n",
        "Error: No such object: w1\n",
        "Error response from daemon: no such container\n",
    ] {
        assert_eq!(
            read_inspect(Some(1), b"\n", stderr.as_bytes()),
            Inspected::Gone
        );
    }
    // Anything else is no evidence either way.
    let unknown = read_inspect(
        Some(1),
        b"",
        b"Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n",
    );
    assert!(
        matches!(&unknown, Inspected::Unknown(r) if r.contains("status 1") && r.contains("Cannot connect")),
        "{unknown:?}"
    );
    assert!(!unknown.runs_nothing() && !unknown.over(false));
    assert!(Inspected::Gone.over(true) && Inspected::Gone.over(false));
    assert!(matches!(read_inspect(None, b"", b""), Inspected::Unknown(r) if r.contains("signal")));
    for stdout in [
        &b""[..],
        b"true",
        b"[]",
        b"{\"Id\":\"x\"}",
        b"{\"State\":3}",
        b"\xff",
    ] {
        assert!(
            matches!(read_inspect(Some(0), stdout, b""), Inspected::Unknown(_)),
            "{stdout:?}"
        );
    }
    // A long complaint is clipped.
    let reason = read_inspect(Some(2), b"", "x".repeat(1000).as_bytes());
    assert!(
        matches!(&reason, Inspected::Unknown(r) if r.len() < 300),
        "{reason:?}"
    );
    // An id in another shape is not kept.
    let odd = br#"{"Id":"ABC","State":{"Running":true}}"#;
    assert_eq!(
        read_inspect(Some(0), odd, b""),
        Inspected::Running { id: None }
    );
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn only_allow_listed_and_named_variables_are_kept() {
    let startup = effective_env(
        env(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("DOCKER_HOST", "unix:///run/d.sock"),
            ("DOCKER_SECRET_THING", "no"),
            ("MODEL_API_KEY", "hub-secret"),
            ("CUSTOM_TOKEN", "old"),
        ]),
        &env(&[("CUSTOM_TOKEN", "new"), ("EXTRA", "spec")]),
    );
    assert_eq!(
        startup.iter().filter(|(k, _)| k == "CUSTOM_TOKEN").count(),
        1
    );
    let kept = management_env(startup.clone(), &["CUSTOM_TOKEN".to_owned()]);
    assert_eq!(
        kept,
        env(&[
            ("CUSTOM_TOKEN", "new"),
            ("DOCKER_HOST", "unix:///run/d.sock"),
            ("HOME", "/root"),
            ("PATH", "/usr/bin"),
        ])
    );
    // Without the pass-through, only the built-in names.
    let plain = management_env(startup, &[]);
    assert!(plain
        .iter()
        .all(|(k, _)| MANAGEMENT_ENV.contains(&k.as_str())));
    assert!(!MANAGEMENT_ENV.iter().any(|n| n.contains('*')));
}

#[test]
fn the_executable_is_looked_up_like_a_shell_would() {
    let cwd = Path::new("/work/s");
    assert_eq!(
        executable_candidates("docker", cwd, Some("/usr/local/bin::rel")),
        vec![
            PathBuf::from("/usr/local/bin/docker"),
            PathBuf::from("/work/s/docker"),
            PathBuf::from("/work/s/rel/docker"),
        ]
    );
    assert_eq!(
        executable_candidates("docker", cwd, None),
        vec![
            PathBuf::from("/usr/bin/docker"),
            PathBuf::from("/bin/docker")
        ]
    );
    assert_eq!(
        executable_candidates("/opt/docker", cwd, Some("/x")),
        vec![PathBuf::from("/opt/docker")]
    );
    assert_eq!(
        executable_candidates("bin/docker", cwd, Some("/x")),
        vec![PathBuf::from("/work/s/bin/docker")]
    );
}

fn stored() -> Stored {
    Stored {
        session: "s1".into(),
        lifecycle_id: "l1".into(),
        management: Management {
            executable: "/usr/bin/docker".into(),
            cwd: "/data/sessions/s1".into(),
            env: env(&[("CUSTOM_TOKEN", "t"), ("PATH", "/usr/bin")]),
            pass_through: vec!["CUSTOM_TOKEN".into()],
            target: Target {
                name: "w-s1".into(),
                global_args: argv(&["--context", "remote"]),
                auto_remove: true,
            },
        },
    }
}

#[test]
fn the_stored_context_round_trips_and_refuses_what_the_hub_never_writes() {
    let s = stored();
    assert_eq!(from_json(&to_json(&s)).unwrap(), s);
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut v = to_json(&s);
        edit(&mut v);
        from_json(&v)
    };
    for edit in [
        &(|v: &mut Value| v["executable"] = json!("docker")) as &dyn Fn(&mut Value),
        &|v: &mut Value| v["cwd"] = json!("rel"),
        &|v: &mut Value| v["executable"] = json!("/usr/bin/do\0cker"),
        &|v: &mut Value| v["name"] = json!("-x"),
        &|v: &mut Value| v["global_args"] = json!(["rm", "-f"]),
        &|v: &mut Value| v["global_args"] = json!(["--unknown"]),
        &|v: &mut Value| v["global_args"] = json!("x"),
        &|v: &mut Value| v["auto_remove"] = json!("yes"),
        &|v: &mut Value| v["pass_through"] = json!(["A", "A"]),
        &|v: &mut Value| v["pass_through"] = json!(["DOCKER_*"]),
        &|v: &mut Value| v["env"] = json!({"A=B": "x"}),
        &|v: &mut Value| v["env"] = json!({"PATH": 1}),
        &|v: &mut Value| v["env"] = json!([]),
        &|v: &mut Value| {
            v.as_object_mut().unwrap().remove("lifecycle_id");
        },
    ] {
        assert!(broken(edit).is_err(), "{}", {
            let mut v = to_json(&s);
            edit(&mut v);
            v
        });
    }
    // Variables beyond the allow-list and the stored names are dropped
    // on reading, never added.
    let read = broken(&|v: &mut Value| {
        v["env"]["MODEL_API_KEY"] = json!("leaked");
        v["pass_through"] = json!([]);
    })
    .unwrap();
    assert_eq!(read.management.env, env(&[("PATH", "/usr/bin")]));
}

#[test]
fn a_node_hubs_context_becomes_ours_for_the_same_container() {
    let args = argv(&[
        "--context",
        "remote",
        "run",
        "--rm",
        "--name",
        "w-s1",
        "img",
        "w",
    ]);
    let node = json!({
        "executable": "/usr/bin/docker",
        "cwd": "/data/sessions/s1",
        "env": {"PATH": "/usr/bin", "CUSTOM_TOKEN": "t", "MODEL_API_KEY": "secret"},
        "name": "w-s1",
    });
    let pass = vec!["CUSTOM_TOKEN".to_string()];
    let got = from_node("s1", "l1", "docker", &args, &node, &pass).unwrap();
    assert_eq!(
        got,
        stored(),
        "the secret outside the allow-list is dropped"
    );
    // What it is written as reads back the same.
    assert_eq!(from_json(&to_json(&got)).unwrap(), got);

    let refused = |edit: &dyn Fn(&mut Value), args: &[String]| {
        let mut v = node.clone();
        edit(&mut v);
        from_node("s1", "l1", "/usr/bin/docker", args, &v, &pass)
    };
    let same = &|_: &mut Value| {};
    for (edit, args, why) in [
        (
            &(|v: &mut Value| v["name"] = json!("w-s2")) as &dyn Fn(&mut Value),
            args.clone(),
            "names container w-s2",
        ),
        (
            &|v: &mut Value| v["executable"] = json!("docker"),
            args.clone(),
            "executable",
        ),
        (
            &|v: &mut Value| v["cwd"] = json!("/a\0b"),
            args.clone(),
            "cwd",
        ),
        (
            &|v: &mut Value| v["env"] = json!({"A=B": "x"}),
            args.clone(),
            "bad name",
        ),
        (
            &|v: &mut Value| v["env"] = json!({"A": 1}),
            args.clone(),
            "env A",
        ),
        (
            &|v: &mut Value| v["env"] = json!("PATH=/bin"),
            args.clone(),
            "env is not",
        ),
        (
            &|v: &mut Value| *v = json!(null),
            args.clone(),
            "not an object",
        ),
        (
            same,
            argv(&["run", "-d", "--name", "w-s1", "img"]),
            "detached",
        ),
        (same, argv(&["ps"]), "not a docker run"),
    ] {
        let err = refused(edit, &args).unwrap_err().to_string();
        assert!(err.contains(why), "{why}: {err}");
    }
}
