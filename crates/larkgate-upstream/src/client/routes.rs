//! Where an upstream's progress reports go: the conversation of the call they are about,
//! found by the `progressToken` larkgate sent with that call (rmcp gives each request its
//! own), never by anything else the server says.
//!
//! A call that wants to hear its request's reports or log messages puts a [`Listener`] in
//! the request's extensions ([`listen`]); the transport ([`Observing`]) opens the call's
//! route from it as it sends the request, before a byte of it leaves, so nothing the server
//! says about the request can come before its route. Reports and messages are routed as the
//! transport receives them, in order with the answers: a call's last report is in its
//! conversation before its answer reaches the call. The route closes when the call's
//! [`Route`] is dropped (the call answered, failed or was abandoned); a report for a token
//! no open route holds (a finished call, a ping) is dropped.
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
//!
//! A question the server asks during a call (an elicitation, a sampling request) is routed
//! the same way ([`asked_about`]): over HTTP by the stream it came on (rmcp's transport says
//! which), over standard input and output only when one request is under way.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use larkgate_platform::Conversation;
use rmcp::RoleClient;
#[allow(deprecated)] // Logging is deprecated in the 2026-07-28 revision, but still in it.
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{
    ClientNotification, ClientRequest, GetExtensions, GetMeta, JsonRpcMessage,
    NotificationMetaObject, ProgressNotificationParam, ProgressToken, RequestId,
    ServerNotification,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::http::REQUEST_META_KEY;

/// The routes of one upstream connection.
#[derive(Debug, Default)]
pub(super) struct Routes {
    /// The calls, by their request's progress token (for their progress reports).
    calls: HashMap<ProgressToken, Listener>,
    /// The calls, by their request's id (for their log messages and questions).
    requests: HashMap<RequestId, Listener>,
    /// Requests sent and not answered yet (for standard input and output, whose messages
    /// cannot say which one they are about).
    pending: HashSet<RequestId>,
    /// Whether the transport marks each log message with its request ([`REQUEST_META_KEY`]).
    marked: bool,
    /// The upstream's alias, which its log messages name.
    alias: Option<String>,
}

/// A call's wish to hear what the server says about its request, carried in the request's
/// extensions (never sent) to the transport, which opens the route as it sends the request.
#[derive(Clone, Debug)]
pub(super) struct Listener {
    conversation: Conversation,
    /// Told of each progress report about the request (its round-trip timeout starts again).
    heard: Arc<tokio::sync::watch::Sender<()>>,
    /// Set, under the routes' lock, when the call's [`Route`] is dropped: a request the
    /// transport sends after its call ended opens no route.
    ended: Arc<AtomicBool>,
}

/// A call's route, closed when it is dropped (the call answered, failed or was abandoned).
#[derive(Debug)]
pub(super) struct Route {
    routes: Arc<Mutex<Routes>>,
    ended: Arc<AtomicBool>,
    heard: Arc<tokio::sync::watch::Sender<()>>,
}

impl Route {
    /// Told of each progress report the server sends about the call's request.
    pub(super) fn progress_heard(&self) -> tokio::sync::watch::Receiver<()> {
        self.heard.subscribe()
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut table = lock(&self.routes);
        self.ended.store(true, Ordering::SeqCst);
        // A connection has a route per call under way on it: a handful, or a few hundred.
        table
            .calls
            .retain(|_, l| !Arc::ptr_eq(&l.ended, &self.ended));
        table
            .requests
            .retain(|_, l| !Arc::ptr_eq(&l.ended, &self.ended));
    }
}

fn lock(routes: &Mutex<Routes>) -> std::sync::MutexGuard<'_, Routes> {
    // A poisoned lock means a panic elsewhere; the table itself is whole.
    routes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A listener for the request `conversation`'s call is about to send, to put in the
/// request's extensions, and the route it opens, which closes when dropped. The call hears
/// its request's progress reports if it wants them, and its log messages if it asked for
/// them.
pub(super) fn listen(routes: &Arc<Mutex<Routes>>, conversation: Conversation) -> (Listener, Route) {
    let ended = Arc::new(AtomicBool::new(false));
    let heard = Arc::new(tokio::sync::watch::Sender::new(()));
    (
        Listener {
            conversation,
            ended: Arc::clone(&ended),
            heard: Arc::clone(&heard),
        },
        Route {
            routes: Arc::clone(routes),
            ended,
            heard,
        },
    )
}

/// Opens the route of `listener`'s call, whose request `request` is being sent with
/// progress token `token` (unless its call has ended already).
fn open(
    table: &mut Routes,
    listener: &Listener,
    token: Option<ProgressToken>,
    request: &RequestId,
) {
    if listener.ended.load(Ordering::SeqCst) {
        return;
    }
    if let Some(token) = token {
        table.calls.insert(token, listener.clone());
    }
    table.requests.insert(request.clone(), listener.clone());
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
        let table = lock(routes);
        let request = if table.marked {
            meta.or(message.meta.as_ref())
                .and_then(|meta| meta.get(REQUEST_META_KEY))
                .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok())
        } else if table.pending.len() == 1 {
            table.pending.iter().next().cloned()
        } else {
            None
        };
        let Some(listener) = request.and_then(|request| table.requests.get(&request)) else {
            tracing::trace!("an upstream's log message is about no call that asked for it");
            return;
        };
        (listener.conversation.clone(), table.alias.clone())
    };
    say(&conversation, alias, message);
}

/// The conversation of the call a question from the server (an elicitation, a sampling
/// request) is about, if one is under way: over HTTP the call whose request's stream it came
/// on (`origin`, which rmcp's transport sets), over standard input and output the one call
/// under way (as for log messages).
pub(super) fn asked_about(
    routes: &Mutex<Routes>,
    origin: Option<&rmcp::service::InboundStreamOrigin>,
) -> Option<Conversation> {
    let table = lock(routes);
    let request = if table.marked {
        match origin? {
            rmcp::service::InboundStreamOrigin::OutboundRequest(request) => request.clone(),
            rmcp::service::InboundStreamOrigin::Unassociated => return None,
        }
    } else if table.pending.len() == 1 {
        table.pending.iter().next()?.clone()
    } else {
        return None;
    };
    match table.requests.get(&request) {
        Some(listener) => Some(listener.conversation.clone()),
        // A request under way that no conversation listens to: a call no client waits on.
        None => table.pending.contains(&request).then(Conversation::none),
    }
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

/// A report from the server: to its call's conversation, or to nobody.
pub(super) fn report(routes: &Mutex<Routes>, report: &ProgressNotificationParam) {
    let listener = {
        let table = lock(routes);
        match table.calls.get(&report.progress_token) {
            Some(listener) => listener.clone(),
            None => {
                tracing::trace!("an upstream's progress report is about no call under way");
                return;
            }
        }
    };
    // Outside the lock: relaying never waits, but it need not hold the table either.
    listener.heard.send_replace(());
    if listener.conversation.wants_progress() {
        listener.conversation.relay_progress(
            report.progress,
            report.total,
            report.message.as_deref(),
        );
    }
}

/// A client transport that opens each call's route as it sends the call's request, and
/// routes each progress report and log message it receives before passing it on.
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

/// What the transport notes of a message it sends: the request under way, with the route of
/// the call that listens to it, or a cancelled request no longer under way.
fn sending(routes: &Mutex<Routes>, item: &TxJsonRpcMessage<RoleClient>) {
    match item {
        // A subscription's request stays open for the life of the connection, and is about
        // no call.
        JsonRpcMessage::Request(request)
            if !matches!(
                request.request,
                ClientRequest::SubscriptionsListenRequest(_)
            ) =>
        {
            let mut table = lock(routes);
            table.pending.insert(request.id.clone());
            if let Some(listener) = request.request.extensions().get::<Listener>() {
                let token = request.request.get_meta().get_progress_token();
                open(&mut table, listener, token, &request.id);
            }
        }
        JsonRpcMessage::Notification(notification) => {
            if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                && let Some(id) = &cancelled.params.request_id
            {
                lock(routes).pending.remove(id);
            }
        }
        _ => {}
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Before the request is handed on: the server cannot say a word about it sooner.
        sending(&self.routes, &item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        match &message {
            JsonRpcMessage::Notification(notification) => match &notification.notification {
                ServerNotification::ProgressNotification(progress) => {
                    report(&self.routes, &progress.params);
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

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    fn said(token: ProgressToken, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(token, progress)
    }

    /// Sends request `n` (progress token `n`) through the transport's bookkeeping, as a call
    /// listening with `conversation`; the call's route.
    fn sent(routes: &Arc<Mutex<Routes>>, n: i64, conversation: &Conversation) -> Route {
        let (listener, route) = listen(routes, conversation.clone());
        send(routes, n, Some(listener));
        route
    }

    fn send(routes: &Mutex<Routes>, n: i64, listener: Option<Listener>) {
        let mut request = ClientRequest::PingRequest(Default::default());
        request.get_meta_mut().set_progress_token(token(n));
        if let Some(listener) = listener {
            request.extensions_mut().insert(listener);
        }
        sending(routes, &JsonRpcMessage::request(request, id(n)));
    }

    fn answered(routes: &Mutex<Routes>, n: i64) {
        lock(routes).pending.remove(&id(n));
    }

    #[tokio::test]
    async fn reports_reach_their_call_alone_and_none_after_it_ends() {
        let routes = Arc::new(Mutex::new(Routes::default()));
        let client = ProgressToken(NumberOrString::String("c".into()));
        let (one, _outbox_one) = Conversation::open(Some(client.clone()), Default::default());
        let (two, _outbox_two) = Conversation::open(Some(client), Default::default());
        let first = sent(&routes, 1, &one);
        let second = sent(&routes, 2, &two);
        report(&routes, &said(token(1), 1.0));
        report(&routes, &said(token(1), 2.0));
        report(&routes, &said(token(2), 1.0));
        // A token nobody sent: nobody.
        report(&routes, &said(token(9), 1.0));
        assert_eq!(one.counts(), (2, 0));
        assert_eq!(two.counts(), (1, 0));
        drop(first);
        // After its route is gone, a report of call 1 reaches nobody.
        report(&routes, &said(token(1), 3.0));
        assert_eq!(one.counts(), (2, 0));
        drop(second);
        let table = lock(&routes);
        assert!(table.calls.is_empty() && table.requests.is_empty());
    }

    /// A call that ended before the transport sent its request (cancelled while the request
    /// waited its turn) opens no route, and leaves nothing behind.
    #[tokio::test]
    async fn a_request_sent_after_its_call_ended_opens_no_route() {
        let routes = Arc::new(Mutex::new(Routes::default()));
        let client = ProgressToken(NumberOrString::String("c".into()));
        let (one, _outbox) = Conversation::open(Some(client), Default::default());
        let (listener, route) = listen(&routes, one.clone());
        drop(route);
        send(&routes, 1, Some(listener));
        report(&routes, &said(token(1), 1.0));
        assert_eq!(one.counts(), (0, 0));
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
            larkgate_platform::conversation::Accepts::NOTHING,
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
        let first = sent(&routes, 1, &one);
        let _second = sent(&routes, 2, &two);
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
        // A request whose call does not listen is under way, but its messages reach nobody.
        send(&routes, 3, None);
        log_of(&routes, &message("unasked", Some(3)));
        assert_eq!((one.log_counts(), two.log_counts()), ((1, 0), (2, 0)));

        // Standard input and output: the marks mean nothing there.
        let routes = Arc::new(Mutex::new(Routes::default()));
        let (one, _one) = listening();
        let (two, _two) = listening();
        let first = sent(&routes, 1, &one);
        log_of(&routes, &message("the only call", Some(2)));
        assert_eq!(one.log_counts(), (1, 0));
        let _second = sent(&routes, 2, &two);
        log_of(&routes, &message("whose?", None));
        assert_eq!((one.log_counts(), two.log_counts()), ((1, 0), (0, 0)));
        drop(first);
        answered(&routes, 1);
        log_of(&routes, &message("the only call now", None));
        assert_eq!((one.log_counts(), two.log_counts()), ((1, 0), (1, 0)));
        // A request nobody listens to, alone under way: its messages reach nobody.
        answered(&routes, 2);
        send(&routes, 3, None);
        log_of(&routes, &message("unasked", None));
        assert_eq!((one.log_counts(), two.log_counts()), ((1, 0), (1, 0)));
    }
}
