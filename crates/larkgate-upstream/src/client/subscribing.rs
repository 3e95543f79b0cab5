//! Resource subscriptions at one server, held for larkgate's clients by [`crate::watches`].
//!
//! On 2025-11-25 a subscription is the session's: `resources/subscribe` and
//! `resources/unsubscribe`, the updates coming to the handler as notifications. On 2026-07-28,
//! which has no such requests, it is a `subscriptions/listen` stream asking for the one URI's
//! updates, kept open ([`super::connect::keep_listening`]) until it is dropped. Either way each
//! URI the server says was updated goes to [`UpstreamClient::resource_updates`].

use rmcp::model::{
    ClientRequest, ProtocolVersion, ServerNotification, ServerResult, SubscriptionFilter,
};

use super::connect::{Said, keep_listening};
use super::error::{answered_with, classify};
use super::{Listening, UpstreamClient, UpstreamError};

/// How many updates a slow listener may fall behind by before it is told it lagged.
pub(super) const UPDATES_KEPT: usize = 64;

impl UpstreamClient {
    /// Whether the server said at initialization that it takes resource subscriptions.
    pub fn serves_subscriptions(&self) -> bool {
        self.service.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|resources| resources.subscribe == Some(true))
        })
    }

    /// Each URI (the server's own) the server says was updated from now on. A listener that
    /// falls more than a few dozen behind is told it lagged: then any subscribed resource may
    /// have been updated.
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.updates.subscribe()
    }

    /// Subscribes to the updates of resource `uri` (the server's own URI). On 2026-07-28 the
    /// answer is the stream that holds the subscription: dropped, it ends. A server that does
    /// not accept it (or does not serve subscriptions) answers an error.
    #[allow(deprecated)] // `resources/subscribe` is 2025-11-25's, and still spoken.
    pub async fn subscribe(&self, uri: &str) -> Result<Option<Listening>, UpstreamError> {
        if self.protocol_version() == Some(ProtocolVersion::V_2026_07_28) {
            let filter = SubscriptionFilter::builder()
                .resource_subscription(uri)
                .build();
            let peer = self.service.peer().clone();
            let opened = self.listen(filter.clone()).await?;
            let accepted = opened
                .acknowledged()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|accepted| accepted == uri));
            if !accepted {
                return Err(UpstreamError::Protocol(
                    "the server did not accept a subscription to the resource".to_owned(),
                ));
            }
            let (updates, uri) = (self.updates.clone(), uri.to_owned());
            let heard = move |said: Said| match said {
                Said::Notification(notification) => {
                    if let ServerNotification::ResourceUpdatedNotification(updated) = *notification
                    {
                        let _ = updates.send(updated.params.uri);
                    }
                }
                // What was said while no stream was open is lost: it may have been updated.
                Said::Reopened => {
                    let _ = updates.send(uri.clone());
                }
            };
            return Ok(Some(keep_listening(peer, filter, Some(opened), heard)));
        }
        let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
            rmcp::model::SubscribeRequestParams::new(uri),
        ));
        match self.send(request, false).await? {
            ServerResult::EmptyResult(_) => Ok(None),
            other => Err(answered_with("resources/subscribe", &other)),
        }
    }

    /// Opens a `subscriptions/listen` stream for `filter` (2026-07-28), for a relay that passes
    /// its notifications on; dropped, it ends.
    pub async fn listen(
        &self,
        filter: SubscriptionFilter,
    ) -> Result<rmcp::service::Subscription, UpstreamError> {
        let limit = self.limits.call_timeout;
        tokio::time::timeout(limit, self.service.peer().listen(filter))
            .await
            .map_err(|_| UpstreamError::Timeout(limit))?
            .map_err(|error| classify(error, self.limits))
    }

    /// Ends the subscription to `uri` (on 2025-11-25: `resources/unsubscribe`; on 2026-07-28
    /// dropping its stream ends it, and this does nothing).
    #[allow(deprecated)]
    pub async fn unsubscribe(&self, uri: &str) -> Result<(), UpstreamError> {
        if self.protocol_version() == Some(ProtocolVersion::V_2026_07_28) {
            return Ok(());
        }
        let request = ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
            rmcp::model::UnsubscribeRequestParams::new(uri),
        ));
        match self.send(request, false).await? {
            ServerResult::EmptyResult(_) => Ok(()),
            other => Err(answered_with("resources/unsubscribe", &other)),
        }
    }
}
