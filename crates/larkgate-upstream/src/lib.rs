//! larkgate's client for third-party MCP servers.
//!
//! - [`guard`]: the URL guard every request and every redirect hop passes.
//! - [`http`]: the guarded HTTP client the MCP transport runs on: no proxies, redirects only
//!   within the upstream's origin, names resolved only through the guard, response bytes capped.

#![forbid(unsafe_code)]

pub mod client;
pub mod guard;
pub mod http;

pub use guard::{Allowed, GuardError, Resolve, SystemResolver, UrlGuard};
