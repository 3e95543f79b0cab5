//! How larkgate names what it federates, composed from an upstream's alias and the name or URI
//! the upstream gave it. The way back is a lookup of the composed name, never a split.

/// Separates an alias from a tool's original name in a prefixed name (`github__search`).
pub const SEPARATOR: &str = "__";

/// The scheme and separator every federated resource URI begins with.
pub const URI_PREFIX: &str = "larkgate://";

/// The MCP-facing name of tool (or prompt) `original` under `alias`: `<alias>__<original>`.
/// A tool's name is checked when it is registered
/// ([`check_tool_name`](crate::registry::check_tool_name)).
pub fn prefixed_name(alias: &str, original: &str) -> String {
    format!("{alias}{SEPARATOR}{original}")
}

/// The larkgate URI of upstream `alias`'s resource (or template) `original`.
pub fn resource_uri(alias: &str, original: &str) -> String {
    format!("{URI_PREFIX}{alias}/{original}")
}
