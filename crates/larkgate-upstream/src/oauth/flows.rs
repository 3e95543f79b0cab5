//! Signing in with rmcp's flows over the guarded client: the authorization code grant with a
//! person's consent, the client credentials grant for a machine account, a stored sign-in
//! restored and refreshed, and the challenge an upstream answers without a token.

use std::sync::Arc;

use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationRequest,
    ClientCredentialsConfig, OAuthClientConfig, OAuthState,
};

use super::transport::{
    GuardedOAuthHttp, MAX_OAUTH_REQUEST_TIME, OAuthHttpError, shown, unreachable,
};
use crate::credentials::SealedCredentials;
use crate::http::{HttpError, Redirects, build_client_with};

/// Why signing in failed: rmcp's error, and what larkgate's client refused on the way (a
/// private address, a redirect to another origin), which rmcp reports only as a failed step.
#[derive(Debug, thiserror::Error)]
#[error("{cause}{}", refused.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
pub struct SignInError {
    /// What rmcp said.
    #[source]
    pub cause: AuthError,
    /// What the guarded client refused last, if anything.
    pub refused: Option<String>,
}

impl SignInError {
    fn of(http: &GuardedOAuthHttp) -> impl FnOnce(AuthError) -> SignInError + '_ {
        |cause| SignInError {
            cause,
            refused: http.last_refusal(),
        }
    }
}

/// Who larkgate is to an upstream's authorization server.
#[derive(Clone)]
pub enum ClientIdentity {
    /// A client the operator registered with the authorization server beforehand.
    Registered {
        /// Its client ID.
        client_id: String,
        /// Its secret, for a confidential client.
        client_secret: Option<String>,
    },
    /// A client ID metadata document where the server accepts one (SEP-991), else dynamic
    /// client registration (RFC 7591) under `client_name`.
    Dynamic {
        /// The name registered.
        client_name: String,
        /// The HTTPS URL of larkgate's client ID metadata document, when it publishes one.
        metadata_url: Option<String>,
    },
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientIdentity::Registered { client_id, .. } => f
                .debug_struct("Registered")
                .field("client_id", client_id)
                .finish_non_exhaustive(),
            ClientIdentity::Dynamic {
                client_name,
                metadata_url,
            } => f
                .debug_struct("Dynamic")
                .field("client_name", client_name)
                .field("metadata_url", metadata_url)
                .finish(),
        }
    }
}

/// Signs in to the upstream at `url` with the authorization code flow: discovery (seeded by
/// `challenge`, a 401's `WWW-Authenticate`, when there is one), registration as `identity`,
/// PKCE, then `consent` — given the authorization URL, it returns the URL the person's browser
/// was sent back to (`redirect_uri` with `code`, `state` and, from servers that send it, `iss`)
/// — and the code exchange, which checks `state` and `iss` (RFC 9207). `scopes` empty: the
/// scopes the server asks for (its challenge, then its metadata), or none.
#[allow(clippy::too_many_arguments)]
pub async fn sign_in<F, Fut>(
    http: GuardedOAuthHttp,
    credentials: Option<SealedCredentials>,
    url: &str,
    redirect_uri: &str,
    identity: &ClientIdentity,
    scopes: &[String],
    challenge: Option<&str>,
    consent: F,
) -> Result<AuthorizationManager, SignInError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, AuthError>>,
{
    let watch = http.clone();
    // Every failure below is an `AuthError`; the guard watching the transport tells which
    // were its refusals (a private address, an oversized answer).
    let signed_in = async move {
        let mut state = unauthorized(http, credentials, url).await?;
        let mut request = AuthorizationRequest::new(redirect_uri);
        if !scopes.is_empty() {
            request = request.with_scopes(scopes.iter().cloned());
        }
        request = match identity {
            ClientIdentity::Registered {
                client_id,
                client_secret: None,
            } => request.with_preregistered_client(client_id.clone()),
            ClientIdentity::Registered {
                client_id,
                client_secret: Some(secret),
            } => request
                .with_preregistered_client(client_id.clone())
                .with_client_secret(secret.clone()),
            ClientIdentity::Dynamic {
                client_name,
                metadata_url: None,
            } => request.with_client_name(client_name.clone()),
            ClientIdentity::Dynamic {
                client_name,
                metadata_url: Some(document),
            } => request
                .with_client_name(client_name.clone())
                .with_client_metadata_url(document.clone()),
        };
        if let Some(challenge) = challenge {
            request = request.with_challenge(challenge);
        }
        state.start_authorization(request).await?;
        let authorization_url = state.get_authorization_url().await?;
        let returned = consent(authorization_url).await?;
        let callback = AuthorizationCallback::from_redirect_url(&returned)?;
        state
            .handle_callback_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await?;
        state.into_authorization_manager().ok_or_else(|| {
            AuthError::InternalError("the sign-in did not end authorized".to_owned())
        })
    };
    signed_in.await.map_err(SignInError::of(&watch))
}

/// Signs in a machine account to the upstream at `url` with the client credentials grant
/// (SEP-1046): the secret goes only to the token endpoint the server's metadata names, with the
/// upstream as the token's `resource`.
pub async fn client_credentials(
    http: GuardedOAuthHttp,
    credentials: Option<SealedCredentials>,
    url: &str,
    client_id: &str,
    client_secret: &str,
    scopes: &[String],
) -> Result<AuthorizationManager, SignInError> {
    let watch = http.clone();
    let granted = async move {
        let mut state = unauthorized(http, credentials, url).await?;
        let config = ClientCredentialsConfig::ClientSecret {
            client_id: client_id.to_owned(),
            client_secret: client_secret.to_owned(),
            scopes: scopes.to_vec(),
            resource: Some(url.to_owned()),
        };
        state.authenticate_client_credentials(config).await?;
        state.into_authorization_manager().ok_or_else(|| {
            AuthError::InternalError(
                "the client credentials grant did not end authorized".to_owned(),
            )
        })
    };
    granted.await.map_err(SignInError::of(&watch))
}

/// rmcp's state machine for `url`, keeping what it obtains in `credentials` when given.
async fn unauthorized(
    http: GuardedOAuthHttp,
    credentials: Option<SealedCredentials>,
    url: &str,
) -> Result<OAuthState, AuthError> {
    let mut manager = AuthorizationManager::new_with_oauth_http_client(url, Arc::new(http)).await?;
    if let Some(credentials) = credentials {
        manager.set_credential_store(credentials);
    }
    Ok(OAuthState::Unauthorized(manager))
}

/// The authorization manager for `url` from the credentials an earlier sign-in stored, without
/// asking anyone; `None` when nothing is stored (or the upstream's authorization server changed
/// since, which forgets the tokens). Its tokens are refreshed before they expire and once on a
/// 401, and every refresh is stored sealed again. A `confidential` client (a registered client
/// ID and its secret, which the store never holds) authenticates its refreshes with them.
pub async fn restore(
    http: GuardedOAuthHttp,
    credentials: SealedCredentials,
    url: &str,
    confidential: Option<(&str, &str)>,
) -> Result<Option<AuthorizationManager>, SignInError> {
    let watch = http.clone();
    let restored = async {
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(url, Arc::new(http)).await?;
        manager.set_credential_store(credentials);
        if !manager.initialize_from_store().await? {
            return Ok(None);
        }
        if let Some((client_id, secret)) = confidential {
            // The redirect URI plays no part in a refresh.
            let client = OAuthClientConfig::new(client_id, "http://127.0.0.1/callback")
                .with_client_secret(secret);
            manager.configure_client(client)?;
        }
        Ok(Some(manager))
    };
    restored.await.map_err(SignInError::of(&watch))
}

/// Asks the upstream at `url` for its challenge: an MCP `initialize` without credentials,
/// through the guard. A server that wants OAuth answers 401 (or 403) with `WWW-Authenticate`,
/// naming its protected resource metadata and the scopes it wants; that answer seeds
/// [`sign_in`]'s discovery. `None`: the server asked for nothing (or sent no challenge), and
/// discovery probes the well-known locations.
pub async fn challenge(
    http: &GuardedOAuthHttp,
    url: &str,
) -> Result<Option<String>, OAuthHttpError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| OAuthHttpError::Request(e.to_string()))?;
    let shown_url = shown(&parsed);
    let failed = |source: HttpError| OAuthHttpError::Http {
        url: shown_url.clone(),
        source,
    };
    let client = build_client_with(
        Arc::clone(&http.guard),
        Arc::clone(&http.resolver),
        &parsed,
        http.connect_timeout,
        Redirects::None,
    )
    .map_err(failed)?;
    let initialize = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "larkgate", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let sent = client
        .post(parsed)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(initialize.to_string())
        .send();
    let response = tokio::time::timeout(MAX_OAUTH_REQUEST_TIME, sent)
        .await
        .map_err(|_| OAuthHttpError::Timeout {
            url: shown_url.clone(),
            after: MAX_OAUTH_REQUEST_TIME,
        })?
        .map_err(|e| unreachable(&shown_url, e))?;
    let status = response.status();
    if status != reqwest::StatusCode::UNAUTHORIZED && status != reqwest::StatusCode::FORBIDDEN {
        return Ok(None);
    }
    Ok(response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned))
}
