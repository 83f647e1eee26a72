//! The predefined skill library's read-only commands (`skills`).

use super::OpError;
use crate::hub::Hub;
use crate::skills::store::Listing;
use crate::skills::Served;

/// Every skill that reads, and the files that do not, each with why.
pub fn list(hub: &Hub) -> Result<Listing, OpError> {
    Ok(hub.skills.list()?)
}

/// The authoring template's text.
pub fn template() -> &'static str {
    crate::skills::TEMPLATE
}

/// One skill, its references expanded.
pub fn read(hub: &Hub, id: &str) -> Result<Served, OpError> {
    Ok(hub.skills.get(id)?)
}
