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
use crate::command::{self, CommandTarget, Launcher};
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
                Self::start(transport, endpoint.revisions, limits, overflowed, true).await
            }
            Some(manager) => {
                let http = AuthClient::new(http, manager);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Self::start(transport, endpoint.revisions, limits, overflowed, true).await
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
        match Self::start(transport, revisions, limits, overflowed, false).await {
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
        marked: bool,
    ) -> Result<Self, UpstreamError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let catalog_changed = Arc::new(AtomicBool::new(false));
        let routes = Arc::default();
        if marked {
            // Over HTTP, `crate::http` marks each log message with its request.
            super::routes::marked(&routes);
        }
        let (changes, _) = tokio::sync::broadcast::channel(super::LIST_CHANGES_KEPT);
        let (updates, _) = tokio::sync::broadcast::channel(super::subscribing::UPDATES_KEPT);
        let transport = super::routes::Observing::new(transport.into_transport(), &routes);
        let handler = Handler {
            tools_changed: tools_changed.clone(),
            catalog_changed: catalog_changed.clone(),
            changes: changes.clone(),
            legacy: revisions == Revisions::Legacy,
            may_ask: limits.may_ask,
            routes: Arc::clone(&routes),
            updates: updates.clone(),
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
        let listening = listen(&service, &tools_changed, &catalog_changed, &changes);
        Ok(UpstreamClient {
            service,
            _listening: listening,
            log_level: std::sync::atomic::AtomicU8::new(u8::MAX),
            limits,
            overflowed,
            tools_changed,
            catalog_changed,
            changes,
            routes,
            updates,
            dropped: AtomicUsize::new(0),
            process: None,
            heard: super::Heard::default(),
        })
    }
}

/// On 2026-07-28 a server tells of its list changes only on a `subscriptions/listen` stream:
/// one is kept open ([`keep_listening`]), for the listings the server says change, in a task
/// that ends with the client; when it had to be opened again, every listing may have changed.
/// On 2025-11-25 they come as notifications to the session, to [`Handler`].
fn listen(
    service: &rmcp::service::RunningService<RoleClient, Handler>,
    tools_changed: &Arc<AtomicBool>,
    catalog_changed: &Arc<AtomicBool>,
    changes: &tokio::sync::broadcast::Sender<super::ListChanged>,
) -> Option<super::Listening> {
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    let info = service.peer_info()?;
    if info.protocol_version != ProtocolVersion::V_2026_07_28 {
        return None;
    }
    let capabilities = &info.capabilities;
    let mut filter = SubscriptionFilter::builder();
    let mut any = false;
    if capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true) {
        filter = filter.tools_list_changed();
        any = true;
    }
    if capabilities.resources.as_ref().and_then(|r| r.list_changed) == Some(true) {
        filter = filter.resources_list_changed();
        any = true;
    }
    if capabilities.prompts.as_ref().and_then(|p| p.list_changed) == Some(true) {
        filter = filter.prompts_list_changed();
        any = true;
    }
    if !any {
        return None;
    }
    let (tools_changed, catalog_changed) = (tools_changed.clone(), catalog_changed.clone());
    let changes = changes.clone();
    let heard = move |said: Said| {
        let change = match said {
            // What changed while no stream was open is unknown: everything may have.
            Said::Reopened => {
                tools_changed.store(true, Ordering::SeqCst);
                catalog_changed.store(true, Ordering::SeqCst);
                for change in [
                    super::ListChanged::Tools,
                    super::ListChanged::Resources,
                    super::ListChanged::Prompts,
                ] {
                    let _ = changes.send(change);
                }
                return;
            }
            Said::Notification(notification) => match *notification {
                ServerNotification::ToolListChangedNotification(_) => {
                    tools_changed.store(true, Ordering::SeqCst);
                    super::ListChanged::Tools
                }
                ServerNotification::ResourceListChangedNotification(_) => {
                    catalog_changed.store(true, Ordering::SeqCst);
                    super::ListChanged::Resources
                }
                ServerNotification::PromptListChangedNotification(_) => {
                    catalog_changed.store(true, Ordering::SeqCst);
                    super::ListChanged::Prompts
                }
                _ => return,
            },
        };
        let _ = changes.send(change);
    };
    Some(keep_listening(
        service.peer().clone(),
        filter.build(),
        None,
        heard,
    ))
}

/// What a kept `subscriptions/listen` stream heard ([`keep_listening`]).
pub(super) enum Said {
    /// A notification on the stream.
    Notification(Box<rmcp::model::ServerNotification>),
    /// The stream was opened again after it ended: what was said meanwhile is lost.
    Reopened,
}

/// Keeps a `subscriptions/listen` stream for `filter` open at `peer` (starting with `opened`,
/// when the caller opened it already), telling `heard` what it hears, until the returned task
/// is dropped or the connection closes. When the server or the network ends the stream, it is
/// opened again after a pause (1 s, doubled each time a stream lasted less than a minute, at
/// most a minute).
pub(super) fn keep_listening(
    peer: rmcp::Peer<RoleClient>,
    filter: rmcp::model::SubscriptionFilter,
    mut opened: Option<rmcp::service::Subscription>,
    heard: impl Fn(Said) + Send + 'static,
) -> super::Listening {
    let task = tokio::spawn(async move {
        let mut pause = Duration::from_secs(1);
        let mut again = false;
        loop {
            let started = tokio::time::Instant::now();
            let mut subscription = match opened.take() {
                Some(subscription) => subscription,
                None => match peer.listen(filter.clone()).await {
                    Ok(subscription) => subscription,
                    Err(rmcp::ServiceError::TransportClosed) => return,
                    Err(error) => {
                        tracing::debug!(%error, "an upstream did not take a subscriptions/listen");
                        return;
                    }
                },
            };
            if again {
                heard(Said::Reopened);
            }
            again = true;
            while let Ok(Some(notification)) = subscription.next().await {
                heard(Said::Notification(Box::new(notification)));
            }
            if peer.is_transport_closed() {
                return;
            }
            pause = if started.elapsed() < Duration::from_secs(60) {
                (pause * 2).min(Duration::from_secs(60))
            } else {
                Duration::from_secs(1)
            };
            tokio::time::sleep(pause).await;
        }
    });
    super::Listening(task)
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
