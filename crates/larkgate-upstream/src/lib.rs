//! larkgate's client for third-party MCP servers.
//!
//! - [`guard`]: the URL guard every request and every redirect hop passes.
//! - [`client`]: one connection to an MCP server over Streamable HTTP, or over the standard
//!   input and output of a program it starts ([`command`], through the [`launcher`]).
//! - [`config`]: one upstream's configuration; [`connect`]: connecting as it says.
//! - [`tools`]: an upstream's tools as platform tools.
//! - [`federation`]: keeping every upstream connected, checked against its pins, and published.
//! - [`pinning`]: tool definitions pinned at adoption, changes quarantined until reviewed.
//! - [`manage`]: adding, reviewing and removing upstreams; [`admin`]: the same as admin tools
//!   of a running gateway.
//! - [`http`]: the guarded HTTP client the MCP transport runs on: no proxies, redirects only
//!   within the upstream's origin, names resolved only through the guard, response bytes capped.
//! - [`oauth`]: OAuth-protected upstreams: rmcp's flows over a guarded client of their own;
//!   [`credentials`]: their tokens, sealed with the operator's key before they reach the store.

#![forbid(unsafe_code)]

pub mod admin;
pub mod catalog;
pub mod client;
pub mod command;
pub mod config;
pub mod connect;
pub mod credentials;
pub mod federation;
pub mod guard;
pub mod http;
pub mod launcher;
pub mod manage;
pub mod oauth;
pub mod pinning;
pub mod redact;
pub mod tools;
pub mod watches;

pub use guard::{Allowed, GuardError, Resolve, SystemResolver, UrlGuard};
