//! The resource subscriptions one upstream holds for larkgate's clients.
//!
//! Many sessions may subscribe to one resource; the upstream is asked once. A URI is
//! subscribed at the upstream when its first holder subscribes and unsubscribed when its last
//! holder lets go ([`Held`] dropped: the session unsubscribed, ended, or its listen stream
//! closed). The holders live longer than a connection: when the upstream is connected again
//! ([`Watches::attach`]), every URI held is subscribed again at the new connection, and each
//! holder is told it may have been updated meanwhile. At most [`MAX_WATCHED`] URIs are held
//! per upstream.
//!
//! The updates of every connection the upstream had go out on one channel
//! ([`Watches::watch`]'s receiver), which each holder filters for its own URI
//! ([`larkgate_platform::catalog::Watched`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::client::{Listening, UpstreamClient, UpstreamError};

/// The most distinct resource URIs held at one upstream.
pub const MAX_WATCHED: usize = 256;

/// How many updates a slow holder may fall behind by before it is told it lagged.
const UPDATES_KEPT: usize = 64;

/// The subscriptions held at one upstream.
#[derive(Debug)]
pub struct Watches {
    updates: tokio::sync::broadcast::Sender<String>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The connection the URIs are subscribed at.
    client: Weak<UpstreamClient>,
    /// What passes that connection's updates on.
    forwarding: Option<Listening>,
    uris: HashMap<String, Holders>,
}

#[derive(Debug)]
struct Holders {
    count: usize,
    /// On 2026-07-28, the stream that holds the subscription.
    _listening: Option<Listening>,
}

impl Default for Watches {
    /// Nothing held yet.
    fn default() -> Self {
        Watches {
            updates: tokio::sync::broadcast::channel(UPDATES_KEPT).0,
            state: tokio::sync::Mutex::default(),
        }
    }
}

impl Watches {
    /// Holds a subscription to `uri` (the upstream's own) at `client` until the answer's
    /// [`Held`] is dropped; the receiver hears every URI the upstream says was updated from
    /// now on.
    pub async fn watch(
        self: &Arc<Self>,
        client: &Arc<UpstreamClient>,
        uri: &str,
    ) -> Result<(tokio::sync::broadcast::Receiver<String>, Held), UpstreamError> {
        let updates = self.updates.subscribe();
        let mut state = self.state.lock().await;
        if !std::ptr::eq(state.client.as_ptr(), Arc::as_ptr(client)) {
            // A connection `attach` has not been told of yet: from now on, this one.
            self.forward(&mut state, client);
        }
        let held = || Held {
            watches: Arc::clone(self),
            uri: Some(uri.to_owned()),
        };
        if let Some(holders) = state.uris.get_mut(uri) {
            holders.count += 1;
            return Ok((updates, held()));
        }
        if state.uris.len() >= MAX_WATCHED {
            return Err(UpstreamError::Protocol(format!(
                "larkgate holds subscriptions to {MAX_WATCHED} of this upstream's resources \
                 already, its most"
            )));
        }
        let listening = client.subscribe(uri).await?;
        state.uris.insert(
            uri.to_owned(),
            Holders {
                count: 1,
                _listening: listening,
            },
        );
        Ok((updates, held()))
    }

    /// Makes `client` the connection every held URI is subscribed at, subscribing each again
    /// there, and tells each holder its URI may have been updated while none was.
    pub fn attach(self: &Arc<Self>, client: &Arc<UpstreamClient>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (watches, client) = (Arc::clone(self), Arc::clone(client));
        runtime.spawn(async move {
            let mut state = watches.state.lock().await;
            if std::ptr::eq(state.client.as_ptr(), Arc::as_ptr(&client)) {
                return;
            }
            watches.forward(&mut state, &client);
            let uris: Vec<String> = state.uris.keys().cloned().collect();
            for uri in uris {
                match client.subscribe(&uri).await {
                    Ok(listening) => {
                        if let Some(holders) = state.uris.get_mut(&uri) {
                            holders._listening = listening;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a resource subscription could not be made again");
                    }
                }
                let _ = watches.updates.send(uri);
            }
        });
    }

    /// Passes `client`'s updates on, from now on, as those of the connection held.
    fn forward(self: &Arc<Self>, state: &mut State, client: &Arc<UpstreamClient>) {
        state.client = Arc::downgrade(client);
        let mut heard = client.resource_updates();
        let updates = self.updates.clone();
        let watches = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match heard.recv().await {
                    Ok(uri) => {
                        let _ = updates.send(uri);
                    }
                    // Some were missed: any held URI may have been updated.
                    Err(RecvError::Lagged(_)) => {
                        let Some(watches) = watches.upgrade() else {
                            return;
                        };
                        let uris: Vec<String> =
                            watches.state.lock().await.uris.keys().cloned().collect();
                        for uri in uris {
                            let _ = updates.send(uri);
                        }
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        state.forwarding = Some(Listening::of(task));
    }

    /// One holder of `uri` let go; the last one unsubscribes it at the upstream.
    async fn release(&self, uri: String) {
        let mut state = self.state.lock().await;
        let Some(holders) = state.uris.get_mut(&uri) else {
            return;
        };
        holders.count -= 1;
        if holders.count > 0 {
            return;
        }
        // On 2026-07-28 dropping its stream ends it.
        state.uris.remove(&uri);
        if let Some(client) = state.client.upgrade()
            && let Err(error) = client.unsubscribe(&uri).await
        {
            tracing::debug!(%error, "an upstream did not take resources/unsubscribe");
        }
    }

    /// How many holders `uri` has.
    pub async fn holders(&self, uri: &str) -> usize {
        self.state.lock().await.uris.get(uri).map_or(0, |h| h.count)
    }
}

/// One holder's subscription to a URI; dropped, it lets go ([`Watches`]).
#[derive(Debug)]
pub struct Held {
    watches: Arc<Watches>,
    uri: Option<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(uri) = self.uri.take() else {
            return;
        };
        let watches = Arc::clone(&self.watches);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { watches.release(uri).await });
        }
    }
}
