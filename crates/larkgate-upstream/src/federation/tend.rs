//! Tending upstreams while serving: a down one retried with backoff, a connected one pinged
//! and re-listed when it says its tools changed, the store followed, and how each stands saved
//! for `larkgate upstream list` beside the process.

use std::sync::Arc;
use std::time::Duration;

use larkgate_store::{UpstreamStatusRecord, now_ms};

use super::{Fatal, Federation, Upstream, UpstreamStatus};
use crate::client::{UpstreamClient, UpstreamError};

impl Federation {
    /// Keeps upstreams connected and fresh until the returned task is aborted: a down upstream
    /// is retried with exponential backoff (1 s doubling up to its probe interval), a
    /// connected one is probed when it has been quiet for its probe interval and re-listed
    /// when it says its tools changed; the store is followed every second
    /// ([`Federation::sync`]), and how each upstream stands is saved there for `larkgate
    /// upstream list` beside this process.
    ///
    /// How each upstream stands is saved once before this returns, so that `upstream list`
    /// beside a gateway that has just started shows this start's view.
    pub async fn maintain(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let federation = Arc::clone(self);
        let statuses: Vec<UpstreamStatus> = self.upstreams().iter().map(|u| u.status()).collect();
        let mut saved = self.save_statuses(&statuses).await.then_some(statuses);
        tokio::spawn(async move {
            let mut tick = 0u64;
            let mut failing = larkgate_platform::failing::Failing::default();
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                tick += 1;
                if tick.is_multiple_of(2) {
                    failing.note(
                        federation.sync().await,
                        |e, failed| {
                            tracing::warn!(
                                %e,
                                failed_attempts_since_last_logged = failed,
                                "upstream changes could not be followed"
                            );
                        },
                        || {
                            tracing::info!(
                                target: larkgate_platform::failing::RECOVERED,
                                "upstream changes are followed again"
                            )
                        },
                    );
                }
                for upstream in federation.upstreams() {
                    federation.tend(&upstream).await;
                }
                let statuses: Vec<UpstreamStatus> =
                    federation.upstreams().iter().map(|u| u.status()).collect();
                if saved.as_ref() != Some(&statuses) && federation.save_statuses(&statuses).await {
                    saved = Some(statuses);
                }
            }
        })
    }

    /// One upstream's turn in [`Federation::maintain`].
    pub(super) async fn tend(&self, upstream: &Arc<Upstream>) {
        let longest = upstream.config.limits().probe_interval;
        match upstream.link.client() {
            // The connection ended (a command-launched server exited): down, and started
            // again after the backoff.
            Some(client) if client.is_closed() => {
                let why = client
                    .process_ended()
                    .unwrap_or_else(|| "the connection was lost".to_owned());
                upstream.link.lost(&client, why);
                drop(client);
                upstream.retry().later(longest);
            }
            Some(client) if client.tools_changed() => {
                if let Err(Fatal(e)) = self.refresh(upstream, client).await {
                    tracing::error!(%e, "an upstream's new tools were not published");
                }
            }
            Some(client) if client.catalog_changed() => {
                self.refresh_catalog(upstream, &client).await;
            }
            Some(client) => {
                upstream.retry().backoff = Duration::from_secs(1);
                if client.quiet_for() >= longest {
                    probe(upstream, client);
                }
            }
            None => {
                let due = tokio::time::Instant::now() >= upstream.retry().next_try;
                let signed_in = self.signed_in_beside(upstream).await;
                if !due && !signed_in {
                    return;
                }
                if let Err(Fatal(e)) = self.connect(upstream).await {
                    tracing::error!(%e, "an upstream's tools were not published");
                }
                if upstream.link.client().is_none() {
                    upstream.retry().later(longest);
                }
            }
        }
    }

    /// Whether someone signed in to down upstream `upstream` beside this process since it last
    /// tried it (`larkgate upstream login` changed its stored credentials): then it is tried at
    /// once rather than after its backoff (up to five minutes). Only for upstreams a person
    /// signs in to: a machine account's tokens change at every try of this process's own.
    pub(super) async fn signed_in_beside(&self, upstream: &Upstream) -> bool {
        if !upstream.config.signs_in() {
            return false;
        }
        let Some(seen) = upstream
            .credentials_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return false;
        };
        match self
            .platform
            .services()
            .store
            .upstream_credentials(&upstream.config.alias)
            .await
        {
            Ok(stored) if stored != seen => {
                tracing::info!(
                    alias = %upstream.config.alias,
                    "someone signed in to a down upstream; connecting it again"
                );
                true
            }
            Ok(_) | Err(_) => false,
        }
    }

    /// Saves `statuses` in the store; whether that worked.
    pub(super) async fn save_statuses(&self, statuses: &[UpstreamStatus]) -> bool {
        let at = now_ms();
        let records = statuses
            .iter()
            .map(|status| UpstreamStatusRecord {
                alias: status.alias.clone(),
                status: serde_json::to_string(status).unwrap_or_default(),
                updated_at_ms: at,
            })
            .collect();
        match self
            .platform
            .services()
            .store
            .save_upstream_statuses(records)
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%e, "the upstreams' statuses could not be saved");
                false
            }
        }
    }
}

/// Asks a quiet upstream whether it is still there, beside the tending loop (which a server
/// slow to answer must not hold up): one probe at a time per connection. A server that cannot
/// be reached, or does not answer within the upstream's call timeout, is marked down; one that
/// answers anything, its own error too, is up.
fn probe(upstream: &Arc<Upstream>, client: Arc<UpstreamClient>) {
    let Some(probing) = UpstreamClient::start_probe(&client) else {
        return;
    };
    let upstream = Arc::clone(upstream);
    tokio::spawn(async move {
        let answer = probing.ping().await;
        drop(probing);
        match answer {
            Ok(()) | Err(UpstreamError::Protocol(_)) => {}
            Err(UpstreamError::Timeout(after)) => {
                let why = format!("the server did not answer a ping within {after:?}");
                upstream.link.lost(&client, why);
            }
            Err(error) if error.is_unreachable() || client.is_closed() => {
                upstream.link.lost(&client, error.why_down());
            }
            Err(error) => {
                tracing::debug!(alias = %upstream.config.alias, %error, "an upstream's probe failed");
            }
        }
    });
}
