//! The predefined skill library over the JSON API: the list with its
//! errors and its 256-file limit, one skill with its references expanded,
//! the template, and the refusals (missing, invalid ids, malformed,
//! oversized and symbolically linked files).

use serde_json::{json, Value};

use crate::util::*;

fn skills_dir(hub: &TestHub) -> std::path::PathBuf {
    hub.data_dir.join("skills")
}

fn write_skill(hub: &TestHub, id: &str, text: &str) {
    std::fs::write(skills_dir(hub).join(format!("{id}.yaml")), text).unwrap();
}

fn simple(name: &str, text: &str) -> String {
    format!(
        "name: {name}\ntitle: The {name} skill\ntext: {}\n",
        json!(text)
    )
}

#[track_caller]
fn refused(res: &Response, status: u16, code: &str) -> String {
    assert_eq!(res.status, status, "{}", res.text());
    let body = res.json();
    assert_eq!(body["error"], code, "{body}");
    body["message"].as_str().unwrap().to_string()
}

fn error_ids(list: &Value) -> Vec<String> {
    list["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

fn skill_ids(list: &Value) -> Vec<String> {
    list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_template_is_served_and_passes_its_own_validation() {
    let dir = TempDir::new("skills-template");
    let hub = TestHub::start(dir.path(), &[]);
    assert!(skills_dir(&hub).is_dir());
    let list = hub.get("/api/skills");
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(list.json(), json!({"skills": [], "errors": []}));
    let template = hub.get("/api/skills/template").json();
    let text = template["text"].as_str().unwrap();
    assert!(
        text.contains("name:") && text.contains("{{input}}"),
        "{text}"
    );
    // Saved as a file, the template is a valid skill.
    write_skill(&hub, "from-template", text);
    let doc = hub.get("/api/skills/from-template");
    assert_eq!(doc.status, 200, "{}", doc.text());
    let doc = doc.json();
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "id",
            "name",
            "title",
            "description",
            "keywords",
            "revision",
            "text"
        ]
    );
    assert_eq!(doc["id"], "from-template");
    assert_eq!(doc["name"], "review-changes");
    assert!(doc["keywords"]
        .as_array()
        .unwrap()
        .contains(&json!("review")));
    assert_eq!(doc["revision"].as_str().unwrap().len(), 64);
    // The summary is the document without its text.
    let list = hub.get("/api/skills").json();
    let mut summary = doc.clone();
    summary.as_object_mut().unwrap().remove("text");
    assert_eq!(list["skills"], json!([summary]));
}

#[test]
fn a_malformed_skill_is_listed_beside_the_good_ones() {
    let dir = TempDir::new("skills-errors");
    let hub = TestHub::start(dir.path(), &[]);
    write_skill(
        &hub,
        "good",
        &simple("good", "Do the good thing. {{input}}"),
    );
    write_skill(&hub, "broken", "name: broken\ntitle: [unclosed\n");
    write_skill(&hub, "partial", "name: partial\ntitle: No text\n");
    write_skill(
        &hub,
        "dangling",
        &simple("dangling", "see {{skill:nowhere}}"),
    );
    write_skill(&hub, "template", &simple("reserved", "x"));
    write_skill(&hub, "bad name", &simple("spaced", "x"));
    write_skill(&hub, "twin", &simple("good", "same name as good"));
    let big = format!(
        "name: big\ntitle: Big\ntext: {}\n",
        json!("x".repeat(64 * 1024))
    );
    write_skill(&hub, "big", &big);
    let outside = dir.path().join("outside.yaml");
    std::fs::write(&outside, simple("outside", "secret instructions")).unwrap();
    std::os::unix::fs::symlink(&outside, skills_dir(&hub).join("linked.yaml")).unwrap();
    std::fs::write(skills_dir(&hub).join("notes.txt"), "not a skill").unwrap();

    let list = hub.get("/api/skills");
    assert_eq!(list.status, 200, "{}", list.text());
    let list = list.json();
    assert_eq!(skill_ids(&list), ["good"]);
    assert_eq!(
        error_ids(&list),
        ["bad name", "big", "broken", "dangling", "linked", "partial", "template", "twin"]
    );
    for error in list["errors"].as_array().unwrap() {
        let message = error["message"].as_str().unwrap();
        assert!(!message.is_empty());
        assert!(!message.contains("secret instructions"), "{message}");
    }
    // Alone, each is refused.
    for id in ["broken", "partial", "dangling", "big", "linked"] {
        refused(&hub.get(&format!("/api/skills/{id}")), 400, "invalid_skill");
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        simple("outside", "secret instructions")
    );
    refused(&hub.get("/api/skills/missing"), 404, "skill_not_found");
    for bad in ["..%2Foutside", "a%2Fb", "bad%20name", "good.yaml", "%2E%2E"] {
        refused(
            &hub.get(&format!("/api/skills/{bad}")),
            400,
            "invalid_skill",
        );
    }
    refused(&hub.get("/api/skills/a/b"), 404, "not_found");
    refused(
        &hub.request("POST", "/api/skills/good", &[], b"{}"),
        405,
        "method_not_allowed",
    );
    // The template route is never a file of that name.
    assert_ne!(
        hub.get("/api/skills/template").json()["text"],
        simple("reserved", "x")
    );
}

#[test]
fn references_expand_and_the_revision_follows_them() {
    let dir = TempDir::new("skills-refs");
    let hub = TestHub::start(dir.path(), &[]);
    write_skill(&hub, "base", &simple("base", "Be careful."));
    write_skill(
        &hub,
        "task",
        &simple("task", "{{skill:base}} Then: {{input}}"),
    );
    let doc = hub.get("/api/skills/task").json();
    assert_eq!(doc["text"], "Be careful. Then: {{input}}");
    let first = doc["revision"].clone();
    assert_eq!(hub.get("/api/skills/task").json()["revision"], first);
    write_skill(&hub, "base", &simple("base", "Be very careful."));
    let doc = hub.get("/api/skills/task").json();
    assert_eq!(doc["text"], "Be very careful. Then: {{input}}");
    assert_ne!(doc["revision"], first);
    let list = hub.get("/api/skills").json();
    let listed = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "task")
        .unwrap()
        .clone();
    assert_eq!(listed["revision"], doc["revision"]);
    // A cycle is reported, for both skills.
    write_skill(&hub, "base", &simple("base", "{{skill:task}}"));
    let list = hub.get("/api/skills").json();
    assert_eq!(error_ids(&list), ["base", "task"]);
    assert!(refused(&hub.get("/api/skills/task"), 400, "invalid_skill").contains("cycle"));
}

#[test]
fn more_than_256_files_fail_the_list() {
    let dir = TempDir::new("skills-many");
    let hub = TestHub::start(dir.path(), &[]);
    for i in 0..256 {
        write_skill(&hub, &format!("s{i:03}"), &simple(&format!("s{i:03}"), "x"));
    }
    let list = hub.get("/api/skills");
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(list.json()["skills"].as_array().unwrap().len(), 256);
    write_skill(&hub, "s256", &simple("s256", "x"));
    let message = refused(&hub.get("/api/skills"), 500, "too_many_skills");
    assert!(message.contains("257"), "{message}");
    // One skill is still served.
    assert_eq!(hub.get("/api/skills/s256").status, 200);
    std::fs::remove_file(skills_dir(&hub).join("s000.yaml")).unwrap();
    assert_eq!(hub.get("/api/skills").status, 200);
}

#[test]
fn the_skill_routes_need_the_panel_token() {
    let dir = TempDir::new("skills-auth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "s3cret"]);
    for path in ["/api/skills", "/api/skills/template", "/api/skills/x"] {
        refused(&hub.get(path), 401, "unauthorized");
    }
    assert_eq!(hub.get("/api/skills?token=s3cret").status, 200);
}
