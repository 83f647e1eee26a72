//! Checks JSON values against the Node hub's wire shapes
//! (`tests/fixtures/node_wire.json`; its `about` entry describes the
//! grammar). Extra fields are allowed; a named field with another type, a
//! missing required field, or a value outside a fixed set is a violation,
//! reported with the path where it was found.

use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The fixture, parsed once.
pub fn node_wire() -> &'static Shapes {
    static SHAPES: OnceLock<Shapes> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let text = include_str!("../fixtures/node_wire.json");
        Shapes::new(serde_json::from_str(text).expect("node_wire.json is JSON"))
    })
}

/// The shapes of one fixture document.
pub struct Shapes {
    doc: Value,
}

impl Shapes {
    pub fn new(doc: Value) -> Shapes {
        Shapes { doc }
    }

    /// Every violation of the shape `shape` by `value`, each as
    /// `path: what is wrong`; empty when it conforms.
    pub fn violations(&self, shape: &Value, value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.check(shape, value, "$", &mut out);
        out
    }

    /// Violations of the named type (an entry of `types`).
    pub fn type_violations(&self, name: &str, value: &Value) -> Vec<String> {
        self.violations(&Value::String(name.to_string()), value)
    }

    /// Violations of a hub -> panel message, chosen by its `type`; an
    /// unknown type is a violation itself.
    pub fn frame_violations(&self, frame: &Value) -> Vec<String> {
        let kind = frame["type"].as_str().unwrap_or("");
        match self.doc["hub_messages"].get(kind) {
            Some(shape) => self.violations(shape, frame),
            None => vec![format!("$.type: {kind:?} is no Node hub message type")],
        }
    }

    /// Violations of a panel -> hub message (`type` chooses the shape).
    pub fn panel_message_violations(&self, message: &Value) -> Vec<String> {
        let kind = message["type"].as_str().unwrap_or("");
        match self.doc["panel_messages"].get(kind) {
            Some(shape) => self.violations(shape, message),
            None => vec![format!("$.type: {kind:?} is no Node panel message type")],
        }
    }

    /// Violations of a JSON API response: the route's shape for `status`
    /// when the fixture names one, else the error body for a status of 400
    /// or more. A success status the fixture does not name, on a route it
    /// knows, is a violation; routes only this hub has are checked for
    /// their error bodies only.
    pub fn route_violations(&self, route: &str, status: u16, body: &Value) -> Vec<String> {
        let known = self.doc["routes"].get(route);
        if let Some(shape) = known.and_then(|r| r.get(status.to_string())) {
            return self.violations(shape, body);
        }
        if status >= 400 {
            return self.violations(&self.doc["error_body"], body);
        }
        if known.is_some() {
            return vec![format!(
                "{route} answered {status}, which no Node hub sends"
            )];
        }
        let hub_only = self.doc["this_hub_only_routes"]
            .as_array()
            .is_some_and(|routes| routes.iter().any(|r| r == route));
        if hub_only {
            Vec::new()
        } else {
            vec![format!(
                "{route} is in neither routes nor this_hub_only_routes"
            )]
        }
    }

    /// Violations of a subagent tool route's result (`tool_results`).
    pub fn tool_result_violations(&self, name: &str, result: &Value) -> Vec<String> {
        match self.doc["tool_results"].get(name) {
            Some(shape) => self.violations(shape, result),
            None => vec![format!("no tool result shape {name:?}")],
        }
    }

    fn check(&self, shape: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
        match shape {
            Value::String(spec) => self.check_spec(spec, value, path, out),
            Value::Object(fields) => check_object(self, fields, value, path, out),
            Value::Array(element) if element.len() == 1 => match value {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check(&element[0], item, &format!("{path}[{i}]"), out);
                    }
                }
                other => out.push(format!("{path}: expected an array, found {}", kind(other))),
            },
            other => out.push(format!("{path}: the fixture has a malformed shape {other}")),
        }
    }

    /// A `|`-separated spec: the value must match one alternative. When
    /// one alternative has the value's JSON kind, its deeper violations are
    /// reported (they say more than "no alternative matched").
    fn check_spec(&self, spec: &str, value: &Value, path: &str, out: &mut Vec<String>) {
        let mut closest: Option<Vec<String>> = None;
        for alternative in spec.split('|').map(str::trim) {
            let mut found = Vec::new();
            self.check_alternative(alternative, value, path, &mut found);
            if found.is_empty() {
                return;
            }
            let same_kind = found
                .iter()
                .all(|v| !v.starts_with(&format!("{path}: expected")));
            if same_kind && closest.is_none() {
                closest = Some(found);
            }
        }
        match closest {
            Some(found) => out.extend(found),
            None => out.push(format!(
                "{path}: expected {spec}, found {}",
                describe(value)
            )),
        }
    }

    fn check_alternative(&self, alt: &str, value: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(element) = alt.strip_suffix("[]") {
            match value {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_spec(element, item, &format!("{path}[{i}]"), out);
                    }
                }
                other => out.push(format!("{path}: expected {alt}, found {}", kind(other))),
            }
            return;
        }
        if let Some(literal) = alt.strip_prefix('\'').and_then(|a| a.strip_suffix('\'')) {
            if value.as_str() != Some(literal) {
                out.push(format!("{path}: expected {alt}, found {}", describe(value)));
            }
            return;
        }
        let ok = match alt {
            "any" => true,
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            name => match self.doc["types"].get(name) {
                Some(shape) => {
                    self.check(shape, value, path, out);
                    return;
                }
                None => {
                    out.push(format!("{path}: the fixture names no type {name:?}"));
                    return;
                }
            },
        };
        if !ok {
            out.push(format!("{path}: expected {alt}, found {}", describe(value)));
        }
    }
}

fn check_object(
    shapes: &Shapes,
    fields: &Map<String, Value>,
    value: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let Value::Object(map) = value else {
        out.push(format!(
            "{path}: expected an object, found {}",
            describe(value)
        ));
        return;
    };
    if let Some(each) = fields.get("*").filter(|_| fields.len() == 1) {
        for (key, item) in map {
            shapes.check(each, item, &format!("{path}.{key}"), out);
        }
        return;
    }
    for (name, shape) in fields {
        let (key, optional) = match name.strip_suffix('?') {
            Some(key) => (key, true),
            None => (name.as_str(), false),
        };
        match map.get(key) {
            Some(item) => shapes.check(shape, item, &format!("{path}.{key}"), out),
            None if optional => {}
            None => out.push(format!("{path}.{key}: required, missing")),
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The kind of `value`, with a short rendering of a scalar.
fn describe(value: &Value) -> String {
    match value {
        Value::Null | Value::Array(_) | Value::Object(_) => kind(value).to_string(),
        scalar => {
            let text = scalar.to_string();
            if text.len() > 60 {
                let mut end = 60;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{} ({}…)", kind(scalar), &text[..end])
            } else {
                format!("{} ({text})", kind(scalar))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_fixture_names_only_types_it_defines() {
        let shapes = node_wire();
        // Every named type resolves: checking a null against each top-level
        // shape reports type mismatches, never an unknown name.
        let doc = &shapes.doc;
        let mut all = Vec::new();
        for section in ["types", "hub_messages", "panel_messages", "tool_results"] {
            for shape in doc[section].as_object().unwrap().values() {
                all.push(shape.clone());
            }
        }
        for route in doc["routes"].as_object().unwrap().values() {
            all.extend(route.as_object().unwrap().values().cloned());
        }
        for shape in all {
            collect_names(&shape, &mut |name| {
                assert!(
                    doc["types"].get(name).is_some(),
                    "the fixture names an undefined type {name}"
                );
            });
        }
    }

    fn collect_names(shape: &Value, found: &mut dyn FnMut(&str)) {
        match shape {
            Value::String(spec) => {
                for alt in spec.split('|') {
                    let base = alt.trim().trim_end_matches("[]");
                    let primitive = [
                        "any", "string", "number", "integer", "boolean", "null", "object", "array",
                    ];
                    if !base.starts_with('\'') && !primitive.contains(&base) {
                        found(base);
                    }
                }
            }
            Value::Object(fields) => fields.values().for_each(|s| collect_names(s, found)),
            Value::Array(items) => items.iter().for_each(|s| collect_names(s, found)),
            _ => {}
        }
    }

    fn process() -> Value {
        json!({
            "state": "running", "pid": 7, "started_at": "t", "exited_at": null,
            "exit_code": null, "signal": null, "error": null, "stop_requested": false,
            "command": "w", "args": [], "cwd": "/", "process_group_killed": false,
            "log_path": null, "log_lines": 0, "log_dropped": 0,
        })
    }

    #[test]
    fn a_conforming_value_passes_and_extra_fields_are_allowed() {
        let shapes = node_wire();
        let mut p = process();
        p["adopted"] = json!(true);
        p["log_truncated_bytes"] = json!(0);
        assert_eq!(
            shapes.type_violations("ProcessDescription", &p),
            Vec::<String>::new()
        );
        let frame = json!({"v": 1, "type": "process", "session": "s", "process": null});
        assert_eq!(shapes.frame_violations(&frame), Vec::<String>::new());
    }

    #[test]
    fn a_changed_type_is_refused_with_its_path() {
        let shapes = node_wire();
        let mut p = process();
        p["signal"] = json!(15);
        let found = shapes.type_violations("ProcessDescription", &p);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("$.signal: expected string|null"),
            "{found:?}"
        );
        let frame = json!({"v": 1, "type": "logs", "session": "s", "dropped": 0,
            "lines": [{"stream": "stdout", "text": "x", "at": "t"}]});
        let found = shapes.frame_violations(&frame);
        assert!(
            found
                .iter()
                .any(|v| v.starts_with("$.lines[0]: expected string")),
            "{found:?}"
        );
    }

    #[test]
    fn a_missing_required_field_is_refused_and_an_optional_one_is_not() {
        let shapes = node_wire();
        let mut p = process();
        p.as_object_mut().unwrap().remove("log_lines");
        assert_eq!(
            shapes.type_violations("ProcessDescription", &p),
            vec!["$.log_lines: required, missing".to_string()]
        );
        let welcome = json!({"type": "welcome", "hub": {}, "sessions": []});
        let found = shapes.frame_violations(&welcome);
        assert!(
            found.contains(&"$.subscriptions: required, missing".to_string()),
            "{found:?}"
        );
        // `v` is optional on every message
        assert!(!found.iter().any(|v| v.starts_with("$.v")), "{found:?}");
    }

    #[test]
    fn literals_maps_unions_and_unknown_types() {
        let shapes = node_wire();
        let record = json!({"request_id": "r", "operation": "message", "state": "lost",
            "sent_at": "t", "settled_at": null, "detail": ""});
        let found = shapes.type_violations("RequestRecord", &record);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("$.state: expected 'sent'|"),
            "{found:?}"
        );
        let snapshot = json!({"session_id": "s", "state": null, "readable": null,
            "files": [{"name": "state.json"}]});
        let found = shapes.route_violations("GET /api/sessions/:id/snapshot", 200, &snapshot);
        assert_eq!(
            found,
            vec!["$.files: expected an object, found an array".to_string()]
        );
        let files = json!({"session_id": "s", "state": null, "readable": null,
            "files": {"state": 3}});
        let found = shapes.route_violations("GET /api/sessions/:id/snapshot", 200, &files);
        assert_eq!(
            found,
            vec!["$.files.state: expected string, found number (3)".to_string()]
        );
        // a union reports the deeper problem of the alternative of the same kind
        let event = json!({"type": "event", "session": "s", "hub_seq": null, "envelope": {}});
        let found = shapes.frame_violations(&event);
        assert!(
            found
                .iter()
                .any(|v| v == "$.hub_seq: expected number, found null"),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|v| v == "$.envelope.type: required, missing"),
            "{found:?}"
        );
        assert_eq!(
            shapes.frame_violations(&json!({"type": "gossip"})),
            vec!["$.type: \"gossip\" is no Node hub message type".to_string()]
        );
    }

    #[test]
    fn routes_choose_their_shape_by_status() {
        let shapes = node_wire();
        let error = json!({"error": "unknown_session", "message": "no"});
        assert!(shapes
            .route_violations("GET /api/sessions/:id", 404, &error)
            .is_empty());
        assert_eq!(
            shapes.route_violations("GET /api/sessions/:id", 404, &json!({"error": 1})),
            vec![
                "$.error: expected string, found number (1)".to_string(),
                "$.message: required, missing".to_string()
            ]
        );
        let failed_stop = json!({"ok": false, "how": "sigkill", "forced": true, "error": "x"});
        assert!(shapes
            .route_violations("POST /api/sessions/:id/stop", 409, &failed_stop)
            .is_empty());
        let restart = json!({"ok": true, "pid": 3, "stop": {"ok": true, "how": "sigterm"}});
        let found = shapes.route_violations("POST /api/sessions/:id/restart", 200, &restart);
        assert_eq!(
            found,
            vec!["$.stop: expected string, found an object".to_string()]
        );
        assert!(shapes
            .route_violations("POST /api/sessions/:id/input", 202, &json!({}))
            .is_empty());
        assert_eq!(
            shapes.route_violations("GET /api/sessions", 204, &Value::Null),
            vec!["GET /api/sessions answered 204, which no Node hub sends".to_string()]
        );
    }
}
