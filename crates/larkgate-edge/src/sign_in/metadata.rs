//! How a client finds where to sign in: OAuth 2.0 Protected Resource Metadata (RFC 9728) and
//! the `WWW-Authenticate` challenge of a refused request (RFC 6750 §3, RFC 9728 §5.1).
//!
//! The MCP authorization specification (2025-11-25): "MCP servers MUST implement the OAuth 2.0
//! Protected Resource Metadata specification to indicate the locations of authorization
//! servers", and "MCP servers MUST use the HTTP header `WWW-Authenticate` when returning a
//! 401 Unauthorized to indicate the location of the resource server metadata URL". A client
//! that gets no `resource_metadata` tries the well-known URIs: the one with the resource's
//! path inserted (`/.well-known/oauth-protected-resource/mcp`) and then the root's; both are
//! served. The document names nothing secret, so any page may read it (CORS `*`).
//!
//! Each virtual server (`/mcp/NAME`) is a protected resource of its own, as RFC 9728 §3.3 asks
//! of a client that connects to it: its document, at the path with `/mcp/NAME` inserted, names
//! `/mcp/NAME` as the resource, and a refusal at `/mcp/NAME` points there. A token for it (its
//! `aud` the server's URL) is accepted there and nowhere else; a token for `/mcp` is accepted
//! at every server, which is no wider than the principal's own roles.

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::SignIn;

/// The well-known path's prefix (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document for `sign_in`'s resource (`/mcp`), or, with `server`, for that
/// virtual server's (`/mcp/NAME`): a protected resource of its own, whose tokens may name it
/// as their audience ([`SignIn::verify`]).
pub fn document(sign_in: &SignIn, server: Option<&str>) -> serde_json::Value {
    let resource = match server {
        Some(name) => server_resource(sign_in.resource(), name),
        None => sign_in.resource().to_owned(),
    };
    let mut document = serde_json::json!({
        "resource": resource,
        "authorization_servers": sign_in.issuers().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "resource_name": "larkgate",
    });
    let scopes = sign_in.scopes();
    if !scopes.is_empty() {
        document["scopes_supported"] = scopes.into();
    }
    document
}

/// The resource identifier of virtual server `name` of the larkgate whose resource (`/mcp`'s
/// URL) is `resource`: its endpoint, `/mcp/NAME`.
pub fn server_resource(resource: &str, name: &str) -> String {
    format!("{}/{name}", resource.trim_end_matches('/'))
}

/// The URL of the metadata document for the resource `resource`: the well-known prefix
/// inserted between its origin and its path (RFC 9728 §3.1).
pub fn url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(parsed) => {
            let path = parsed.path().trim_end_matches('/');
            format!(
                "{}{WELL_KNOWN}{path}",
                parsed.origin().ascii_serialization()
            )
        }
        Err(_) => WELL_KNOWN.to_owned(),
    }
}

/// The paths the document is served at on this server: the root's, `/mcp`'s, and the public
/// URL's own path when a proxy serves `/mcp` under another one.
pub fn paths(resource: &str) -> Vec<String> {
    let mut paths = vec![WELL_KNOWN.to_owned(), format!("{WELL_KNOWN}/mcp")];
    if let Ok(parsed) = url::Url::parse(resource) {
        let path = parsed.path().trim_end_matches('/');
        if !path.is_empty() {
            paths.push(format!("{WELL_KNOWN}{path}"));
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// What a refusal tells the client about signing in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// No token was presented.
    Missing,
    /// A token was presented and refused (`error="invalid_token"`).
    Invalid,
    /// The token lacks scopes (`error="insufficient_scope"`).
    InsufficientScope,
}

/// The `WWW-Authenticate` value for `challenge`: the realm, the metadata's URL and, where
/// scopes are required, the scopes to ask for.
pub fn www_authenticate(
    sign_in: &SignIn,
    challenge: Challenge,
    server: Option<&str>,
) -> HeaderValue {
    let resource = match server {
        Some(name) => server_resource(sign_in.resource(), name),
        None => sign_in.resource().to_owned(),
    };
    let mut value = format!(
        "Bearer realm=\"larkgate\", resource_metadata=\"{}\"",
        url(&resource)
    );
    match challenge {
        Challenge::Missing => {}
        Challenge::Invalid => value.push_str(", error=\"invalid_token\""),
        Challenge::InsufficientScope => value.push_str(", error=\"insufficient_scope\""),
    }
    let scopes = sign_in.required_scopes();
    if !scopes.is_empty() {
        value.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
    }
    // Every part is a URL or a configured name checked when the configuration was read.
    HeaderValue::from_str(&value)
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"larkgate\""))
}

/// Serves the document (of virtual server `server`, when given): GET (and HEAD), and the
/// CORS preflight a browser client sends.
pub async fn serve(
    sign_in: std::sync::Arc<SignIn>,
    method: Method,
    server: Option<&str>,
) -> Response {
    let mut response = if method == Method::GET || method == Method::HEAD {
        (
            [(header::CONTENT_TYPE, "application/json")],
            document(&sign_in, server).to_string(),
        )
            .into_response()
    } else if method == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::METHOD_NOT_ALLOWED.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, OPTIONS"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_prefix_before_the_path() {
        assert_eq!(
            url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            url("http://127.0.0.1:8940/gw/mcp/"),
            "http://127.0.0.1:8940/.well-known/oauth-protected-resource/gw/mcp"
        );
        assert_eq!(
            paths("https://mcp.example.com/gw/mcp"),
            [
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/gw/mcp",
                "/.well-known/oauth-protected-resource/mcp",
            ]
        );
    }

    #[test]
    fn the_document_and_the_challenge_name_the_providers_and_scopes() {
        let config: super::super::SignInConfig = toml::from_str(
            "[[issuers]]\nissuer = \"https://idp.example.com\"\nrequired_scopes = [\"mcp\"]\n\
             [issuers.scope_roles]\n\"larkgate.admin\" = [\"admin\"]",
        )
        .unwrap();
        let sign_in = SignIn::new(&config, "https://mcp.example.com/mcp").unwrap();
        let document = super::document(&sign_in, None);
        assert_eq!(document["resource"], "https://mcp.example.com/mcp");
        assert_eq!(
            document["authorization_servers"],
            serde_json::json!(["https://idp.example.com"])
        );
        assert_eq!(
            document["scopes_supported"],
            serde_json::json!(["larkgate.admin", "mcp"])
        );
        assert_eq!(
            www_authenticate(&sign_in, Challenge::Invalid, None),
            "Bearer realm=\"larkgate\", resource_metadata=\"https://mcp.example.com/.well-known/\
             oauth-protected-resource/mcp\", error=\"invalid_token\", scope=\"mcp\""
        );
        assert_eq!(
            www_authenticate(&sign_in, Challenge::Missing, None),
            "Bearer realm=\"larkgate\", resource_metadata=\"https://mcp.example.com/.well-known/\
             oauth-protected-resource/mcp\", scope=\"mcp\""
        );
        // A virtual server is a resource of its own, its document where RFC 9728 puts it.
        let triage = super::document(&sign_in, Some("triage"));
        assert_eq!(triage["resource"], "https://mcp.example.com/mcp/triage");
        assert_eq!(
            triage["authorization_servers"],
            document["authorization_servers"]
        );
        assert_eq!(
            www_authenticate(&sign_in, Challenge::Missing, Some("triage")),
            "Bearer realm=\"larkgate\", resource_metadata=\"https://mcp.example.com/.well-known/\
             oauth-protected-resource/mcp/triage\", scope=\"mcp\""
        );
    }
}
