//! The network every OAuth request goes over: [`GuardedOAuthHttp`], held to the upstream's URL
//! guard (see the threat model of [`crate::oauth`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture,
    OAuthHttpRedirectPolicy, OAuthHttpRequest,
};

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
    pub(super) guard: Arc<UrlGuard>,
    pub(super) resolver: Arc<dyn Resolve>,
    pub(super) connect_timeout: Duration,
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
pub(super) fn unreachable(url: &str, error: reqwest::Error) -> OAuthHttpError {
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
pub(super) fn shown(url: &reqwest::Url) -> String {
    let mut clean = url.clone();
    clean.set_query(None);
    clean.set_fragment(None);
    clean.to_string()
}
