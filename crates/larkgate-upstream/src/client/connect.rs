//! Connecting: over Streamable HTTP through the guarded HTTP client (with the configured
//! headers, or an OAuth authorization), or to a program started through the launcher over its
//! standard input and output; then the MCP handshake, bounded in time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};

use rmcp::RoleClient;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::auth::{AuthClient, AuthorizationManager};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::error::{classify_text, plain_cause};
use super::{Endpoint, Handler, Revisions, UpstreamClient, UpstreamError, UpstreamLimits};
use crate::command::{self, CommandTarget, Launcher, ServerProcess};
use crate::guard::{Resolve, UrlGuard};
use crate::http::{GuardedHttp, build_client};

impl UpstreamClient {
    /// Connects through `guard` (required: there is no unguarded client) and `resolver`.
    pub async fn connect(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
    ) -> Result<Self, UpstreamError> {
        Self::connect_http(endpoint, guard, resolver, None).await
    }

    /// Connects like [`UpstreamClient::connect`], sending the access tokens `manager` holds
    /// (built by [`crate::oauth::GuardedOAuthHttp::manager`], so its own requests pass the same
    /// guard). A token the server rejects is refreshed once and the request retried; a server
    /// that still answers 401 or 403 is an error naming that answer.
    pub async fn connect_authorized(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        manager: AuthorizationManager,
    ) -> Result<Self, UpstreamError> {
        Self::connect_http(endpoint, guard, resolver, Some(manager)).await
    }

    async fn connect_http(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        manager: Option<AuthorizationManager>,
    ) -> Result<Self, UpstreamError> {
        let (url, _) = guard
            .parse(&endpoint.url)
            .map_err(|e| UpstreamError::Config(e.to_string()))?;
        let limits = endpoint.limits;
        let client = build_client(guard.clone(), resolver, &url, limits.connect_timeout)
            .map_err(|e| UpstreamError::Config(e.to_string()))?;
        let http = GuardedHttp::new(client, guard, limits.max_response_bytes);
        let overflowed = http.overflowed();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        config.custom_headers = headers(&endpoint.headers)?;
        config.max_json_response_size = limits.max_response_bytes;
        config.max_sse_event_size = limits.max_response_bytes;
        config.max_error_response_size = 64 * 1024;
        config.reinit_on_expired_session = true;
        match manager {
            None => {
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Self::start(transport, endpoint.revisions, limits, overflowed, None).await
            }
            Some(manager) => {
                let http = AuthClient::new(http, manager);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Self::start(transport, endpoint.revisions, limits, overflowed, None).await
            }
        }
    }

    /// Starts the server `target` names through `launcher` and connects to it over its
    /// standard input and output. Its messages are capped like an HTTP server's responses;
    /// the server's process group dies with the client.
    pub async fn connect_command(
        target: &CommandTarget,
        launcher: &Launcher,
        revisions: Revisions,
        limits: UpstreamLimits,
    ) -> Result<Self, UpstreamError> {
        let overflowed = Arc::new(AtomicBool::new(false));
        let started = command::start(
            launcher,
            target,
            limits.max_response_bytes,
            Arc::clone(&overflowed),
        )
        .map_err(|e| {
            UpstreamError::Unavailable(format!("the launcher could not be started: {e}"))
        })?;
        let transport = AsyncRwTransport::new_client(started.stdout, started.stdin)
            .with_max_line_length(limits.max_response_bytes);
        let process = started.process;
        match Self::start(transport, revisions, limits, overflowed, None).await {
            Ok(mut client) => {
                client.process = Some(process);
                Ok(client)
            }
            Err(error) => {
                // Say how the process ended, when it did (it may still be writing its last
                // words: give it a moment). It may have ended because the handshake failed
                // first and its pipes were closed, so the handshake's error is logged too.
                for _ in 0..20 {
                    if let Some(ended) = process.ended() {
                        tracing::warn!(
                            alias = %target.alias,
                            handshake = %error,
                            %ended,
                            "a command-launched server ended without completing the MCP handshake"
                        );
                        return Err(UpstreamError::Unavailable(ended));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(error)
            }
        }
    }

    async fn start<T, E, A>(
        transport: T,
        revisions: Revisions,
        limits: UpstreamLimits,
        overflowed: Arc<AtomicBool>,
        process: Option<ServerProcess>,
    ) -> Result<Self, UpstreamError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let catalog_changed = Arc::new(AtomicBool::new(false));
        let routes = Arc::default();
        let transport = super::routes::Observing::new(transport.into_transport(), &routes);
        let handler = Handler {
            tools_changed: tools_changed.clone(),
            catalog_changed: catalog_changed.clone(),
            legacy: revisions == Revisions::Legacy,
        };
        let lifecycle = match revisions {
            Revisions::Latest => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Revisions::Legacy => ClientLifecycleMode::Initialize,
        };
        let service = tokio::time::timeout(
            limits.call_timeout,
            handler.serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .map_err(|_| UpstreamError::Timeout(limits.call_timeout))?
        .map_err(|e| {
            if overflowed.swap(false, Ordering::SeqCst) {
                UpstreamError::TooLarge {
                    limit: limits.max_response_bytes,
                }
            } else if let Some(cause) = plain_cause(&e) {
                tracing::debug!(error = %e, "an upstream could not be connected");
                UpstreamError::Unavailable(cause)
            } else {
                classify_text(&e.to_string(), limits)
            }
        })?;
        Ok(UpstreamClient {
            service,
            limits,
            overflowed,
            tools_changed,
            catalog_changed,
            routes,
            dropped: AtomicUsize::new(0),
            process,
            heard: super::Heard::default(),
        })
    }
}

fn headers(
    configured: &BTreeMap<String, String>,
) -> Result<std::collections::HashMap<HeaderName, HeaderValue>, UpstreamError> {
    let mut headers = std::collections::HashMap::new();
    for (name, value) in configured {
        let header = HeaderName::try_from(name.as_str())
            .map_err(|e| UpstreamError::Config(format!("header {name:?}: {e}")))?;
        let mut value = HeaderValue::try_from(value.as_str())
            .map_err(|e| UpstreamError::Config(format!("header {name:?}: {e}")))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}
