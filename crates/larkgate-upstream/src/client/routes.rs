//! Where an upstream's progress reports go: the conversation of the call they are about,
//! found by the `progressToken` larkgate sent with that call (rmcp gives each request its
//! own), never by anything else the server says.
//!
//! Reports are routed as the transport receives them ([`Observing`]), in order with the
//! answers: a call's last report is in its conversation before its answer reaches the call.
//!
//! A report can arrive before its call is routed (the request is sent before rmcp hands back
//! its token, and a fast server answers at once): such reports wait, at most
//! [`MAX_EARLY`] of them for all calls together, oldest dropped first, until their call is
//! routed. A report for a token no call holds (a finished call, a ping) is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use larkgate_platform::Conversation;
use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, ProgressNotificationParam, ProgressToken, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The most reports kept for calls not routed yet.
pub(super) const MAX_EARLY: usize = 64;

/// The routes of one upstream connection.
#[derive(Debug, Default)]
pub(super) struct Routes {
    calls: HashMap<ProgressToken, Conversation>,
    early: VecDeque<ProgressNotificationParam>,
}

/// A call's route, removed when it is dropped (the call answered, failed or was abandoned).
#[derive(Debug)]
pub(super) struct Route {
    routes: Arc<Mutex<Routes>>,
    token: ProgressToken,
}

impl Drop for Route {
    fn drop(&mut self) {
        lock(&self.routes).calls.remove(&self.token);
    }
}

fn lock(routes: &Mutex<Routes>) -> std::sync::MutexGuard<'_, Routes> {
    // A poisoned lock means a panic elsewhere; the table itself is whole.
    routes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends the reports a call gets to its conversation (outside the lock: relaying never waits,
/// but it need not hold the table either).
fn relay(
    conversation: &Conversation,
    reports: impl IntoIterator<Item = ProgressNotificationParam>,
) {
    for report in reports {
        conversation.relay_progress(report.progress, report.total, report.message.as_deref());
    }
}

/// Routes the reports of the call sent with `token` to `conversation`, with those that came
/// before, until the route is dropped.
pub(super) fn route(
    routes: &Arc<Mutex<Routes>>,
    token: ProgressToken,
    conversation: Conversation,
) -> Route {
    let waiting: Vec<ProgressNotificationParam> = {
        let mut table = lock(routes);
        let (theirs, others): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut table.early)
            .into_iter()
            .partition(|r| r.progress_token == token);
        table.early = others;
        table.calls.insert(token.clone(), conversation.clone());
        theirs.into()
    };
    relay(&conversation, waiting);
    Route {
        routes: Arc::clone(routes),
        token,
    }
}

/// A report from the server: to its call's conversation, or kept until its call is routed.
pub(super) fn report(routes: &Mutex<Routes>, report: ProgressNotificationParam) {
    let conversation = {
        let mut table = lock(routes);
        match table.calls.get(&report.progress_token) {
            Some(conversation) => conversation.clone(),
            None => {
                if table.early.len() >= MAX_EARLY {
                    table.early.pop_front();
                }
                table.early.push_back(report);
                return;
            }
        }
    };
    relay(&conversation, [report]);
}

/// A client transport that routes each progress report it receives before passing it on.
pub(super) struct Observing<T> {
    inner: T,
    routes: Arc<Mutex<Routes>>,
}

impl<T> Observing<T> {
    pub(super) fn new(inner: T, routes: &Arc<Mutex<Routes>>) -> Self {
        Observing {
            inner,
            routes: Arc::clone(routes),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(notification) = &message
            && let ServerNotification::ProgressNotification(progress) = &notification.notification
        {
            report(&self.routes, progress.params.clone());
        }
        Some(message)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    fn said(token: ProgressToken, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(token, progress)
    }

    #[tokio::test]
    async fn reports_reach_their_call_alone_those_before_the_route_too_and_none_after() {
        let routes = Arc::new(Mutex::new(Routes::default()));
        let client = ProgressToken(NumberOrString::String("c".into()));
        let (one, _outbox_one) = Conversation::open(Some(client.clone()), Default::default());
        let (two, _outbox_two) = Conversation::open(Some(client), Default::default());
        // Call 1's first report comes before its route.
        report(&routes, said(token(1), 1.0));
        let first = route(&routes, token(1), one.clone());
        let second = route(&routes, token(2), two.clone());
        report(&routes, said(token(1), 2.0));
        report(&routes, said(token(2), 1.0));
        assert_eq!(one.counts(), (2, 0));
        assert_eq!(two.counts(), (1, 0));
        drop(first);
        // After its route is gone, a report of call 1 reaches nobody.
        report(&routes, said(token(1), 3.0));
        assert_eq!(one.counts(), (2, 0));
        drop(second);
        // Reports nobody routes are kept to a bound.
        for n in 0..(MAX_EARLY as i64 + 10) {
            report(&routes, said(token(100 + n), 1.0));
        }
        assert_eq!(lock(&routes).early.len(), MAX_EARLY);
        assert!(lock(&routes).calls.is_empty());
    }
}
