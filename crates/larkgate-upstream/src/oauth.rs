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

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationRequest,
    ClientCredentialsConfig, OAuthClientConfig, OAuthHttpClient, OAuthHttpClientError,
    OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest, OAuthState,
};

use crate::credentials::SealedCredentials;
use crate::guard::{Resolve, UrlGuard};
use crate::http::{HttpError, Redirects, build_client_with};

/// The most bytes read of one OAuth response (metadata documents and token responses are small).
pub const MAX_OAUTH_RESPONSE_BYTES: usize = 1024 * 1024;

/// The longest one OAuth request may take, whatever rmcp suggests.
pub const MAX_OAUTH_REQUEST_TIME: Duration = Duration::from_secs(30);

/// Why an OAuth request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthHttpError {
    /// The guard refused the target, or the exchange failed.
    #[error("{url}: {source}")]
    Http {
        /// The URL, without its query.
        url: String,
        /// What went wrong.
        source: HttpError,
    },
    /// The response was over [`MAX_OAUTH_RESPONSE_BYTES`].
    #[error("{url}: the response exceeded {MAX_OAUTH_RESPONSE_BYTES} bytes")]
    TooLarge {
        /// The URL, without its query.
        url: String,
    },
    /// No answer in time.
    #[error("{url}: no answer within {after:?}")]
    Timeout {
        /// The URL, without its query.
        url: String,
        /// The time allowed.
        after: Duration,
    },
    /// The server could not be reached, in plain words (refused, not resolved, TLS, ...).
    #[error("{url}: {cause}")]
    Unreachable {
        /// The URL, without its query.
        url: String,
        /// Why, as [`crate::client::plain_cause`] says it.
        cause: String,
    },
    /// rmcp handed over a request that is not one (no absolute URL).
    #[error("an OAuth request could not be built: {0}")]
    Request(String),
}

/// The HTTP client of every OAuth request of one upstream: its URL guard, its resolver, no
/// proxies, redirects only within a request's origin and only when asked for, bounded time and
/// bytes. See the module documentation.
#[derive(Clone)]
pub struct GuardedOAuthHttp {
    guard: Arc<UrlGuard>,
    resolver: Arc<dyn Resolve>,
    connect_timeout: Duration,
    /// What this client last refused, in plain words: rmcp folds a failed discovery request
    /// into "discovery failed", and the person signing in needs to know why (shared by clones).
    refused: Arc<std::sync::Mutex<Option<String>>>,
}

impl std::fmt::Debug for GuardedOAuthHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedOAuthHttp")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl GuardedOAuthHttp {
    /// A client that reaches only what `guard` admits, resolving through `resolver`.
    pub fn new(
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        connect_timeout: Duration,
    ) -> Self {
        GuardedOAuthHttp {
            guard,
            resolver,
            connect_timeout,
            refused: Arc::default(),
        }
    }

    /// What this client (or a clone of it) last refused to do, in plain words.
    pub fn last_refusal(&self) -> Option<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn note_refusal(&self, what: String) {
        tracing::warn!(refused = %what, "an OAuth request of an upstream was refused");
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(what);
        }
    }

    /// An rmcp authorization manager for the MCP endpoint at `url` whose every OAuth request
    /// goes through this client.
    pub async fn manager(self, url: &str) -> Result<AuthorizationManager, AuthError> {
        AuthorizationManager::new_with_oauth_http_client(url, Arc::new(self)).await
    }

    async fn send(
        &self,
        request: OAuthHttpRequest,
    ) -> Result<http::Response<Vec<u8>>, OAuthHttpError> {
        let OAuthHttpRequest {
            request,
            redirect_policy,
            timeout,
            ..
        } = request;
        let redirects = match redirect_policy {
            OAuthHttpRedirectPolicy::Follow => Redirects::SameOrigin,
            _ => Redirects::None,
        };
        let request = reqwest::Request::try_from(request)
            .map_err(|e| OAuthHttpError::Request(e.to_string()))?;
        let url = shown(request.url());
        let failed = |source: HttpError| OAuthHttpError::Http {
            url: url.clone(),
            source,
        };
        // A client per request: its resolver vets answers for this request's port (larkgate's
        // own address is refused on any origin), and OAuth requests are few.
        let client = build_client_with(
            Arc::clone(&self.guard),
            Arc::clone(&self.resolver),
            request.url(),
            self.connect_timeout,
            redirects,
        )
        .map_err(|e| {
            self.note_refusal(format!("{url}: {e}"));
            failed(e)
        })?;
        let origin = request.url().origin();
        let after = timeout.map_or(MAX_OAUTH_REQUEST_TIME, |t| t.min(MAX_OAUTH_REQUEST_TIME));
        let exchange = async {
            let response = client.execute(request).await.map_err(|e| {
                let error = unreachable(&url, e);
                if let OAuthHttpError::Unreachable { .. } = error {
                    self.note_refusal(error.to_string());
                }
                error
            })?;
            if response.status().is_redirection()
                && let Some(to) = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| response.url().join(l).ok())
                && to.origin() != origin
            {
                self.note_refusal(format!(
                    "{url} redirected to another origin ({}), which larkgate does not follow \
                     for OAuth",
                    to.origin().ascii_serialization()
                ));
            }
            let mut answer = http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let mut body = Vec::new();
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| failed(HttpError::Http(e.without_url())))?;
                if chunk.len() > MAX_OAUTH_RESPONSE_BYTES - body.len() {
                    return Err(OAuthHttpError::TooLarge { url: url.clone() });
                }
                body.extend_from_slice(&chunk);
            }
            answer
                .body(body)
                .map_err(|e| OAuthHttpError::Request(e.to_string()))
        };
        tokio::time::timeout(after, exchange)
            .await
            .map_err(|_| OAuthHttpError::Timeout {
                url: url.clone(),
                after,
            })?
    }
}

impl OAuthHttpClient for GuardedOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            self.send(request).await.map_err(|error| {
                tracing::debug!(%error, "an OAuth request of an upstream failed");
                Box::new(error) as OAuthHttpClientError
            })
        })
    }
}

/// A failed exchange with `url`, in plain words where they can be found.
fn unreachable(url: &str, error: reqwest::Error) -> OAuthHttpError {
    match crate::client::plain_cause(&error) {
        Some(cause) => OAuthHttpError::Unreachable {
            url: url.to_owned(),
            cause,
        },
        None => OAuthHttpError::Http {
            url: url.to_owned(),
            source: HttpError::Http(error.without_url()),
        },
    }
}

/// A URL as errors show it: without its query and fragment (authorization codes, states).
fn shown(url: &reqwest::Url) -> String {
    let mut clean = url.clone();
    clean.set_query(None);
    clean.set_fragment(None);
    clean.to_string()
}

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
    authorization_code(
        http,
        credentials,
        url,
        redirect_uri,
        identity,
        scopes,
        challenge,
        consent,
    )
    .await
    .map_err(SignInError::of(&watch))
}

#[allow(clippy::too_many_arguments)]
async fn authorization_code<F, Fut>(
    http: GuardedOAuthHttp,
    credentials: Option<SealedCredentials>,
    url: &str,
    redirect_uri: &str,
    identity: &ClientIdentity,
    scopes: &[String],
    challenge: Option<&str>,
    consent: F,
) -> Result<AuthorizationManager, AuthError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, AuthError>>,
{
    let mut state = unauthorized(http, credentials, url).await?;
    let mut request = AuthorizationRequest::new(redirect_uri);
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.iter().cloned());
    }
    request = match identity {
        ClientIdentity::Registered {
            client_id,
            client_secret,
        } => {
            let request = request.with_preregistered_client(client_id.clone());
            match client_secret {
                Some(secret) => request.with_client_secret(secret.clone()),
                None => request,
            }
        }
        ClientIdentity::Dynamic {
            client_name,
            metadata_url,
        } => {
            let request = request.with_client_name(client_name.clone());
            match metadata_url {
                Some(document) => request.with_client_metadata_url(document.clone()),
                None => request,
            }
        }
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
    state
        .into_authorization_manager()
        .ok_or_else(|| AuthError::InternalError("the sign-in did not end authorized".to_owned()))
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
    client_credentials_grant(http, credentials, url, client_id, client_secret, scopes)
        .await
        .map_err(SignInError::of(&watch))
}

async fn client_credentials_grant(
    http: GuardedOAuthHttp,
    credentials: Option<SealedCredentials>,
    url: &str,
    client_id: &str,
    client_secret: &str,
    scopes: &[String],
) -> Result<AuthorizationManager, AuthError> {
    let mut state = unauthorized(http, credentials, url).await?;
    let config = ClientCredentialsConfig::ClientSecret {
        client_id: client_id.to_owned(),
        client_secret: client_secret.to_owned(),
        scopes: scopes.to_vec(),
        resource: Some(url.to_owned()),
    };
    state.authenticate_client_credentials(config).await?;
    state.into_authorization_manager().ok_or_else(|| {
        AuthError::InternalError("the client credentials grant did not end authorized".to_owned())
    })
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

/// The longest a sign-in waits for the person at the browser.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// The most bytes read of the browser's request to the loopback redirect URI.
const MAX_CALLBACK_REQUEST: usize = 16 * 1024;

/// Signs a person in to OAuth upstream `config` and stores the tokens in `store`, sealed with
/// `key`: `larkgate upstream login`. The redirect URI is a loopback port of this process
/// (`http://127.0.0.1:PORT/callback`, RFC 8252); `show` is given the authorization URL to
/// open in a browser, and the first request to `/callback` within [`LOGIN_WAIT`] completes the
/// sign-in (its `state` and `iss` are checked by the code exchange).
pub async fn login(
    config: &crate::config::UpstreamConfig,
    listen: Option<std::net::SocketAddr>,
    resolver: Arc<dyn Resolve>,
    store: &Arc<dyn larkgate_store::Store>,
    key: Result<Arc<crate::credentials::CredentialKey>, crate::credentials::CredentialError>,
    show: impl FnOnce(&str),
) -> Result<(), String> {
    let Some(oauth) = &config.oauth else {
        return Err(format!(
            "upstream {:?} does not use OAuth: give it an [upstreams.oauth] table",
            config.alias
        ));
    };
    if oauth.grant == crate::config::Grant::ClientCredentials {
        return Err(format!(
            "upstream {:?} signs in as a machine account (grant = \"client_credentials\"): \
             larkgate asks for its tokens by itself, nobody logs in",
            config.alias
        ));
    }
    let url = config.url.clone().unwrap_or_default();
    let credentials = config.sealed_credentials(store, key)?;
    let guard = Arc::new(config.guard(listen)?);
    let http = config.oauth_http(guard, resolver);
    let receiver = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| format!("no loopback port for the redirect: {e}"))?;
    let port = receiver
        .local_addr()
        .map_err(|e| format!("no loopback port for the redirect: {e}"))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let identity = match &oauth.client_id {
        Some(client_id) => ClientIdentity::Registered {
            client_id: client_id.clone(),
            client_secret: config.client_secret(|name| std::env::var(name).ok())?,
        },
        None => ClientIdentity::Dynamic {
            client_name: "larkgate".to_owned(),
            metadata_url: oauth.client_metadata_url.clone(),
        },
    };
    let challenge = challenge(&http, &url).await.map_err(|e| e.to_string())?;
    let consent = |authorization_url: String| async move {
        show(&authorization_url);
        tokio::time::timeout(LOGIN_WAIT, callback(&receiver, port))
            .await
            .map_err(|_| {
                AuthError::AuthorizationFailed(format!(
                    "nobody completed the sign-in within {} seconds",
                    LOGIN_WAIT.as_secs()
                ))
            })?
    };
    sign_in(
        http,
        Some(credentials),
        &url,
        &redirect_uri,
        &identity,
        &oauth.scopes,
        challenge.as_deref(),
        consent,
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("signing in to {:?} failed: {e}", config.alias))
}

/// Waits for the browser's request to `/callback` on `receiver` and answers it; returns the
/// URL it asked for. Other requests (a browser's `favicon.ico`) are answered 404 and waited past;
/// a request over [`MAX_CALLBACK_REQUEST`] bytes or without a request line is dropped.
async fn callback(receiver: &tokio::net::TcpListener, port: u16) -> Result<String, AuthError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let (mut stream, _) = receiver
            .accept()
            .await
            .map_err(|e| AuthError::AuthorizationFailed(e.to_string()))?;
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        let head_read = tokio::time::timeout(Duration::from_secs(10), async {
            while !request.windows(4).any(|w| w == b"\r\n\r\n")
                && request.len() < MAX_CALLBACK_REQUEST
            {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
        })
        .await;
        if head_read.is_err() {
            continue;
        }
        let head = String::from_utf8_lossy(&request);
        let target = head
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        if !target.starts_with("/callback?") {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let page = "larkgate: the sign-in reached larkgate; you may close this page.\n";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        return Ok(format!("http://127.0.0.1:{port}{target}"));
    }
}
