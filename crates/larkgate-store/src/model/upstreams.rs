//! The records of federated upstreams: those added at run time, their sealed credentials, the
//! running gateway's view of them, and the pins of their tools.

use serde::{Deserialize, Serialize};

/// An OAuth-protected upstream's credentials as larkgate sealed them: the store keeps the
/// sealed bytes only, never the credentials in the clear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamCredentials {
    /// The upstream's alias.
    pub alias: String,
    /// The sealed credentials.
    pub sealed: Vec<u8>,
    /// When they were saved (Unix ms).
    pub updated_at_ms: i64,
}

/// An upstream added with `larkgate upstream add` (those in the configuration file are not
/// stored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamRecord {
    /// Its alias.
    pub alias: String,
    /// Its configuration, as JSON (the upstream crate owns the format).
    pub config: String,
    /// Who added it.
    pub added_by: String,
    /// When (Unix ms).
    pub added_at_ms: i64,
}

/// How a running gateway last saw one of its upstreams.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamStatusRecord {
    /// The upstream's alias.
    pub alias: String,
    /// Its status, as JSON (the upstream crate owns the format).
    pub status: String,
    /// When the gateway saved it (Unix ms).
    pub updated_at_ms: i64,
}

/// Whether a pinned tool may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PinStatus {
    /// The pinned definition is the one in use.
    Approved,
    /// The upstream changed the definition (or added the tool after adoption): not listed,
    /// calls refused, until an operator reviews it.
    Quarantined,
}

impl PinStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            PinStatus::Approved => "approved",
            PinStatus::Quarantined => "quarantined",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approved" => PinStatus::Approved,
            "quarantined" => PinStatus::Quarantined,
            _ => return None,
        })
    }
}

/// The pinned definition of one upstream tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPin {
    /// The upstream's alias.
    pub alias: String,
    /// The tool's name at the upstream.
    pub tool: String,
    /// SHA-256 (hex) of the approved definition's canonical JSON (empty for a tool that
    /// appeared after adoption and was never approved).
    pub hash: String,
    /// The approved definition, canonical JSON.
    pub definition: String,
    /// Whether the tool may be used.
    pub status: PinStatus,
    /// For a quarantined tool: the definition the upstream now serves, and its hash.
    pub pending: Option<(String, String)>,
    /// Who last reviewed it (`None` when pinned at adoption).
    pub reviewed_by: Option<String>,
    /// When it last changed (Unix ms).
    pub updated_at_ms: i64,
}
