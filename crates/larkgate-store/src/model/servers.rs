//! The records of virtual servers added at run time (those of the configuration file are not
//! stored).

use serde::{Deserialize, Serialize};

/// A virtual server added with `larkgate server add` or the `server_add` tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    /// Its name: it is served at `/mcp/NAME`.
    pub name: String,
    /// What it serves, as JSON (the platform crate owns the format).
    pub spec: String,
    /// Who added it, or last replaced it.
    pub added_by: String,
    /// When (Unix ms).
    pub added_at_ms: i64,
}

/// Whether [`crate::ServerStore::save_server`] adds a server or replaces one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerSave {
    /// A new name: [`crate::StoreError::Conflict`] if a stored server has it.
    New,
    /// A stored server's new definition: [`crate::StoreError::Missing`] if none has the name.
    Replace,
}
