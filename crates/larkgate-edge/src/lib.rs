//! larkgate's HTTP edge: the MCP endpoint at `/mcp` over Streamable HTTP, as `larkgate serve`
//! serves it, and the admin console at `/admin` ([`console`]). Its bounds are the `[server]`
//! section of the configuration ([`server::ServerConfig`]); the identity providers it accepts,
//! `[sign_in]` ([`sign_in::SignInConfig`]). Every connection is accepted by [`accept`] (a cap on connections, header-read and idle
//! timeouts, a cap on header size, `TCP_NODELAY`), and every request to `/mcp` crosses, in
//! order:
//!
//! - [`access`]: the request's access-log line and span, written when its answer ends;
//! 0. [`address`]: `Host` must name this server and a browser `Origin` must be allowed
//!    (DNS-rebinding protection); forwarding headers count only from trusted proxies;
//! 1. [`auth`]: the bearer token is verified against the store at every request (a revoked
//!    token is refused from its next request; the principal's roles are read as they are now),
//!    or, with `[sign_in]`, an identity provider's access token against the provider's keys
//!    ([`sign_in`]), and a 2025-11-25 session is used only by the principal that opened it;
//! 2. [`json_rpc`]: the body is read within its byte cap and time ([`json_rpc::BodyLimits`]),
//!    malformed JSON-RPC is answered in JSON-RPC, and a session the request opens is entered
//!    in the registry of [`sessions`] within its caps;
//! 3. rmcp's Streamable HTTP service, configured by [`mcp_config`];
//! 4. the platform's pipeline, with the principal bound to the request.
//!
//! Every refusal at the edge is an [`EdgeError`], turned into an HTTP answer in one place.
//! With `[sign_in]`, the protected resource metadata that tells clients where to sign in is
//! served beside `/mcp` ([`sign_in::metadata`]), to anyone, without a token.
//!
//! ## Threat model
//!
//! The edge faces any process that can reach the listening socket (loopback by default; any
//! network when an operator binds elsewhere) and any web page a local browser opens.
//! - A caller without a valid token learns nothing but that it needs one (401, with
//!   `WWW-Authenticate`); a token is compared only by its SHA-256 hash, in constant time.
//! - A stolen 2025-11-25 session id is useless with another principal's token (403).
//! - A web page cannot drive the endpoint through the browser: a request with an `Origin`
//!   header, or with a `Host` that is not this server (DNS rebinding), is refused (403).
//! - Malformed or oversized input gets a JSON-RPC error that says what was wrong; the server
//!   keeps serving. Bodies are read within a cap (413 past it, before reading when the
//!   declared length is too large) and a time (408).
//! - Connections and sessions are bounded in number and in time ([`accept`], [`sessions`]), so
//!   neither a flood of idle sockets nor of `initialize` requests exhausts the process.
//! - No answer carries a secret or an internal detail: a failure of larkgate itself is told as
//!   "larkgate failed" with a correlation id, and the detail is logged under that id.

#![forbid(unsafe_code)]

pub mod accept;
pub mod access;
pub mod address;
pub mod auth;
pub mod console;
pub mod error;
pub mod json_rpc;
pub mod routes;
pub mod server;
pub mod servers;
pub mod service_url;
pub mod sessions;
pub mod sign_in;
pub mod throttle;

use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;

pub use auth::{Auth, authenticate, verify_token};
pub use error::{EdgeError, codes};
pub use json_rpc::json_rpc_shape;

/// rmcp's Streamable HTTP configuration for `/mcp`: a plain JSON answer for a call that sends
/// nothing before its result (rmcp switches to an event stream for one that sends progress or
/// requests first), sessions idle-expired by [`sessions`], and browser `Origin`s refused
/// unless listed in `origins` (checked first, and answered in JSON-RPC, by
/// [`address::check_address`], which also checks `Host`, behind trusted proxies too; rmcp's own
/// `Host` check, which knows no proxies, is off).
pub fn mcp_config(origins: &[String]) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_json_response(true)
        .disable_allowed_hosts()
        .with_allowed_origins(origins.iter().cloned())
        .enforce_origin_validation()
}
