//! An identity provider's signing keys: found through its discovery document (or configured),
//! fetched, cached, and fetched again when they grow old or when a token names a key that is
//! not among them (the provider rotated its keys).
//!
//! # Threat model
//!
//! Whoever can send requests to `/mcp` chooses the `kid` of the tokens it presents, and the
//! provider may be slow, hung or hostile. So:
//!
//! - **A request with a key already known never waits for the provider.** Old keys (past
//!   `key_refresh_seconds`) are answered from the cache at once while a refresh runs in the
//!   background.
//! - **One fetch per issuer at a time (single flight).** Requests that need a fetch (a key not
//!   among the cached ones, or none cached yet) join the one in flight; none starts a second.
//!   The fetch runs as a task of its own, so a client that goes away does not cancel it.
//! - **Attempts are spaced from their end, with backoff.** After an attempt ends, the next may
//!   start `key_refetch_seconds` later (old keys: at most a second later), doubled after each
//!   failure in a row up to [`MAX_BACKOFF`]. So a miss is not a request to the provider per
//!   request, and a hung provider (each attempt takes [`FETCH_TIMEOUT`]) is not asked again the
//!   moment an attempt gives up.
//! - A provider that is down or answers garbage does not take the cached keys away: they stay
//!   in use, and the failure is logged.
//!
//! Every document is read within a byte cap and a time limit, redirects are not followed,
//! proxy variables in the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) are ignored, and
//! the URLs are the operator's (configured, or named by the configured issuer's own discovery
//! document, whose `issuer` must equal the configured one); plain HTTP only on loopback
//! (see [`super::config::provider_url_problem`]). No client's token is ever sent to the
//! provider: these requests carry no credential at all.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::future::{BoxFuture, Shared};
use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use larkgate_platform::clock::{Clock, TokioClock};

use super::config::{IssuerConfig, provider_url_problem};

/// The largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The most keys kept from one key set.
const MAX_KEYS: usize = 100;
/// How long one request to the provider may take, from connecting to the last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two attempts after failures in a row.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A key ready to verify with, and what the provider said of it.
#[derive(Clone)]
pub(crate) struct Key {
    /// The key as published.
    pub(crate) jwk: Jwk,
    /// The key, ready.
    pub(crate) decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.jwk.common.key_id)
            .finish_non_exhaustive()
    }
}

/// Why no key was found for a token.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    /// The provider publishes no key with that id (or, for a token without one, not exactly
    /// one key).
    #[error("the identity provider publishes no such key")]
    Unknown,
    /// No keys were ever fetched: the provider could not be reached or answered badly.
    #[error("the identity provider's keys could not be fetched: {0}")]
    Unavailable(String),
}

#[derive(Debug, Default)]
struct Fetched {
    keys: Vec<Arc<Key>>,
    /// When the keys were fetched, on the keys' clock (`None`: never).
    at: Option<Duration>,
}

/// A fetch in flight, which every request that needs it awaits.
type Flight = Shared<BoxFuture<'static, ()>>;

#[derive(Default)]
struct Attempts {
    /// The attempt in flight, if any.
    in_flight: Option<Flight>,
    /// When the last attempt ended, on the keys' clock.
    ended: Option<Duration>,
    /// Attempts that failed in a row (0 after a success).
    failures: u32,
    /// What the last attempt failed on, for the refusal of a request that has no key at all.
    last_error: Option<String>,
    /// The key set's URL, once known.
    jwks_uri: Option<String>,
}

impl std::fmt::Debug for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempts")
            .field("in_flight", &self.in_flight.is_some())
            .field("ended", &self.ended)
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

/// Why an attempt would be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Need {
    /// The cached keys are old; the request is answered from them meanwhile.
    Refresh,
    /// The request needs a key that is not cached.
    Missing,
}

/// One provider's keys.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    shared: Arc<Provider>,
}

#[derive(Debug)]
struct Provider {
    issuer: String,
    configured_uri: Option<String>,
    refetch: Duration,
    refresh: Duration,
    http: reqwest::Client,
    fetch_timeout: Duration,
    clock: Arc<dyn Clock>,
    fetched: RwLock<Arc<Fetched>>,
    /// Never held across an await.
    attempts: Mutex<Attempts>,
}

impl Keys {
    /// The keys of the provider `config` names, fetched when first needed.
    pub(crate) fn new(config: &IssuerConfig) -> Self {
        Self::with_clock(config, Arc::new(TokioClock::default()), FETCH_TIMEOUT)
    }

    /// [`Keys::new`], timing attempts by `clock` (a test moves it instead of waiting), each
    /// request to the provider within `fetch_timeout`.
    pub(crate) fn with_clock(
        config: &IssuerConfig,
        clock: Arc<dyn Clock>,
        fetch_timeout: Duration,
    ) -> Self {
        let http = reqwest::Client::builder()
            // A proxy named in the environment is not the operator's choice of route to the
            // provider: one that answered for it would choose the keys every token is
            // verified with.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(fetch_timeout)
            .connect_timeout(fetch_timeout)
            .tcp_nodelay(true)
            .build()
            .expect("an HTTP client without custom TLS settings builds");
        Keys {
            shared: Arc::new(Provider {
                issuer: config.issuer.clone(),
                configured_uri: config.jwks_uri.clone(),
                refetch: Duration::from_secs(config.key_refetch_seconds),
                refresh: Duration::from_secs(config.key_refresh_seconds),
                http,
                fetch_timeout,
                clock,
                fetched: RwLock::default(),
                attempts: Mutex::default(),
            }),
        }
    }

    /// The key a token with `kid` is verified with.
    pub(crate) async fn key(&self, kid: Option<&str>) -> Result<Arc<Key>, KeyError> {
        let provider = &self.shared;
        let current = provider.current();
        if let Some(key) = pick(&current.keys, kid) {
            if current
                .at
                .is_none_or(|at| provider.clock.now().saturating_sub(at) >= provider.refresh)
            {
                // Refreshed in the background; this request does not wait for it.
                let _ = provider.flight(Need::Refresh);
            }
            return Ok(key);
        }
        if let Some(flight) = provider.flight(Need::Missing) {
            flight.await;
        }
        let now = provider.current();
        match pick(&now.keys, kid) {
            Some(key) => Ok(key),
            None if now.at.is_none() => Err(KeyError::Unavailable(
                provider
                    .lock()
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "no attempt has ended yet".to_owned()),
            )),
            None => Err(KeyError::Unknown),
        }
    }

    /// Fetches the keys now (at start, so the first sign-in does not wait), logging a failure.
    pub(crate) async fn prefetch(&self) {
        if let Some(flight) = self.shared.flight(Need::Missing) {
            flight.await;
        }
        let fetched = self.shared.current();
        if fetched.at.is_some() {
            tracing::info!(
                issuer = %self.shared.issuer,
                keys = fetched.keys.len(),
                "fetched the identity provider's keys"
            );
        }
    }
}

impl Provider {
    fn current(&self) -> Arc<Fetched> {
        Arc::clone(&self.fetched.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Attempts> {
        self.attempts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The attempt in flight; else a new one, when the last ended long enough ago for `need`;
    /// else `None`.
    fn flight(self: &Arc<Self>, need: Need) -> Option<Flight> {
        let mut attempts = self.lock();
        if let Some(flight) = &attempts.in_flight {
            return Some(flight.clone());
        }
        if let Some(ended) = attempts.ended {
            let base = match need {
                Need::Refresh => self.refetch.min(Duration::from_secs(1)),
                Need::Missing => self.refetch,
            };
            let wait = if attempts.failures == 0 {
                base
            } else {
                // Doubled for each failure in a row: 1, 2, 4, ... times the base.
                let doubled = base.saturating_mul(1 << attempts.failures.saturating_sub(1).min(16));
                doubled.min(MAX_BACKOFF.max(base))
            };
            if self.clock.now().saturating_sub(ended) < wait {
                return None;
            }
        }
        let provider = Arc::clone(self);
        let flight = async move { provider.attempt().await }.boxed().shared();
        attempts.in_flight = Some(flight.clone());
        // Driven by a task of its own: it ends whether or not the requests waiting for it do.
        tokio::spawn(flight.clone());
        Some(flight)
    }

    /// One attempt: fetch, keep what came, and note when it ended and how.
    async fn attempt(self: Arc<Self>) {
        let jwks_uri = self.lock().jwks_uri.clone();
        let result = self.fetch(jwks_uri).await;
        let mut attempts = self.lock();
        match result {
            Ok((uri, keys)) => {
                attempts.jwks_uri = Some(uri);
                attempts.failures = 0;
                attempts.last_error = None;
                *self.fetched.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Fetched {
                    keys,
                    at: Some(self.clock.now()),
                });
            }
            Err(error) => {
                tracing::warn!(
                    issuer = %self.issuer,
                    %error,
                    "the identity provider's keys could not be fetched; the keys fetched \
                     before (if any) stay in use"
                );
                attempts.failures = attempts.failures.saturating_add(1);
                attempts.last_error = Some(error);
            }
        }
        attempts.ended = Some(self.clock.now());
        attempts.in_flight = None;
    }

    /// The key set, from `jwks_uri` (the configured one, else the one found before, else the
    /// one the discovery document names), and the URL it came from.
    async fn fetch(&self, jwks_uri: Option<String>) -> Result<(String, Vec<Arc<Key>>), String> {
        let uri = match (&self.configured_uri, jwks_uri) {
            (Some(uri), _) => uri.clone(),
            (None, Some(uri)) => uri,
            (None, None) => self.discover().await?,
        };
        let document = self.get(&uri).await?;
        let keys = parse_key_set(&document).map_err(|e| format!("{uri}: {e}"))?;
        if keys.is_empty() {
            return Err(format!("{uri} publishes no signing key larkgate can use"));
        }
        Ok((uri, keys))
    }

    /// The key set's URL, from the issuer's OpenID Connect discovery document, else its OAuth
    /// authorization server metadata (RFC 8414).
    async fn discover(&self) -> Result<String, String> {
        let issuer = url::Url::parse(&self.issuer).map_err(|e| e.to_string())?;
        let path = issuer.path().trim_end_matches('/');
        let origin = issuer.origin().ascii_serialization();
        let candidates = [
            format!("{origin}{path}/.well-known/openid-configuration"),
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
        ];
        let mut problems = Vec::new();
        for candidate in candidates {
            match self.get(&candidate).await {
                Ok(document) => return self.jwks_uri_in(&candidate, &document),
                Err(problem) => problems.push(problem),
            }
        }
        Err(format!(
            "no discovery document: {}; set jwks_uri",
            problems.join("; ")
        ))
    }

    fn jwks_uri_in(&self, from: &str, document: &[u8]) -> Result<String, String> {
        #[derive(serde::Deserialize)]
        struct Metadata {
            issuer: Option<String>,
            jwks_uri: Option<String>,
        }
        let metadata: Metadata = serde_json::from_slice(document)
            .map_err(|_| format!("{from} is not a discovery document (not the JSON expected)"))?;
        if metadata.issuer.as_deref() != Some(self.issuer.as_str()) {
            return Err(format!(
                "{from} names the issuer {:?}, not {:?}: the configured issuer must be the \
                 provider's own identifier",
                metadata.issuer.unwrap_or_default(),
                self.issuer
            ));
        }
        let uri = metadata
            .jwks_uri
            .ok_or_else(|| format!("{from} names no jwks_uri"))?;
        if let Some(problem) = provider_url_problem(&uri) {
            return Err(format!("{from} names the jwks_uri {uri}: {problem}"));
        }
        Ok(uri)
    }

    /// GETs `url` within the time and byte caps; anything but a 200 is an error.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {}", describe(&e, self.fetch_timeout)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{url} answered {status}"));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(format!("{url} is larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| format!("{url}: {}", describe(&e, self.fetch_timeout)))?;
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url} is larger than {MAX_DOCUMENT_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// A transport failure in plain words.
fn describe(error: &reqwest::Error, timeout: Duration) -> String {
    if error.is_timeout() {
        format!("no answer within {} s", timeout.as_secs())
    } else if error.is_connect() {
        "the connection failed".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

/// The key for `kid`; for a token without one, the only key there is.
fn pick(keys: &[Arc<Key>], kid: Option<&str>) -> Option<Arc<Key>> {
    match kid {
        Some(kid) => keys
            .iter()
            .find(|k| k.jwk.common.key_id.as_deref() == Some(kid))
            .cloned(),
        None => match keys {
            [only] => Some(Arc::clone(only)),
            _ => None,
        },
    }
}

/// The signing keys of a JWK set document. A key larkgate cannot use (another type, meant for
/// encryption, a shared secret, malformed) is skipped; the rest are kept, at most [`MAX_KEYS`].
fn parse_key_set(document: &[u8]) -> Result<Vec<Arc<Key>>, String> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(document)
        .map_err(|_| "not a JWK set (a JSON object with `keys`)".to_owned())?;
    let keys = set
        .keys
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
        .filter(|jwk| {
            matches!(
                jwk.common.public_key_use,
                None | Some(PublicKeyUse::Signature)
            ) && !matches!(
                jwk.algorithm,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
                    | jsonwebtoken::jwk::AlgorithmParameters::Other(_)
            )
        })
        .filter_map(|jwk| {
            let decoding = DecodingKey::from_jwk(&jwk).ok()?;
            Some(Arc::new(Key { jwk, decoding }))
        })
        .take(MAX_KEYS)
        .collect();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSA: &str = r#"{"kty":"RSA","kid":"r1","use":"sig","alg":"RS256","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB"}"#;

    #[test]
    fn only_signing_keys_of_a_known_type_are_kept() {
        let set = format!(
            r#"{{"keys":[{RSA},
              {{"kty":"oct","kid":"secret","k":"c2VjcmV0"}},
              {{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}},
              {{"kty":"XYZ","kid":"odd"}},
              "not a key"]}}"#
        );
        let keys = parse_key_set(set.as_bytes()).unwrap();
        let kids: Vec<_> = keys
            .iter()
            .map(|k| k.jwk.common.key_id.clone().unwrap())
            .collect();
        assert_eq!(kids, ["r1"]);
        for bad in [&b"[]"[..], b"{}", b"{\"keys\": 1}", b"\xff"] {
            assert!(parse_key_set(bad).is_err());
        }
    }

    #[test]
    fn a_token_without_a_key_id_is_verified_only_when_there_is_one_key() {
        let keys = parse_key_set(format!(r#"{{"keys":[{RSA}]}}"#).as_bytes()).unwrap();
        assert!(pick(&keys, None).is_some());
        assert!(pick(&keys, Some("r1")).is_some());
        assert!(pick(&keys, Some("r2")).is_none());
        let two = [Arc::clone(&keys[0]), Arc::clone(&keys[0])];
        assert!(pick(&two, None).is_none());
    }

    mod provider {
        //! A provider's key set endpoint on `127.0.0.1:0` that serves a set, fails, or holds
        //! every request until it is told what to answer; it counts the requests it got.

        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use axum::extract::State;
        use axum::http::StatusCode;
        use axum::response::{IntoResponse, Response};
        use tokio::sync::watch;

        use super::RSA;

        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(super) enum Mode {
            /// Answers a key set of these key ids.
            Serve(Vec<&'static str>),
            /// Answers 500.
            Fail,
            /// Holds each request until the mode changes, then answers as the new one says.
            Hang,
        }

        #[derive(Clone)]
        struct Shared {
            mode: watch::Receiver<Mode>,
            requests: Arc<AtomicUsize>,
        }

        pub(super) struct Peer {
            pub(super) url: String,
            mode: watch::Sender<Mode>,
            requests: Arc<AtomicUsize>,
        }

        impl Peer {
            pub(super) async fn start() -> Peer {
                let (mode, receiver) = watch::channel(Mode::Fail);
                let requests = Arc::new(AtomicUsize::new(0));
                let shared = Shared {
                    mode: receiver,
                    requests: Arc::clone(&requests),
                };
                let app = axum::Router::new()
                    .route("/jwks", axum::routing::get(jwks))
                    .with_state(shared);
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}/jwks", listener.local_addr().unwrap());
                tokio::spawn(async move { axum::serve(listener, app).await });
                Peer {
                    url,
                    mode,
                    requests,
                }
            }

            pub(super) fn set(&self, mode: Mode) {
                self.mode.send_replace(mode);
            }

            pub(super) fn requests(&self) -> usize {
                self.requests.load(Ordering::SeqCst)
            }

            /// Waits (up to a minute, which only a broken build reaches) for `n` requests.
            pub(super) async fn requested(&self, n: usize) {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while self.requests() < n {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{} requests, not {n}",
                        self.requests()
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }

        async fn jwks(State(mut shared): State<Shared>) -> Response {
            shared.requests.fetch_add(1, Ordering::SeqCst);
            let mode = shared
                .mode
                .wait_for(|mode| *mode != Mode::Hang)
                .await
                .map(|mode| mode.clone())
                .unwrap_or(Mode::Fail);
            match mode {
                Mode::Serve(kids) => {
                    let keys: Vec<String> = kids
                        .iter()
                        .map(|kid| RSA.replace("\"kid\":\"r1\"", &format!("\"kid\":\"{kid}\"")))
                        .collect();
                    format!(r#"{{"keys":[{}]}}"#, keys.join(",")).into_response()
                }
                Mode::Fail | Mode::Hang => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    }

    use larkgate_platform::clock::ManualClock;
    use provider::{Mode, Peer};

    /// Attempts may follow each other this long after the last one ended (unknown keys).
    const REFETCH: Duration = Duration::from_secs(10);
    /// Fetched keys are refreshed after this long.
    const REFRESH: Duration = Duration::from_secs(100);

    /// The keys of a provider whose key set is `peer`'s, on `clock`; requests to it wait as
    /// long as the test holds them (no fetch timeout is reached).
    fn keys_of(peer: &Peer, clock: &ManualClock) -> Keys {
        let config: IssuerConfig = toml::from_str(&format!(
            "issuer = \"https://idp.example\"\njwks_uri = \"{}\"\n\
             key_refetch_seconds = {}\nkey_refresh_seconds = {}\n",
            peer.url,
            REFETCH.as_secs(),
            REFRESH.as_secs()
        ))
        .unwrap();
        Keys::with_clock(&config, Arc::new(clock.clone()), Duration::from_secs(600))
    }

    /// `keys.key(kid)`, which must answer within a minute (only a broken build waits longer).
    async fn key(keys: &Keys, kid: &str) -> Result<Arc<Key>, KeyError> {
        tokio::time::timeout(Duration::from_secs(60), keys.key(Some(kid)))
            .await
            .unwrap_or_else(|_| panic!("the key {kid:?} was not answered"))
    }

    fn kid(key: &Key) -> &str {
        key.jwk.common.key_id.as_deref().unwrap()
    }

    /// A provider that hangs once the cached keys are old does not hold up a single request
    /// whose key is cached: each is answered from the cache at once, and the five start one
    /// refresh between them, which runs on its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_known_key_is_answered_at_once_while_the_refresh_hangs() {
        let peer = Peer::start().await;
        let clock = ManualClock::default();
        let keys = keys_of(&peer, &clock);
        peer.set(Mode::Serve(vec!["r1"]));
        keys.prefetch().await;
        assert_eq!(peer.requests(), 1);

        peer.set(Mode::Hang);
        clock.advance(REFRESH);
        for _ in 0..5 {
            // Answered while the refresh is held at the provider (released only below).
            assert_eq!(kid(&key(&keys, "r1").await.unwrap()), "r1");
        }
        peer.requested(2).await;
        assert_eq!(peer.requests(), 2, "one refresh for all five");

        // Released with a rotated set, the refresh brings the new key.
        peer.set(Mode::Serve(vec!["r1", "r2"]));
        assert_eq!(kid(&key(&keys, "r2").await.unwrap()), "r2");
        assert_eq!(peer.requests(), 2);
    }

    /// Eight requests at once for a key that is not cached share one fetch (single flight),
    /// and each gets the key it brings.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_for_an_unknown_key_share_one_fetch() {
        let peer = Peer::start().await;
        let clock = ManualClock::default();
        let keys = keys_of(&peer, &clock);
        peer.set(Mode::Serve(vec!["r1"]));
        keys.prefetch().await;
        clock.advance(REFETCH);

        peer.set(Mode::Hang);
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                let keys = keys.clone();
                tokio::spawn(async move { key(&keys, "r2").await })
            })
            .collect();
        peer.requested(2).await;
        peer.set(Mode::Serve(vec!["r1", "r2"]));
        for request in waiting {
            assert_eq!(kid(&request.await.unwrap().unwrap()), "r2");
        }
        // The clock did not move: no other attempt could have started after that one ended.
        assert_eq!(peer.requests(), 2);
    }

    /// The next attempt starts `key_refetch_seconds` after the last one *ended*, doubled after
    /// each failure in a row; between attempts, requests for unknown keys — however many, with
    /// whatever key ids — are answered without asking the provider.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn attempts_are_spaced_from_the_end_of_the_last_with_backoff_on_failure() {
        let peer = Peer::start().await;
        let clock = ManualClock::default();
        let keys = keys_of(&peer, &clock);
        keys.prefetch().await; // fails
        assert_eq!(peer.requests(), 1);
        let unavailable = key(&keys, "r1").await.unwrap_err();
        assert!(
            matches!(unavailable, KeyError::Unavailable(ref why) if why.contains("500")),
            "{unavailable}"
        );
        assert_eq!(peer.requests(), 1, "too soon after the failure");

        clock.advance(REFETCH);
        key(&keys, "r1").await.unwrap_err(); // the second attempt fails too
        assert_eq!(peer.requests(), 2);
        clock.advance(REFETCH);
        key(&keys, "r1").await.unwrap_err();
        assert_eq!(peer.requests(), 2, "two failures: twice the interval");
        clock.advance(REFETCH);
        key(&keys, "r1").await.unwrap_err();
        assert_eq!(peer.requests(), 3);

        // Three failures: four times the interval, though the provider is back.
        peer.set(Mode::Serve(vec!["r1"]));
        clock.advance(4 * REFETCH - Duration::from_secs(1));
        key(&keys, "r1").await.unwrap_err();
        assert_eq!(peer.requests(), 3);
        clock.advance(Duration::from_secs(1));
        assert_eq!(kid(&key(&keys, "r1").await.unwrap()), "r1");
        assert_eq!(peer.requests(), 4);

        // An attempt that lasts: the interval counts from when it ended, not when it began.
        clock.advance(REFETCH);
        peer.set(Mode::Hang);
        let rotated = {
            let keys = keys.clone();
            tokio::spawn(async move { key(&keys, "r2").await })
        };
        peer.requested(5).await;
        clock.advance(3 * REFETCH);
        peer.set(Mode::Serve(vec!["r1", "r2"]));
        assert_eq!(kid(&rotated.await.unwrap().unwrap()), "r2");
        assert!(matches!(key(&keys, "r3").await, Err(KeyError::Unknown)));
        assert_eq!(peer.requests(), 5, "it ended just now");

        // Unknown keys by the hundred, between attempts: no request at all.
        for n in 0..100 {
            let refused = key(&keys, &format!("forged-{n}")).await;
            assert!(matches!(refused, Err(KeyError::Unknown)));
        }
        assert_eq!(peer.requests(), 5);
        clock.advance(REFETCH);
        assert!(matches!(key(&keys, "r3").await, Err(KeyError::Unknown)));
        assert_eq!(peer.requests(), 6);
    }
}
