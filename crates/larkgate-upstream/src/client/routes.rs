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
//!
//! An upstream's log messages (`notifications/message`) go to the call they are about, which
//! a message itself does not say, so it is found by the way it came:
//!
//! - **Over HTTP**, by the response stream it came on: the stream of a request's POST is that
//!   request's. [`crate::http`] marks each message on it with the request's id, under
//!   [`REQUEST_META_KEY`] in its `_meta` (replacing whatever the server put there, and
//!   removing it from messages on other streams), and the message goes to the call of that
//!   request, if it asked for logs. A message on the session's own stream is about no call.
//! - **Over standard input and output**, where everything shares one pipe, a message goes to
//!   the call under way when there is exactly one request under way and it is that call's,
//!   and to nobody otherwise: never to a call that might be someone else's.
//!
//! Each relayed message names the upstream in its `logger` (`alias`, or `alias/logger` when
//! the server named one).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use larkgate_platform::Conversation;
use rmcp::RoleClient;
#[allow(deprecated)] // Logging is deprecated in the 2026-07-28 revision, but still in it.
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{
    ClientNotification, ClientRequest, JsonRpcMessage, NotificationMetaObject,
    ProgressNotificationParam, ProgressToken, RequestId, ServerNotification,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::http::REQUEST_META_KEY;

/// The most reports kept for calls not routed yet.
pub(super) const MAX_EARLY: usize = 64;

/// The routes of one upstream connection.
#[derive(Debug, Default)]
pub(super) struct Routes {
    calls: HashMap<ProgressToken, Conversation>,
    early: VecDeque<ProgressNotificationParam>,
    /// The calls that asked for log messages, by their request's id.
    logs: HashMap<RequestId, Conversation>,
    /// Log messages about a request under way whose call is not routed yet (at most
    /// [`MAX_EARLY`], oldest dropped first).
    #[allow(deprecated)]
    early_logs: VecDeque<(RequestId, LoggingMessageNotificationParam)>,
    /// Requests sent and not answered yet (for standard input and output, whose messages
    /// cannot say which one they are about).
    pending: HashSet<RequestId>,
    /// Whether the transport marks each log message with its request ([`REQUEST_META_KEY`]).
    marked: bool,
    /// The upstream's alias, which its log messages name.
    alias: Option<String>,
}

/// A call's route, removed when it is dropped (the call answered, failed or was abandoned).
#[derive(Debug)]
pub(super) struct Route {
    routes: Arc<Mutex<Routes>>,
    token: ProgressToken,
    request: RequestId,
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut table = lock(&self.routes);
        table.calls.remove(&self.token);
        table.logs.remove(&self.request);
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

/// Routes the reports of the call sent with `token` as request `request` to `conversation`,
/// with those that came before, and its log messages (when it asked for them), until the
/// route is dropped.
pub(super) fn route(
    routes: &Arc<Mutex<Routes>>,
    token: ProgressToken,
    request: RequestId,
    conversation: Conversation,
) -> Route {
    #[allow(deprecated)]
    let mut early_logs = Vec::new();
    let waiting: Vec<ProgressNotificationParam> = {
        let mut table = lock(routes);
        if conversation.log_level().is_some() {
            table.logs.insert(request.clone(), conversation.clone());
            let (theirs, others): (VecDeque<_>, VecDeque<_>) =
                std::mem::take(&mut table.early_logs)
                    .into_iter()
                    .partition(|(r, _)| *r == request);
            table.early_logs = others;
            let alias = table.alias.clone();
            early_logs.extend(theirs.into_iter().map(|(_, m)| (alias.clone(), m)));
        }
        if !conversation.wants_progress() {
            Vec::new()
        } else {
            let (theirs, others): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut table.early)
                .into_iter()
                .partition(|r| r.progress_token == token);
            table.early = others;
            table.calls.insert(token.clone(), conversation.clone());
            theirs.into()
        }
    };
    relay(&conversation, waiting);
    for (alias, message) in early_logs {
        say(&conversation, alias, &message);
    }
    Route {
        routes: Arc::clone(routes),
        token,
        request,
    }
}

/// Names upstream `alias` in the log messages these routes relay.
pub(super) fn speaking_for(routes: &Mutex<Routes>, alias: &str) {
    lock(routes).alias = Some(alias.to_owned());
}

/// Marks the routes of a transport that says which request each log message is about.
pub(super) fn marked(routes: &Mutex<Routes>) {
    lock(routes).marked = true;
}

/// A log message from the server: to the conversation of the call it is about (see the
/// module documentation), or to nobody. `meta` is the message's `_meta` (which rmcp keeps
/// beside its parameters).
#[allow(deprecated)]
pub(super) fn log(
    routes: &Mutex<Routes>,
    message: &LoggingMessageNotificationParam,
    meta: Option<&NotificationMetaObject>,
) {
    let (conversation, alias) = {
        let mut table = lock(routes);
        let request = if table.marked {
            meta.or(message.meta.as_ref())
                .and_then(|meta| meta.get(REQUEST_META_KEY))
                .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok())
        } else if table.pending.len() == 1 {
            table.pending.iter().next().cloned()
        } else {
            None
        };
        let Some(request) = request else {
            tracing::trace!("an upstream's log message is about no call");
            return;
        };
        match table.logs.get(&request) {
            Some(conversation) => (conversation.clone(), table.alias.clone()),
            None => {
                // Its call may not be routed yet: it is kept until then, if it is under way.
                if table.pending.contains(&request) {
                    if table.early_logs.len() >= MAX_EARLY {
                        table.early_logs.pop_front();
                    }
                    table.early_logs.push_back((request, message.clone()));
                }
                return;
            }
        }
    };
    say(&conversation, alias, message);
}

/// Tells `conversation` an upstream's log message, naming the upstream `alias` in its logger.
#[allow(deprecated)]
fn say(
    conversation: &Conversation,
    alias: Option<String>,
    message: &LoggingMessageNotificationParam,
) {
    let logger = match (alias, &message.logger) {
        (Some(alias), Some(logger)) => format!("{alias}/{logger}"),
        (Some(alias), None) => alias,
        // larkgate's own server, relayed as it is (`larkgate stdio`).
        (None, Some(logger)) => logger.clone(),
        (None, None) => String::new(),
    };
    conversation.log(message.level, &logger, message.data.clone());
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
        match &item {
            // A subscription's request stays open for the life of the connection, and is
            // about no call.
            JsonRpcMessage::Request(request)
                if !matches!(
                    request.request,
                    ClientRequest::SubscriptionsListenRequest(_)
                ) =>
            {
                lock(&self.routes).pending.insert(request.id.clone());
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    lock(&self.routes).pending.remove(id);
                }
            }
            _ => {}
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        match &message {
            JsonRpcMessage::Notification(notification) => match &notification.notification {
                ServerNotification::ProgressNotification(progress) => {
                    report(&self.routes, progress.params.clone());
                }
                #[allow(deprecated)]
                ServerNotification::LoggingMessageNotification(message) => {
                    let meta = message.extensions.get::<NotificationMetaObject>();
                    log(&self.routes, &message.params, meta);
                }
                _ => {}
            },
            JsonRpcMessage::Response(response) => {
                lock(&self.routes).pending.remove(&response.id);
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    lock(&self.routes).pending.remove(id);
                }
            }
            _ => {}
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
        let first = route(&routes, token(1), NumberOrString::Number(1), one.clone());
        let second = route(&routes, token(2), NumberOrString::Number(2), two.clone());
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

    #[allow(deprecated)]
    fn message(text: &str, request: Option<i64>) -> LoggingMessageNotificationParam {
        let mut message =
            LoggingMessageNotificationParam::new(rmcp::model::LoggingLevel::Info, text.into());
        if let Some(request) = request {
            let mut meta = rmcp::model::NotificationMetaObject::default();
            meta.insert(REQUEST_META_KEY.to_owned(), request.into());
            message.meta = Some(meta);
        }
        message
    }

    #[allow(deprecated)]
    fn log_of(routes: &Mutex<Routes>, message: &LoggingMessageNotificationParam) {
        let mut bare = message.clone();
        let meta = bare.meta.take();
        // As rmcp hands it over: the `_meta` beside the parameters.
        log(routes, &bare, meta.as_ref());
    }

    #[allow(deprecated)]
    fn listening() -> (Conversation, larkgate_platform::conversation::Outbox) {
        Conversation::open_within(
            None,
            Some(rmcp::model::LoggingLevel::Debug),
            Default::default(),
            &Conversation::none(),
        )
    }

    /// Over HTTP a message reaches the call its stream belongs to; over stdio only the one
    /// call under way, and nobody when two are.
    #[tokio::test]
    async fn log_messages_reach_only_the_call_they_are_about() {
        let routes = Arc::new(Mutex::new(Routes::default()));
        marked(&routes);
        let (one, _one) = listening();
        let (two, _two) = listening();
        let id = |n| NumberOrString::Number(n);
        let first = route(&routes, token(1), id(1), one.clone());
        let _second = route(&routes, token(2), id(2), two.clone());
        log_of(&routes, &message("for one", Some(1)));
        log_of(&routes, &message("for two", Some(2)));
        log_of(&routes, &message("for two", Some(2)));
        // Unmarked (the session's own stream), or for a call not under way: nobody.
        log_of(&routes, &message("nobody's", None));
        log_of(&routes, &message("nobody's", Some(9)));
        assert_eq!(one.log_counts(), (1, 0));
        assert_eq!(two.log_counts(), (2, 0));
        drop(first);
        log_of(&routes, &message("too late", Some(1)));
        assert_eq!(one.log_counts(), (1, 0));

        // Standard input and output: the marks mean nothing there.
        let routes = Arc::new(Mutex::new(Routes::default()));
        let (one, _one) = listening();
        let (two, _two) = listening();
        lock(&routes).pending.insert(id(1));
        let first = route(&routes, token(1), id(1), one.clone());
        log_of(&routes, &message("the only call", Some(2)));
        assert_eq!(one.log_counts(), (1, 0));
        lock(&routes).pending.insert(id(2));
        let _second = route(&routes, token(2), id(2), two.clone());
        log_of(&routes, &message("whose?", None));
        assert_eq!((one.log_counts(), two.log_counts()), ((1, 0), (0, 0)));
        drop(first);
        lock(&routes).pending.remove(&id(1));
        // A message before its call is routed waits for it.
        let (three, _three) = listening();
        lock(&routes).pending.remove(&id(2));
        lock(&routes).pending.insert(id(3));
        log_of(&routes, &message("early", None));
        let _third = route(&routes, token(3), id(3), three.clone());
        assert_eq!(three.log_counts(), (1, 0));
    }
}
