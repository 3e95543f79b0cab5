//! OAuth for upstreams that want it: the MCP authorization spec on the client side.
//!
//! The flows themselves — protected resource and authorization server metadata discovery, PKCE,
//! dynamic client registration, client ID metadata documents, pre-registered clients, scope
//! selection and step-up, refresh, client credentials — are rmcp's ([`AuthorizationManager`]).
//! What larkgate adds is the network every one of those requests goes over: [`GuardedOAuthHttp`].
//!
//! # Threat model
//!
//! An OAuth-protected upstream names, in metadata it serves, more URLs that its client then
//! fetches: the protected resource metadata (from a `WWW-Authenticate` header), authorization
//! servers, their metadata, registration and token endpoints. Every one of them comes from the
//! upstream, which may be hostile or compromised, so discovery is a way to make larkgate send a
//! request anywhere — to a cloud metadata endpoint, an admin port on loopback, a database on the
//! private network — unless each request is held to the same rules as the MCP traffic itself.
//! [`GuardedOAuthHttp`] therefore:
//!
//! - checks **every request's URL** with the upstream's [`UrlGuard`] (scheme, userinfo, IP
//!   literals, larkgate's own address) before anything is sent;
//! - resolves names **only through the guard** ([`crate::guard::GuardedResolver`]), so a name
//!   that answers with a private address is refused and the address vetted is the one connected
//!   to (no rebinding between check and connect);
//! - follows redirects only when rmcp asks for it (registration), and then **only within the
//!   request's origin**, each hop re-checked; where rmcp asks for none (discovery, which follows
//!   same-origin redirects itself, and the token endpoint) a redirect is returned as it is, so a
//!   token request with its client secret or code verifier is never re-sent to another URL;
//! - uses **no proxy** from the environment, bounds each request by a timeout, and reads at most
//!   [`MAX_OAUTH_RESPONSE_BYTES`] of a response (an error naming the limit past that, never a
//!   truncated body).
//!
//! rmcp in turn refuses metadata URLs whose host is a private or loopback literal or a cloud
//! metadata name (unless the resource itself is on loopback), checks the authorization
//! server's `iss` (RFC 9207) and the resource in protected resource metadata (RFC 8707), and
//! sends tokens only to the resource they were issued for. Tokens and secrets never appear in
//! what this module logs or returns: errors name URLs without their query strings.

mod flows;
mod login;
mod transport;

pub use flows::{ClientIdentity, SignInError, challenge, client_credentials, restore, sign_in};
pub use login::{LOGIN_WAIT, login};
pub use transport::{
    GuardedOAuthHttp, MAX_OAUTH_REQUEST_TIME, MAX_OAUTH_RESPONSE_BYTES, OAuthHttpError,
};
