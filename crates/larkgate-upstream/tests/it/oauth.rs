//! Signing in to an OAuth-protected upstream against hostile authorization servers: each one is
//! refused with a cause that says what was wrong, and no request goes where it should not.
//!
//! The peer is a small authorization server and protected resource on `127.0.0.1:0` that can
//! misbehave in one way at a time ([`Fault`]); the sign-in is larkgate's own
//! ([`larkgate_upstream::oauth::sign_in`]), its requests through the URL guard.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use larkgate_store::Store;
use larkgate_upstream::config::UpstreamConfig;
use larkgate_upstream::credentials::{CredentialKey, SealedCredentials};
use larkgate_upstream::oauth::{self, ClientIdentity, GuardedOAuthHttp};
use larkgate_upstream::{Allowed, Resolve, SystemResolver, UrlGuard};
use rmcp::transport::auth::{AuthError, CredentialStore};

/// The one way the peer misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// The token endpoint answers with an `access_token` that is not a string.
    MalformedToken,
    /// The authorization response names another issuer (RFC 9207).
    WrongIssuer,
    /// The protected resource metadata redirects to another origin.
    RedirectElsewhere,
    /// The protected resource names an authorization server whose name resolves to a private
    /// address.
    PrivateServer,
    /// Tokens live an hour and come with a refresh token (not a fault). A test spends the
    /// hour with [`age_sign_in`], not by waiting.
    Refreshable,
    /// As `Refreshable`, but the refresh token is refused (`invalid_grant`).
    RefreshRefused,
    /// As `Refreshable`, for a confidential client: a refresh without its secret (HTTP Basic,
    /// `registered:s3cret`) is refused (`invalid_client`).
    Confidential,
}

#[derive(Clone)]
struct Peer {
    base: String,
    fault: Fault,
    elsewhere: String,
    tokens_issued: Arc<AtomicUsize>,
    /// The MCP server behind the resource's bearer check, when it serves one.
    upstream: Option<String>,
    /// Requests the resource let through (with the token it issued).
    admitted: Arc<AtomicUsize>,
    /// The `grant_type` of every token request, in order.
    grants: Arc<std::sync::Mutex<Vec<String>>>,
    /// The `client_id` of every authorization request, in order.
    clients: Arc<std::sync::Mutex<Vec<String>>>,
    /// Dynamic client registrations made.
    registrations: Arc<AtomicUsize>,
}

/// A resolver that knows one name, `internal.corp`, at a private address.
struct Internal;

impl Resolve for Internal {
    fn lookup(
        &self,
        host: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>,
    > {
        let answer = if host == "internal.corp" {
            Ok(vec!["10.0.0.7".parse().unwrap()])
        } else {
            Err(std::io::Error::other("unknown name"))
        };
        Box::pin(async move { answer })
    }
}

async fn listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Another origin that counts the requests it gets.
async fn elsewhere() -> (String, Arc<AtomicUsize>) {
    let (listener, addr) = listener().await;
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { (StatusCode::OK, "{}") }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), hits)
}

async fn peer(fault: Fault, elsewhere: &str) -> Peer {
    serve_peer(fault, elsewhere, None).await
}

/// A peer whose resource at `/mcp` is the MCP server at `upstream`, for bearers of its token.
async fn serve_peer(fault: Fault, elsewhere: &str, upstream: Option<String>) -> Peer {
    let (listener, addr) = listener().await;
    let peer = Peer {
        base: format!("http://{addr}"),
        fault,
        elsewhere: elsewhere.to_owned(),
        tokens_issued: Arc::default(),
        upstream,
        admitted: Arc::default(),
        grants: Arc::default(),
        clients: Arc::default(),
        registrations: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/mcp", axum::routing::any(resource_server))
        .route("/.well-known/oauth-protected-resource/mcp", get(resource))
        .route("/.well-known/oauth-authorization-server", get(server))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(peer.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    peer
}

async fn challenge(State(peer): State<Peer>) -> Response {
    let value = format!(
        "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        peer.base
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, value)],
    )
        .into_response()
}

/// The protected resource: the challenge without the token, else the MCP server behind it.
async fn resource_server(
    State(peer): State<Peer>,
    method: axum::http::Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(upstream) = peer.upstream.clone() else {
        return challenge(State(peer)).await;
    };
    if bearer != Some("Bearer the-access-token") {
        return challenge(State(peer)).await;
    }
    peer.admitted.fetch_add(1, Ordering::SeqCst);
    let mut forwarded = reqwest::Client::new().request(method, upstream).body(body);
    // Everything the MCP transport sends but the credential, which is this resource's alone.
    for (name, value) in &headers {
        let name = name.as_str();
        if name.starts_with("mcp-") || ["content-type", "accept", "last-event-id"].contains(&name) {
            forwarded = forwarded.header(name, value);
        }
    }
    let answer = forwarded.send().await.unwrap();
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name.as_str().starts_with("mcp-") || name == "content-type" {
            response = response.header(name, value);
        }
    }
    response
        .body(axum::body::Body::from(answer.bytes().await.unwrap()))
        .unwrap()
}

async fn resource(State(peer): State<Peer>) -> Response {
    if peer.fault == Fault::RedirectElsewhere {
        let to = format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            peer.elsewhere
        );
        return (StatusCode::FOUND, [(header::LOCATION, to)]).into_response();
    }
    let server = match peer.fault {
        Fault::PrivateServer => format!(
            "http://internal.corp:{}",
            peer.base.rsplit(':').next().unwrap()
        ),
        _ => peer.base.clone(),
    };
    axum::Json(serde_json::json!({
        "resource": format!("{}/mcp", peer.base),
        "authorization_servers": [server],
    }))
    .into_response()
}

async fn server(State(peer): State<Peer>) -> Response {
    axum::Json(serde_json::json!({
        "issuer": peer.base,
        "authorization_endpoint": format!("{}/authorize", peer.base),
        "token_endpoint": format!("{}/token", peer.base),
        "registration_endpoint": format!("{}/register", peer.base),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": true,
    }))
    .into_response()
}

async fn register(State(peer): State<Peer>, body: String) -> Response {
    peer.registrations.fetch_add(1, Ordering::SeqCst);
    let asked: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let mut answer = serde_json::json!({"client_id": "larkgate-test-client"});
    answer["redirect_uris"] = asked["redirect_uris"].clone();
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

async fn authorize(
    State(peer): State<Peer>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let issuer = match peer.fault {
        Fault::WrongIssuer => "https://issuer.example".to_owned(),
        _ => peer.base.clone(),
    };
    peer.clients
        .lock()
        .unwrap()
        .push(query.get("client_id").cloned().unwrap_or_default());
    let mut back = reqwest::Url::parse(&query["redirect_uri"]).unwrap();
    back.query_pairs_mut()
        .append_pair("code", "the-code")
        .append_pair("state", &query["state"])
        .append_pair("iss", &issuer);
    (StatusCode::FOUND, [(header::LOCATION, back.to_string())]).into_response()
}

async fn token(State(peer): State<Peer>, headers: HeaderMap, form: String) -> Response {
    peer.tokens_issued.fetch_add(1, Ordering::SeqCst);
    let grant = url::form_urlencoded::parse(form.as_bytes())
        .find(|(name, _)| name == "grant_type")
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // base64("registered:s3cret")
    if peer.fault == Fault::Confidential && basic != "Basic cmVnaXN0ZXJlZDpzM2NyZXQ=" {
        peer.grants
            .lock()
            .unwrap()
            .push(format!("{grant} without the secret"));
        let refused = serde_json::json!({"error": "invalid_client"});
        return (StatusCode::UNAUTHORIZED, axum::Json(refused)).into_response();
    }
    if peer.fault == Fault::RefreshRefused && grant == "refresh_token" {
        peer.grants.lock().unwrap().push(grant);
        let refused = serde_json::json!({"error": "invalid_grant"});
        return (StatusCode::BAD_REQUEST, axum::Json(refused)).into_response();
    }
    peer.grants.lock().unwrap().push(grant);
    let body = match peer.fault {
        Fault::MalformedToken => serde_json::json!({"access_token": 5, "token_type": "Bearer"}),
        Fault::Refreshable | Fault::RefreshRefused | Fault::Confidential => serde_json::json!({
            "access_token": "the-access-token",
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFE_SECS,
            "refresh_token": "the-refresh-token",
        }),
        _ => serde_json::json!({
            "access_token": "the-access-token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }),
    };
    axum::Json(body).into_response()
}

/// How long the peer's refreshable tokens live.
const TOKEN_LIFE_SECS: u64 = 3600;

/// Moves upstream `vault`'s stored sign-in a token's life into the past, as if it had been
/// made an hour ago: its token is then due for refresh at the next use (rmcp decides that from
/// the stored time of receipt), without a test waiting for the hour. Returns the time of
/// receipt it stored.
async fn age_sign_in(store: &Arc<dyn Store>) -> u64 {
    let key = Arc::new(CredentialKey::from_base64(KEY).unwrap());
    let stored = SealedCredentials::new(Arc::clone(store), "vault", key);
    let mut credentials = stored.load().await.unwrap().expect("a stored sign-in");
    let received = credentials
        .token_received_at
        .expect("rmcp records when a token was received");
    credentials.token_received_at = Some(received - TOKEN_LIFE_SECS);
    stored.save(credentials).await.unwrap();
    received - TOKEN_LIFE_SECS
}

/// The test's browser: follows nothing, returns where the authorization endpoint redirects.
async fn browser(url: String) -> Result<String, AuthError> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client.get(url).send().await.unwrap();
    Ok(response.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned())
}

/// Signs in to `peer` as larkgate does: the guard admits 127.0.0.1 only.
async fn sign_in_to(peer: &Peer) -> Result<(), String> {
    sign_in_keeping(peer, None).await
}

/// The client larkgate signs in to `peer` with.
fn guarded(peer: &Peer) -> GuardedOAuthHttp {
    let guard = Arc::new(UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]));
    let resolver: Arc<dyn Resolve> = if peer.fault == Fault::PrivateServer {
        Arc::new(Internal)
    } else {
        Arc::new(SystemResolver)
    };
    GuardedOAuthHttp::new(guard, resolver, std::time::Duration::from_secs(5))
}

/// Signs in to `peer`, keeping the credentials in `credentials` when given.
async fn sign_in_keeping(
    peer: &Peer,
    credentials: Option<SealedCredentials>,
) -> Result<(), String> {
    let http = guarded(peer);
    let url = format!("{}/mcp", peer.base);
    let challenge = oauth::challenge(&http, &url)
        .await
        .map_err(|e| e.to_string())?;
    assert!(
        challenge.is_some(),
        "the resource's 401 carries its challenge"
    );
    let identity = ClientIdentity::Dynamic {
        client_name: "larkgate".into(),
        metadata_url: None,
    };
    oauth::sign_in(
        http,
        credentials,
        &url,
        "http://127.0.0.1:1/callback",
        &identity,
        &[],
        challenge.as_deref(),
        browser,
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_well_behaved_server_signs_in() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::None, &other).await;
    sign_in_to(&peer).await.unwrap();
    assert_eq!(peer.tokens_issued.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_is_not_a_string_is_refused() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::MalformedToken, &other).await;
    let error = sign_in_to(&peer).await.unwrap_err();
    assert_eq!(peer.tokens_issued.load(Ordering::SeqCst), 1);
    assert!(
        error.contains("token exchange failed") && error.contains("expected a string"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_response_from_another_issuer_is_refused_before_the_code_is_sent() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::WrongIssuer, &other).await;
    let error = sign_in_to(&peer).await.unwrap_err();
    assert!(
        error.contains("issuer mismatch") && error.contains("https://issuer.example"),
        "{error}"
    );
    assert_eq!(
        peer.tokens_issued.load(Ordering::SeqCst),
        0,
        "the code went to the token endpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_redirected_to_another_origin_is_not_followed() {
    let (other, hits) = elsewhere().await;
    let peer = peer(Fault::RedirectElsewhere, &other).await;
    let error = sign_in_to(&peer).await.unwrap_err();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a request reached the other origin"
    );
    assert!(
        error.contains(&format!("redirected to another origin ({other})")),
        "{error}"
    );
    assert_eq!(peer.tokens_issued.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_server_on_a_private_address_is_refused_by_the_guard() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::PrivateServer, &other).await;
    let error = sign_in_to(&peer).await.unwrap_err();
    assert_eq!(peer.tokens_issued.load(Ordering::SeqCst), 0);
    assert!(
        error.contains("internal.corp resolves to 10.0.0.7, which is not a public address"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_stored_sealed_and_a_later_start_uses_them_without_signing_in() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::None, &other).await;
    let dir = tempfile::tempdir().unwrap();
    let key = || Arc::new(CredentialKey::from_base64(KEY).unwrap());
    {
        let store: Arc<dyn Store> =
            Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
        let credentials = SealedCredentials::new(Arc::clone(&store), "vault", key());
        sign_in_keeping(&peer, Some(credentials)).await.unwrap();
        let sealed = store.upstream_credentials("vault").await.unwrap().unwrap();
        assert!(
            !sealed.windows(16).any(|w| w == b"the-access-token"),
            "the token is stored in the clear"
        );
    }
    // Another process on the same data directory, as `larkgate serve` after `upstream login`.
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let url = format!("{}/mcp", peer.base);
    let restored = oauth::restore(
        guarded(&peer),
        SealedCredentials::new(Arc::clone(&store), "vault", key()),
        &url,
        None,
    )
    .await
    .unwrap()
    .expect("the stored sign-in is found");
    assert_eq!(
        restored.get_access_token().await.unwrap(),
        "the-access-token"
    );
    assert_eq!(
        peer.tokens_issued.load(Ordering::SeqCst),
        1,
        "no second sign-in"
    );

    // Under another key the record does not open, and the cause says what to do.
    let other_key = Arc::new(CredentialKey::from_base64(OTHER_KEY).unwrap());
    let error = oauth::restore(
        guarded(&peer),
        SealedCredentials::new(Arc::clone(&store), "vault", other_key),
        &url,
        None,
    )
    .await
    .err()
    .expect("a record sealed under another key does not open")
    .to_string();
    assert!(
        error.contains("cannot be opened with this credential key")
            && error.contains("larkgate upstream login vault"),
        "{error}"
    );
    // Another upstream's row holds nothing of this one's.
    let elsewhere_row = oauth::restore(
        guarded(&peer),
        SealedCredentials::new(Arc::clone(&store), "another", key()),
        &url,
        None,
    )
    .await
    .unwrap();
    assert!(elsewhere_row.is_none());
}

const KEY: &str = "q0nE7P0m3Qx5b2l6t1QmQ2xGb0h2V0J6b3NqU1lqN2U=";
const OTHER_KEY: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// `larkgate upstream login` of `config`, with this test as the person at the browser: it opens
/// the URL it is shown and goes where the authorization server sends it (the loopback redirect
/// URI larkgate listens on), and is told it may close the page.
async fn login_as_a_person(
    config: &UpstreamConfig,
    resolver: &Arc<dyn Resolve>,
    store: &Arc<dyn Store>,
) {
    let (shown, url) = tokio::sync::oneshot::channel::<String>();
    let person = tokio::spawn(async move {
        let back = browser(url.await.unwrap()).await.unwrap();
        assert!(back.starts_with("http://127.0.0.1:"), "{back}");
        reqwest::get(back).await.unwrap().text().await.unwrap()
    });
    let key = Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));
    larkgate_upstream::oauth::login(config, None, Arc::clone(resolver), store, key, |at| {
        shown.send(at.to_owned()).unwrap()
    })
    .await
    .unwrap();
    let page = person.await.unwrap();
    assert!(page.contains("you may close this page"), "{page}");
}

/// The configuration of an OAuth upstream at `peer`, reachable on 127.0.0.1.
fn oauth_upstream(peer: &Peer, oauth: larkgate_upstream::config::OAuthConfig) -> UpstreamConfig {
    UpstreamConfig {
        alias: "vault".into(),
        url: Some(format!("{}/mcp", peer.base)),
        allow: vec!["127.0.0.1".into()],
        oauth: Some(oauth),
        ..UpstreamConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_upstream_says_what_it_lacks_until_login_and_is_then_reached_with_its_token() {
    let weather = crate::peer::shared_weather(&["--json"]);
    let (other, _) = elsewhere().await;
    let peer = serve_peer(Fault::None, &other, Some(weather.url.clone())).await;
    let config = oauth_upstream(&peer, Default::default());
    config.validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    let key = || Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));

    let no_key = config
        .connect_keyed(
            None,
            Arc::clone(&resolver),
            &store,
            Err(larkgate_upstream::credentials::CredentialError::NoKey),
        )
        .await
        .unwrap_err();
    assert!(no_key.contains("LARKGATE_CREDENTIAL_KEY"), "{no_key}");
    let nobody = config
        .connect_keyed(None, Arc::clone(&resolver), &store, key())
        .await
        .unwrap_err();
    assert!(nobody.contains("larkgate upstream login vault"), "{nobody}");
    assert_eq!(peer.admitted.load(Ordering::SeqCst), 0);

    login_as_a_person(&config, &resolver, &store).await;

    let client = config
        .connect_keyed(None, Arc::clone(&resolver), &store, key())
        .await
        .unwrap();
    let tools = client.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "forecast"), "{tools:?}");
    let result = client
        .call_tool(
            "forecast",
            serde_json::json!({"city": "Oslo"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(
        peer.admitted.load(Ordering::SeqCst) >= 2,
        "the calls carried the token"
    );
    assert_eq!(
        peer.tokens_issued.load(Ordering::SeqCst),
        1,
        "one sign-in, reused"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_account_signs_in_by_itself_with_the_client_credentials_grant() {
    let weather = crate::peer::shared_weather(&["--json"]);
    let (other, _) = elsewhere().await;
    let peer = serve_peer(Fault::None, &other, Some(weather.url.clone())).await;
    let machine = larkgate_upstream::config::OAuthConfig {
        grant: larkgate_upstream::config::Grant::ClientCredentials,
        client_id: Some("reports".into()),
        client_secret: Some("s3cret".into()),
        ..Default::default()
    };
    let config = oauth_upstream(&peer, machine.clone());
    config.validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let key = Arc::new(CredentialKey::from_base64(KEY).unwrap());
    let client = config
        .connect_keyed(None, Arc::new(SystemResolver), &store, Ok(key))
        .await
        .unwrap();
    assert!(
        client
            .list_tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "forecast")
    );
    assert_eq!(peer.tokens_issued.load(Ordering::SeqCst), 1);
    client.close().await;

    // Nobody logs in to a machine account, and a half-configured one says what is missing.
    let error = larkgate_upstream::oauth::login(
        &config,
        None,
        Arc::new(SystemResolver),
        &store,
        Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap())),
        |_| panic!("no URL to open"),
    )
    .await
    .unwrap_err();
    assert!(error.contains("machine account"), "{error}");
    let half = oauth_upstream(
        &peer,
        larkgate_upstream::config::OAuthConfig {
            client_secret: None,
            ..machine
        },
    );
    let refused = half.validate().unwrap_err();
    assert!(
        refused.contains("needs oauth.client_id and oauth.client_secret"),
        "{refused}"
    );
}

#[test]
fn oauth_settings_that_cannot_work_are_refused_before_connecting() {
    use larkgate_upstream::config::OAuthConfig;
    let base = UpstreamConfig {
        alias: "vault".into(),
        url: Some("https://mcp.vault.example/mcp".into()),
        oauth: Some(OAuthConfig::default()),
        ..UpstreamConfig::default()
    };
    base.validate().unwrap();
    let cases: Vec<(&str, UpstreamConfig, &str)> = vec![
        (
            "a header that would be replaced",
            UpstreamConfig {
                headers: [("authorization".to_owned(), "Bearer x".to_owned())].into(),
                ..base.clone()
            },
            "both oauth and an Authorization header",
        ),
        (
            "a secret without its client",
            UpstreamConfig {
                oauth: Some(OAuthConfig {
                    client_secret: Some("${S}".into()),
                    ..OAuthConfig::default()
                }),
                ..base.clone()
            },
            "give its oauth.client_id too",
        ),
        (
            "a scope with a space",
            UpstreamConfig {
                oauth: Some(OAuthConfig {
                    scopes: vec!["read write".into()],
                    ..OAuthConfig::default()
                }),
                ..base.clone()
            },
            "is not one OAuth scope",
        ),
        (
            "a command-launched server",
            UpstreamConfig {
                url: None,
                command: vec!["server".into()],
                ..base.clone()
            },
            "oauth is for HTTP upstreams",
        ),
    ];
    for (case, config, expected) in cases {
        let error = config.validate().unwrap_err();
        assert!(error.contains(expected), "{case}: {error}");
    }
    let document = |url: &str| UpstreamConfig {
        oauth: Some(OAuthConfig {
            client_metadata_url: Some(url.into()),
            ..OAuthConfig::default()
        }),
        ..base.clone()
    };
    document("https://larkgate.example.org/oauth/client.json")
        .validate()
        .unwrap();
    let documents = [
        ("plain http", "http://larkgate.example.org/client.json"),
        ("no path", "https://larkgate.example.org/"),
        ("a fragment", "https://larkgate.example.org/client.json#x"),
        (
            "credentials",
            "https://me:pw@larkgate.example.org/client.json",
        ),
        ("not a URL", "larkgate client"),
    ];
    for (case, url) in documents {
        let error = document(url).validate().unwrap_err();
        assert!(
            error.contains("is not the https URL of a document"),
            "{case}: {error}"
        );
        assert!(
            !error.contains(":pw"),
            "the message repeats a password: {error}"
        );
    }
    let both = UpstreamConfig {
        oauth: Some(OAuthConfig {
            client_id: Some("larkgate".into()),
            client_metadata_url: Some("https://larkgate.example.org/client.json".into()),
            ..OAuthConfig::default()
        }),
        ..base.clone()
    };
    let error = both.validate().unwrap_err();
    assert!(error.contains("not both"), "{error}");
    let unknown = toml::from_str::<UpstreamConfig>(
        "alias = \"vault\"\nurl = \"https://mcp.vault.example/mcp\"\n[oauth]\ngrant = \"password\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(unknown.contains("unknown variant `password`"), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_due_for_refresh_is_refreshed_and_the_refresh_is_stored_sealed() {
    let weather = crate::peer::shared_weather(&["--json"]);
    let (other, _) = elsewhere().await;
    let peer = serve_peer(Fault::Refreshable, &other, Some(weather.url.clone())).await;
    let config = oauth_upstream(&peer, Default::default());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    let key = || Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));
    login_as_a_person(&config, &resolver, &store).await;
    let signed_in = store.upstream_credentials("vault").await.unwrap().unwrap();

    let client = config
        .connect_keyed(None, Arc::clone(&resolver), &store, key())
        .await
        .unwrap();
    // The token's life spent while the client is connected: its next request refreshes.
    let aged = age_sign_in(&store).await;
    client.list_tools().await.unwrap();
    let grants = peer.grants.lock().unwrap().clone();
    assert_eq!(
        grants.first().map(String::as_str),
        Some("authorization_code")
    );
    assert!(
        grants.iter().any(|g| g == "refresh_token"),
        "no refresh before expiry: {grants:?}"
    );
    let refreshed = store.upstream_credentials("vault").await.unwrap().unwrap();
    assert_ne!(refreshed, signed_in, "the refreshed tokens were stored");
    let key = Arc::new(CredentialKey::from_base64(KEY).unwrap());
    let stored = SealedCredentials::new(Arc::clone(&store), "vault", key);
    let now = stored.load().await.unwrap().unwrap().token_received_at;
    assert!(
        now.unwrap() >= aged + TOKEN_LIFE_SECS,
        "the stored token is the refreshed one, received now"
    );
    assert!(
        !refreshed.windows(17).any(|w| w == b"the-refresh-token"),
        "the refresh token is stored in the clear"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_says_to_sign_in_again() {
    let weather = crate::peer::shared_weather(&["--json"]);
    let (other, _) = elsewhere().await;
    let peer = serve_peer(Fault::RefreshRefused, &other, Some(weather.url.clone())).await;
    let config = oauth_upstream(&peer, Default::default());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    let key = || Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));
    login_as_a_person(&config, &resolver, &store).await;
    age_sign_in(&store).await;
    let error = config
        .connect_keyed(None, Arc::clone(&resolver), &store, key())
        .await
        .unwrap_err();
    assert!(
        error.contains("401 Unauthorized to larkgate's OAuth token")
            && error.contains("larkgate upstream login vault"),
        "{error}"
    );
    assert!(
        peer.grants
            .lock()
            .unwrap()
            .iter()
            .any(|g| g == "refresh_token"),
        "a refresh was tried first"
    );
    assert!(!error.contains("the-access-token") && !error.contains("the-refresh-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_confidential_client_refreshes_with_its_secret_after_a_restart() {
    let weather = crate::peer::shared_weather(&["--json"]);
    let (other, _) = elsewhere().await;
    let peer = serve_peer(Fault::Confidential, &other, Some(weather.url.clone())).await;
    let config = oauth_upstream(
        &peer,
        larkgate_upstream::config::OAuthConfig {
            client_id: Some("registered".into()),
            client_secret: Some("s3cret".into()),
            ..Default::default()
        },
    );
    config.validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    login_as_a_person(&config, &resolver, &store).await;
    age_sign_in(&store).await;
    // A later start: only the store and the configuration (the secret is never stored).
    let key = Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));
    let client = config
        .connect_keyed(None, Arc::clone(&resolver), &store, key)
        .await
        .unwrap();
    client.list_tools().await.unwrap();
    let grants = peer.grants.lock().unwrap().clone();
    assert_eq!(
        grants,
        ["authorization_code", "refresh_token"],
        "both token requests carried the client's secret"
    );
    client.close().await;

    // The secret gone from the configuration (its variable unset, say): the refresh is
    // refused, and the cause is in plain words, without a library's type names.
    age_sign_in(&store).await;
    let without = oauth_upstream(
        &peer,
        larkgate_upstream::config::OAuthConfig {
            client_id: Some("registered".into()),
            ..Default::default()
        },
    );
    let key = Ok(Arc::new(CredentialKey::from_base64(KEY).unwrap()));
    let error = without
        .connect_keyed(None, Arc::clone(&resolver), &store, key)
        .await
        .unwrap_err();
    assert!(
        error.contains("refused to refresh larkgate's OAuth token")
            && error.contains("larkgate upstream login"),
        "{error}"
    );
    assert!(
        !error.contains("rmcp::") && !error.contains("s3cret"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_client_metadata_document_is_the_client_id_and_nothing_is_registered() {
    let (other, _) = elsewhere().await;
    let peer = peer(Fault::None, &other).await;
    let document = "https://larkgate.example.org/oauth/client.json";
    let config = oauth_upstream(
        &peer,
        larkgate_upstream::config::OAuthConfig {
            client_metadata_url: Some(document.into()),
            ..Default::default()
        },
    );
    config.validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(larkgate_store::SqliteStore::open(dir.path()).unwrap());
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    login_as_a_person(&config, &resolver, &store).await;
    assert_eq!(*peer.clients.lock().unwrap(), [document]);
    assert_eq!(peer.registrations.load(Ordering::SeqCst), 0);
}
