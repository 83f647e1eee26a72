//! The predefined skill library's read-only commands (`skills`).

use serde_json::{json, Value};

use super::OpError;
use crate::hub::Hub;

/// `{skills: [SkillSummary…], errors: [{id, message}…]}`.
pub fn list(hub: &Hub) -> Result<Value, OpError> {
    let listing = hub.skills.list()?;
    Ok(json!({
        "skills": listing.skills.iter().map(|s| s.summary()).collect::<Vec<_>>(),
        "errors": listing
            .errors
            .iter()
            .map(|(id, message)| json!({"id": id, "message": message}))
            .collect::<Vec<_>>(),
    }))
}

/// The authoring template's text.
pub fn template() -> &'static str {
    crate::skills::TEMPLATE
}

/// `SkillDocument`: one skill, its references expanded.
pub fn read(hub: &Hub, id: &str) -> Result<Value, OpError> {
    Ok(hub.skills.get(id)?.document())
}
