//! The HTTP edge: the MCP endpoint at `/mcp` over Streamable HTTP, as `larkgate serve` serves
//! it. Every request to `/mcp` crosses, in order:
//!
//! 1. [`auth`]: the bearer token is verified against the store at every request (a revoked
//!    token is refused from its next request; the principal's roles are read as they are now),
//!    and a 2025-11-25 session is bound to the principal that opened it;
//! 2. [`json_rpc`]: the body is read within [`json_rpc::MAX_BODY`] and malformed JSON-RPC is
//!    answered in JSON-RPC;
//! 3. rmcp's Streamable HTTP service, configured by [`mcp_config`]: `Host` must name this
//!    server and a browser `Origin` is refused (DNS-rebinding protection);
//! 4. the platform's pipeline, with the principal bound to the request.
//!
//! Every refusal at the edge is an [`EdgeError`], turned into an HTTP answer in one place.
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
//!   keeps serving. Bodies are read within a cap (413 past it).
//! - No answer carries a secret or an internal detail: a failure of larkgate itself is told as
//!   "larkgate failed" with a correlation id, and the detail is logged under that id.
//!
//! Every accepted socket has `TCP_NODELAY` ([`no_delay`]). Not yet bounded here: connection
//! counts, header-read and idle timeouts, session counts.

pub mod auth;
pub mod error;
pub mod json_rpc;

use std::net::SocketAddr;

use axum::serve::{Listener, ListenerExt};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use tokio::net::TcpListener;

pub use auth::{Auth, authenticate, verify_token};
pub use error::{EdgeError, codes};
pub use json_rpc::json_rpc_shape;

/// Accepts connections on `listener` with `TCP_NODELAY` set on each. A 2025-11-25 session's
/// answer is an event stream written in two writes; without the option, Nagle's algorithm holds
/// the second write until the client's delayed acknowledgement, about 40 ms on every call.
pub fn no_delay(
    listener: TcpListener,
) -> impl Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!(%error, "TCP_NODELAY could not be set on an accepted connection");
        }
    })
}

/// The `Host` values this server answers to: loopback names and the address it listens on.
pub fn allowed_hosts(listen: SocketAddr) -> Vec<String> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
    ];
    hosts.push(listen.ip().to_string());
    hosts
}

/// rmcp's Streamable HTTP configuration for `/mcp` on `listen`: `Host` checked against
/// [`allowed_hosts`], browser `Origin`s refused, and a plain JSON answer for a call that sends
/// nothing before its result (rmcp switches to an event stream for one that sends progress or
/// requests first).
pub fn mcp_config(listen: SocketAddr) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_allowed_hosts(allowed_hosts(listen))
        .enforce_origin_validation()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_accepted_connection_has_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut listener = no_delay(listener);
        for _ in 0..3 {
            let client = tokio::net::TcpStream::connect(address).await.unwrap();
            let (accepted, peer) = listener.accept().await;
            assert_eq!(peer, client.local_addr().unwrap());
            assert!(
                accepted.nodelay().unwrap(),
                "an accepted socket without TCP_NODELAY"
            );
        }
        // The option is larkgate's doing: a plain listener leaves it off.
        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(plain.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = plain.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap());
    }
}
