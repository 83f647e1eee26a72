//! The subagent service's handle: the shared handles it works with, its
//! family-wide state and the worker queries it asks children's workers.

use std::ops::Deref;
use std::sync::Arc;

use crate::services::Services;
use crate::worker::query::Queries;

use super::family::Family;

/// What every part of the subagent service takes (the hub holds one).
pub struct Service {
    pub services: Arc<Services>,
    /// Fork serialization, terminal records, the recovery block.
    pub family: Family,
    /// Pending read-only worker queries (history refreshes).
    pub queries: Arc<Queries>,
}

impl Service {
    pub fn new(services: Arc<Services>, queries: Arc<Queries>) -> Service {
        Service {
            services,
            family: Family::default(),
            queries,
        }
    }
}

impl Deref for Service {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
}
