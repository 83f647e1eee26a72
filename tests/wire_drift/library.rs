//! The configuration library's and the skill library's responses against
//! their shapes.

use super::*;

/// The configuration library's and the skill library's responses, and a
/// library session over both APIs, against the Node hub's shapes
/// (`hub/shared/configurations.ts`) and the seed's skill shapes.
#[test]
fn configuration_and_skill_responses_have_their_shapes() {
    let dir = TempDir::new("drift-library");
    let hub = TestHub::start(dir.path(), &[]);
    let mut drift = Drift::default();
    let d = &mut drift;

    let (_, meta) = api(d, &hub, "GET /api/meta", "GET", "/api/meta", None);
    for capability in ["configuration-library", "skill-library"] {
        d.expect(
            meta["capabilities"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c == capability)),
            format!("meta does not advertise {capability}"),
        );
    }
    let (_, list) = api(
        d,
        &hub,
        "GET /api/configurations",
        "GET",
        "/api/configurations",
        None,
    );
    d.expect(
        list["launch"] == json!(["docker", "local"]),
        format!("list: {list}"),
    );
    let route = "GET /api/configurations/:kind/template";
    for path in [
        "/api/configurations/launch/template",
        "/api/configurations/launch/template?source=docker",
        "/api/configurations/launch/template?source=deployment",
        "/api/configurations/worker/template?source=deployment",
        "/api/configurations/worker/template?source=docker",
    ] {
        api(d, &hub, route, "GET", path, None);
    }
    let route = "GET /api/configurations/:kind/:id";
    let (_, local) = api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/launch/local",
        None,
    );
    let (_, worker) = api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/worker/default",
        None,
    );
    api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/worker/nope",
        None,
    );
    api(d, &hub, route, "GET", "/api/configurations/worker/..", None);
    let worker_text = worker["text"]
        .as_str()
        .unwrap_or_default()
        .replace("YOUR_PROVIDER:", "mock:")
        .replace("driver_model: YOUR_PROVIDER", "driver_model: mock");
    let route = "PUT /api/configurations/:kind/:id";
    let put = |d: &mut Drift, id: &str, body: Value| {
        api(
            d,
            &hub,
            route,
            "PUT",
            &format!("/api/configurations/worker/{id}"),
            Some(body),
        )
    };
    let (status, saved) = put(d, "mine", json!({"text": worker_text, "revision": null}));
    d.expect(status == 200, format!("create: {status} {saved}"));
    put(d, "mine", json!({"text": worker_text, "revision": null}));
    put(
        d,
        "mine",
        json!({"text": "a: [", "revision": saved["revision"]}),
    );
    let route = "POST /api/configurations/:kind/validate";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/validate",
        Some(json!({"text": worker_text})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/launch/validate",
        Some(json!({"text": "{"})),
    );
    let route = "POST /api/configurations/preview";
    let (_, preview) = api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/preview",
        Some(json!({"launch": local["text"]})),
    );
    d.expect(
        preview["endpoints"]["events"]
            .as_str()
            .is_some_and(|e| e.contains("/agent/SESSION_ID/events?token=SESSION_TOKEN")),
        format!("preview: {preview}"),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/preview",
        Some(json!({"launch": 3})),
    );
    let route = "POST /api/configurations/:kind/:id/rename";
    let (_, renamed) = api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/mine/rename",
        Some(json!({"id": "ours", "revision": saved["revision"]})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/ours/rename",
        Some(json!({"id": "default", "revision": renamed["revision"]})),
    );

    // A library session over REST and over the panel socket.
    let pair = json!({"launchConfig": "local", "workerConfig": "ours"});
    let (status, created) = api(
        d,
        &hub,
        "POST /api/sessions",
        "POST",
        "/api/sessions",
        Some(json!({"session": "lib", "spec": pair})),
    );
    d.expect(
        status == 201,
        format!("library session: {status} {created}"),
    );
    api(
        d,
        &hub,
        "POST /api/sessions",
        "POST",
        "/api/sessions",
        Some(json!({"session": "half", "spec": {"launchConfig": "local"}})),
    );
    let route = "POST /api/sessions/:id/configurations";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/lib/configurations",
        Some(json!({"launchConfig": "docker", "workerConfig": "ours"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/lib/configurations",
        Some(json!({})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/ghost/configurations",
        Some(pair.clone()),
    );
    let (mut a, _) = Panel::open(&hub, "a", d);
    let frame = a.ask(
        d,
        json!({"type": "create_session", "session": "lib2", "spec": pair}),
        &["created"],
    );
    d.expect(
        frame["session"]["spec"]["workerConfig"] == "ours",
        format!("created: {frame}"),
    );
    a.ask(
        d,
        json!({"type": "create_session", "session": "lib3", "spec": {"launchConfig": "local", "workerConfig": "none"}}),
        &["error"],
    );
    let route = "DELETE /api/configurations/:kind/:id";
    api(
        d,
        &hub,
        route,
        "DELETE",
        "/api/configurations/worker/ours",
        Some(json!({"revision": "stale"})),
    );
    api(
        d,
        &hub,
        route,
        "DELETE",
        "/api/configurations/worker/ours",
        Some(json!({"revision": renamed["revision"]})),
    );

    // Skills: a good file, a malformed one, the template.
    let skills = dir.path().join("skills");
    std::fs::write(
        skills.join("good.yaml"),
        "name: good\ntitle: Good\nkeywords: [a]\ntext: 'Do it. {{input}}'\n",
    )
    .unwrap();
    std::fs::write(skills.join("bad.yaml"), "name: [").unwrap();
    let (_, list) = api(d, &hub, "GET /api/skills", "GET", "/api/skills", None);
    d.expect(list["errors"][0]["id"] == "bad", format!("skills: {list}"));
    api(
        d,
        &hub,
        "GET /api/skills/template",
        "GET",
        "/api/skills/template",
        None,
    );
    let route = "GET /api/skills/:id";
    api(d, &hub, route, "GET", "/api/skills/good", None);
    api(d, &hub, route, "GET", "/api/skills/bad", None);
    api(d, &hub, route, "GET", "/api/skills/missing", None);
    for i in 0..257 {
        std::fs::write(skills.join(format!("n{i}.yaml")), "name: [").unwrap();
    }
    api(d, &hub, "GET /api/skills", "GET", "/api/skills", None);
    drop(a);
    drift.assert_none();
}
