//! The front door's pure parts: URL paths and queries, static asset
//! paths, and the token, Origin and Host checks every front-end applies.

pub mod auth;
pub mod path;
pub mod url;
