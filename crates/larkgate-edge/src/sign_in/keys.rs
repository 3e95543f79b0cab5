//! An identity provider's signing keys: found through its discovery document (or configured),
//! fetched, cached, and fetched again when they grow old or when a token names a key that is
//! not among them (the provider rotated its keys).
//!
//! # Threat model
//!
//! Whoever can send requests to `/mcp` chooses the `kid` of the tokens it presents, so a key
//! miss must not become a request to the provider per request: a miss fetches the keys again
//! only when the last fetch is older than `key_refetch_seconds`, and one fetch at a time
//! (the others wait for it and use what it brought). A provider that is down or answers
//! garbage does not take the cached keys away: they stay in use, and the failure is logged.
//! Every document is read within a byte cap and a time limit, redirects are not followed, and
//! the URLs are the operator's (configured, or named by the configured issuer's own discovery
//! document, whose `issuer` must equal the configured one); plain HTTP only on loopback
//! (see [`super::config::provider_url_problem`]). No client's token is ever sent to the
//! provider: these requests carry no credential at all.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};

use super::config::{IssuerConfig, provider_url_problem};

/// The largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The most keys kept from one key set.
const MAX_KEYS: usize = 100;
/// How long one fetch may take, from connecting to the last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// When the keys were fetched (`None`: never).
    at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Attempts {
    /// When a fetch was last tried, whatever came of it.
    last: Option<Instant>,
    /// The key set's URL, once known.
    jwks_uri: Option<String>,
}

/// One provider's keys.
#[derive(Debug)]
pub(crate) struct Keys {
    issuer: String,
    configured_uri: Option<String>,
    refetch: Duration,
    refresh: Duration,
    http: reqwest::Client,
    fetched: RwLock<Arc<Fetched>>,
    /// Held while fetching: one fetch at a time.
    attempts: tokio::sync::Mutex<Attempts>,
}

impl Keys {
    /// The keys of the provider `config` names, fetched when first needed.
    pub(crate) fn new(config: &IssuerConfig) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .expect("an HTTP client without custom TLS settings builds");
        Keys {
            issuer: config.issuer.clone(),
            configured_uri: config.jwks_uri.clone(),
            refetch: Duration::from_secs(config.key_refetch_seconds),
            refresh: Duration::from_secs(config.key_refresh_seconds),
            http,
            fetched: RwLock::default(),
            attempts: tokio::sync::Mutex::default(),
        }
    }

    fn current(&self) -> Arc<Fetched> {
        Arc::clone(&self.fetched.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The key a token with `kid` is verified with.
    pub(crate) async fn key(&self, kid: Option<&str>) -> Result<Arc<Key>, KeyError> {
        let current = self.current();
        let fresh = current.at.is_some_and(|at| at.elapsed() < self.refresh);
        if fresh && let Some(key) = pick(&current.keys, kid) {
            return Ok(key);
        }
        // Stale keys, or a key not among them: fetch, unless a fetch was tried too recently.
        let mut attempts = self.attempts.lock().await;
        let now = self.current();
        if now.at != current.at {
            // Another request fetched while this one waited.
            if let Some(key) = pick(&now.keys, kid) {
                return Ok(key);
            }
        }
        // Old keys are fetched again at most once a second; a key missing from fresh ones,
        // at most once per `key_refetch_seconds`.
        let stale = now.at.is_none_or(|at| at.elapsed() >= self.refresh);
        let wait = if stale {
            self.refetch.min(Duration::from_secs(1))
        } else {
            self.refetch
        };
        if attempts.last.is_none_or(|t| t.elapsed() >= wait) {
            attempts.last = Some(Instant::now());
            match self.fetch(&mut attempts).await {
                Ok(keys) => self.keep(keys),
                Err(error) => {
                    tracing::warn!(
                        issuer = %self.issuer,
                        %error,
                        "the identity provider's keys could not be fetched; the keys fetched \
                         before (if any) stay in use"
                    );
                    if now.at.is_none() {
                        return Err(KeyError::Unavailable(error));
                    }
                }
            }
        } else if now.at.is_none() {
            return Err(KeyError::Unavailable(
                "the last attempt failed moments ago".to_owned(),
            ));
        }
        pick(&self.current().keys, kid).ok_or(KeyError::Unknown)
    }

    fn keep(&self, keys: Vec<Arc<Key>>) {
        *self.fetched.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Fetched {
            keys,
            at: Some(Instant::now()),
        });
    }

    /// Fetches the keys now (at start, so the first sign-in does not wait), logging a failure.
    pub(crate) async fn prefetch(&self) {
        let mut attempts = self.attempts.lock().await;
        attempts.last = Some(Instant::now());
        match self.fetch(&mut attempts).await {
            Ok(keys) => {
                tracing::info!(issuer = %self.issuer, keys = keys.len(), "fetched the identity provider's keys");
                self.keep(keys);
            }
            Err(error) => tracing::warn!(
                issuer = %self.issuer,
                %error,
                "the identity provider's keys could not be fetched; sign-ins with its tokens \
                 are refused until they can be"
            ),
        }
    }

    async fn fetch(&self, attempts: &mut Attempts) -> Result<Vec<Arc<Key>>, String> {
        let uri = match (&self.configured_uri, &attempts.jwks_uri) {
            (Some(uri), _) | (None, Some(uri)) => uri.clone(),
            (None, None) => {
                let uri = self.discover().await?;
                attempts.jwks_uri = Some(uri.clone());
                uri
            }
        };
        let document = self.get(&uri).await?;
        let keys = parse_key_set(&document).map_err(|e| format!("{uri}: {e}"))?;
        if keys.is_empty() {
            return Err(format!("{uri} publishes no signing key larkgate can use"));
        }
        Ok(keys)
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
            .map_err(|e| format!("{url}: {}", describe(&e)))?;
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
            let chunk = chunk.map_err(|e| format!("{url}: {}", describe(&e)))?;
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url} is larger than {MAX_DOCUMENT_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// A transport failure in plain words.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        format!("no answer within {} s", FETCH_TIMEOUT.as_secs())
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
}
