//! What a call says to the client that made it while it runs, and how that client's
//! cancellation reaches the call.
//!
//! A client that calls a tool may ask to hear its progress (a `progressToken` in the
//! request's `_meta`) and may cancel it (`notifications/cancelled`, or on 2026-07-28 by closing
//! the request's stream: rmcp cancels the request's token either way). The edge opens a
//! [`Conversation`] for each call ([`Conversation::open`]) and hands it down the pipeline in
//! the call's [`crate::CallContext`]; a handler that reaches further (an upstream's tool) says
//! through it what it hears, and stops when it is cancelled.
//!
//! # Threat model
//!
//! What is said comes from an upstream server, which is not trusted, and goes to a client:
//!
//! - **Bounded.** At most [`MAX_PROGRESS`] progress notifications are relayed per call, each
//!   message cut to [`MAX_MESSAGE_BYTES`]; a notification that would not
//!   increase the progress (the protocol requires every one to) is not relayed. What is not
//!   relayed is counted, and the count is logged when the call ends.
//! - **Never after the answer.** The edge relays what is said in the task that answers the
//!   call ([`Outbox::carry`]), sends what is queued before the answer, and closes the
//!   conversation then: a notification that arrives after it is dropped.
//! - **Never blocking.** Saying something never waits for the client: a full queue drops the
//!   notification (counted), so a slow client cannot hold up an upstream's connection, which
//!   other calls share.
//! - **Only to the caller who asked.** The notification carries the client's own
//!   `progressToken`, never the one larkgate sent upstream; a client that sent none hears
//!   nothing.
//!
//! Log messages (`notifications/message`) are said the same way, to a client that asked for
//! them (a level set by `logging/setLevel` on 2025-11-25, the request's
//! `io.modelcontextprotocol/logLevel` on 2026-07-28), at that level or above: at most
//! [`MAX_LOGS`] a call, each message's data cut to [`MAX_LOG_BYTES`] of JSON, its `logger`
//! naming where it comes from (an upstream's alias, or `larkgate`: no upstream can speak as
//! larkgate). When some were not relayed, the client is told how many in one last message
//! before the answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[allow(deprecated)] // Logging is deprecated in the 2026-07-28 revision, but still in it.
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::bounded::{MAX_MESSAGE_BYTES, cut};

mod asking;
pub mod rounds;

pub use asking::{Accepts, Kind, MAX_OPEN, Unasked, Witness, safe_url};

/// The most progress notifications relayed to a client for one call.
pub const MAX_PROGRESS: u32 = 1000;

/// The most log messages relayed to a client for one call.
pub const MAX_LOGS: u32 = 100;

/// The most bytes of one log message's data, as JSON, relayed; longer data is cut (and said
/// to be).
pub const MAX_LOG_BYTES: usize = 8 * 1024;

/// The logger larkgate's own messages name.
pub const LARKGATE_LOGGER: &str = "larkgate";

/// The level of log messages a session's client asked for with `logging/setLevel`
/// (2025-11-25; on 2026-07-28 each request says its own, in its `_meta`), shared by the
/// session's handlers.
#[derive(Clone, Debug, Default)]
#[allow(deprecated)]
pub struct SessionLogLevel(Arc<std::sync::Mutex<Option<LoggingLevel>>>);

#[allow(deprecated)]
impl SessionLogLevel {
    /// The level from now on (`logging/setLevel`).
    pub fn set(&self, level: LoggingLevel) {
        *self.lock() = Some(level);
    }

    /// The level of the request whose `_meta` is `meta`: its own, else the session's; `None`:
    /// its client asked for no log messages.
    pub fn of(&self, meta: &rmcp::model::RequestMetaObject) -> Option<LoggingLevel> {
        meta.log_level().or_else(|| *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LoggingLevel>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How many notifications wait to be sent to the client at most; past that they are dropped.
const QUEUE: usize = 64;

/// A call's conversation with the client that made it; [`Conversation::none`] for a call no
/// client waits on (the command line's `call`), which says nothing and is never cancelled.
#[derive(Clone, Default)]
pub struct Conversation(Option<Arc<Inner>>);

struct Inner {
    /// The client's own token, when it asked for progress.
    progress_token: Option<ProgressToken>,
    outbox: mpsc::Sender<Said>,
    cancelled: CancellationToken,
    /// The conversation this one is inside (a script's host call, inside the call that
    /// started the run): its cancellation is this one's too.
    within: Conversation,
    /// Whether the call has answered: nothing more is relayed.
    closed: AtomicBool,
    relayed: AtomicU32,
    /// What was not relayed: over the limit, not increasing, the queue full, or too late.
    dropped: AtomicU32,
    /// The last progress relayed, as `f64` bits (0 before any).
    last_progress: AtomicU64,
    /// What an upstream's progress is added to, as `f64` bits: the progress larkgate itself
    /// told before the upstream's first (an approval's wait), so that the client's progress
    /// still increases.
    base: AtomicU64,
    /// Whether an upstream's progress has been relayed (and `base` fixed).
    relaying: AtomicBool,
    /// The least severe log messages the client asked to hear; `None`: none.
    #[allow(deprecated)]
    log_level: Option<LoggingLevel>,
    logs_relayed: AtomicU32,
    /// Log messages not relayed: over the limit, the queue full, or too late.
    logs_dropped: AtomicU32,
    /// What the client accepts being asked ([`asking`]).
    accepts: Accepts,
    /// What the caller's roles do not let upstreams ask them in this call (see
    /// [`Conversation::bar`]).
    barred: std::sync::Mutex<Accepts>,
    /// Questions for the client, sent by the edge ([`Outbox::carry`]).
    asks: mpsc::Sender<asking::Ask>,
    /// Questions asked and not answered yet.
    open_questions: AtomicU32,
    /// Told each time a question opens or closes (see [`Conversation::questions`]).
    question_changes: tokio::sync::watch::Sender<()>,
    /// Who is told of each question asked (the journal, which audits them).
    witness: std::sync::Mutex<Option<Arc<dyn Witness>>>,
    /// Cancelled when the client's end of the call's response is gone (over HTTP).
    response_gone: std::sync::OnceLock<CancellationToken>,
}

/// The client's end of an HTTP request's response: cancelled when the response's body is
/// dropped, sent whole or because the client went away. The edge puts one into each request's
/// extensions; a question to the client of a call whose response is gone is not waited for
/// ([`asking`]). Going away does not cancel the call itself: a 2025-11-25 client may come back
/// for the rest of its stream.
#[derive(Clone, Debug, Default)]
pub struct ResponseGone(pub CancellationToken);

/// One thing said to the client.
#[derive(Debug)]
#[allow(deprecated)]
enum Said {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// What a conversation has queued for its client, carried by the edge: see [`Outbox::carry`].
pub struct Outbox {
    queue: mpsc::Receiver<Said>,
    asks: mpsc::Receiver<asking::Ask>,
    conversation: Conversation,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Conversation(none)"),
            Some(inner) => f
                .debug_struct("Conversation")
                .field("progress", &inner.progress_token.is_some())
                .field("relayed", &inner.relayed.load(Ordering::Relaxed))
                .field("dropped", &inner.dropped.load(Ordering::Relaxed))
                .finish(),
        }
    }
}

impl Conversation {
    /// A call nobody waits on: nothing said is heard, and it is never cancelled.
    pub fn none() -> Self {
        Conversation(None)
    }

    /// The conversation of a call whose client sent `progress_token` (if it wants progress)
    /// and cancels it through `cancelled`; the edge carries the [`Outbox`].
    pub fn open(
        progress_token: Option<ProgressToken>,
        cancelled: CancellationToken,
    ) -> (Conversation, Outbox) {
        Conversation::open_within(
            progress_token,
            None,
            Accepts::NOTHING,
            cancelled,
            &Conversation::none(),
        )
    }

    /// [`Conversation::open`] for a call whose client asked for log messages at `log_level`
    /// and above (`None`: none; inside `within`, the level of the call it is inside) and
    /// accepts being asked what `accepts` says (inside `within`, nothing: see [`asking`]),
    /// made inside `within`'s (a script's host call inside the call that started the run):
    /// cancelled when either is.
    #[allow(deprecated)]
    pub fn open_within(
        progress_token: Option<ProgressToken>,
        log_level: Option<LoggingLevel>,
        accepts: Accepts,
        cancelled: CancellationToken,
        within: &Conversation,
    ) -> (Conversation, Outbox) {
        let log_level = log_level.or_else(|| within.log_level());
        let (outbox, queue) = mpsc::channel(QUEUE);
        let (asks, asked) = mpsc::channel(MAX_OPEN as usize);
        let conversation = Conversation(Some(Arc::new(Inner {
            progress_token,
            outbox,
            cancelled,
            within: within.clone(),
            closed: AtomicBool::new(false),
            relayed: AtomicU32::new(0),
            dropped: AtomicU32::new(0),
            last_progress: AtomicU64::new(0),
            base: AtomicU64::new(0),
            relaying: AtomicBool::new(false),
            log_level,
            logs_relayed: AtomicU32::new(0),
            logs_dropped: AtomicU32::new(0),
            accepts,
            barred: std::sync::Mutex::new(Accepts::NOTHING),
            asks,
            open_questions: AtomicU32::new(0),
            question_changes: tokio::sync::watch::Sender::new(()),
            witness: std::sync::Mutex::new(None),
            response_gone: std::sync::OnceLock::new(),
        })));
        let outbox = Outbox {
            queue,
            asks: asked,
            conversation: conversation.clone(),
        };
        (conversation, outbox)
    }

    /// Has the questions of the call stop waiting when `gone` is (see [`ResponseGone`]).
    pub fn answered_through(&self, gone: &ResponseGone) {
        if let Some(inner) = &self.0 {
            let _ = inner.response_gone.set(gone.0.clone());
        }
    }

    /// Whether no client waits on the call ([`Conversation::none`]).
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Whether the client asked to hear the call's progress.
    pub fn wants_progress(&self) -> bool {
        self.0.as_ref().is_some_and(|i| i.progress_token.is_some())
    }

    /// Tells the client the call's progress (as an upstream reported it), within the bounds
    /// in the module documentation; never waits.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(inner) = &self.0 else {
            return;
        };
        let Some(token) = &inner.progress_token else {
            return;
        };
        let last = f64::from_bits(inner.last_progress.load(Ordering::Relaxed));
        let increases = progress.is_finite()
            && (progress > last || inner.relayed.load(Ordering::Relaxed) == 0 && progress >= 0.0);
        if inner.closed.load(Ordering::Relaxed)
            || !increases
            || inner.relayed.load(Ordering::Relaxed) >= MAX_PROGRESS
        {
            inner.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut said = ProgressNotificationParam::new(token.clone(), progress);
        said.total = total.filter(|t| t.is_finite());
        said.message = message.map(|m| cut(m, MAX_MESSAGE_BYTES).into_owned());
        match inner.outbox.try_send(Said::Progress(said)) {
            Ok(()) => {
                inner.relayed.fetch_add(1, Ordering::Relaxed);
                inner
                    .last_progress
                    .store(progress.to_bits(), Ordering::Relaxed);
            }
            Err(_) => {
                inner.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Relays an upstream's progress report: as [`Conversation::progress`], on top of what
    /// larkgate itself told before it (an approval's wait), so that what the client hears
    /// keeps increasing.
    pub fn relay_progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(inner) = &self.0 else {
            return;
        };
        if !inner.relaying.swap(true, Ordering::Relaxed) {
            let told = inner.last_progress.load(Ordering::Relaxed);
            inner.base.store(told, Ordering::Relaxed);
        }
        let base = f64::from_bits(inner.base.load(Ordering::Relaxed));
        self.progress(base + progress, total.map(|t| base + t), message);
    }

    /// Starts a new phase of the progress relayed: the next [`Conversation::relay_progress`]
    /// adds to what has been told so far (a script's next host call, whose upstream counts
    /// from the start again).
    pub fn rebase(&self) {
        if let Some(inner) = &self.0 {
            inner.relaying.store(false, Ordering::Relaxed);
        }
    }

    /// The least severe log messages the client asked to hear; `None`: none.
    #[allow(deprecated)]
    pub fn log_level(&self) -> Option<LoggingLevel> {
        self.0.as_ref().and_then(|i| i.log_level)
    }

    /// Tells the client a log message from `logger` (an upstream's alias, or
    /// [`LARKGATE_LOGGER`]), when it asked to hear messages of `level`, within the bounds in
    /// the module documentation; never waits.
    #[allow(deprecated)]
    pub fn log(&self, level: LoggingLevel, logger: &str, data: serde_json::Value) {
        let Some(inner) = &self.0 else {
            return;
        };
        let Some(wanted) = inner.log_level else {
            return;
        };
        if severity(level) < severity(wanted) {
            return;
        }
        if inner.closed.load(Ordering::Relaxed)
            || inner.logs_relayed.load(Ordering::Relaxed) >= MAX_LOGS
        {
            inner.logs_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut said = LoggingMessageNotificationParam::new(level, bounded_data(data));
        said.logger = Some(cut(logger, 200).into_owned());
        match inner.outbox.try_send(Said::Log(said)) {
            Ok(()) => {
                inner.logs_relayed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                inner.logs_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Finishes when the client cancels the call; never for a call nobody waits on.
    pub async fn cancelled(&self) {
        match &self.0 {
            Some(inner) => {
                tokio::select! {
                    () = inner.cancelled.cancelled() => {}
                    () = Box::pin(inner.within.cancelled()) => {}
                }
            }
            None => std::future::pending().await,
        }
    }

    /// Whether the client has cancelled the call.
    pub fn is_cancelled(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|i| i.cancelled.is_cancelled() || i.within.is_cancelled())
    }

    /// How many log messages were relayed and how many were not, so far (those below the
    /// client's level are neither).
    pub fn log_counts(&self) -> (u32, u32) {
        self.0.as_ref().map_or((0, 0), |i| {
            (
                i.logs_relayed.load(Ordering::Relaxed),
                i.logs_dropped.load(Ordering::Relaxed),
            )
        })
    }

    /// How many notifications were relayed and how many were not, so far.
    pub fn counts(&self) -> (u32, u32) {
        self.0.as_ref().map_or((0, 0), |i| {
            (
                i.relayed.load(Ordering::Relaxed),
                i.dropped.load(Ordering::Relaxed),
            )
        })
    }
}

impl Outbox {
    /// Runs `call`, sending what its conversation says to `peer` as it is said, in this task
    /// (the task answering the request, so that what is sent rides the request's own stream
    /// where the transport has one), and what is still queued when `call` finishes, before
    /// its answer; then closes the conversation.
    #[allow(deprecated)]
    pub async fn carry<F: Future>(mut self, peer: &Peer<RoleServer>, call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        let mut open = true;
        let mut asking = true;
        // Questions sent to the client and not answered: abandoned (their askers told the
        // client did not answer) when the call ends.
        let mut questions = futures::stream::FuturesUnordered::new();
        let output = loop {
            tokio::select! {
                biased;
                said = self.queue.recv(), if open => match said {
                    Some(said) => send(peer, said).await,
                    None => open = false,
                },
                ask = self.asks.recv(), if asking => match ask {
                    Some(asking::Ask { question, answer }) => questions.push(async move {
                        // In this task, so that it rides the call's own stream.
                        let _ = answer.send(peer.send_request(question).await);
                    }),
                    None => asking = false,
                },
                Some(()) = futures::StreamExt::next(&mut questions), if !questions.is_empty() => {}
                output = &mut call => break output,
            }
        };
        drop(questions);
        self.finish(peer).await;
        output
    }

    /// Closes the conversation once its call has answered: what is still queued is sent to
    /// `peer` before the answer, with how many log messages were not relayed.
    #[allow(deprecated)]
    async fn finish(&mut self, peer: &Peer<RoleServer>) {
        if let Some(inner) = &self.conversation.0 {
            inner.closed.store(true, Ordering::Relaxed);
        }
        while let Ok(said) = self.queue.try_recv() {
            send(peer, said).await;
        }
        if let Some(inner) = &self.conversation.0 {
            let logs_dropped = inner.logs_dropped.load(Ordering::Relaxed);
            if logs_dropped > 0 {
                let mut told = LoggingMessageNotificationParam::new(
                    LoggingLevel::Warning,
                    serde_json::Value::String(format!(
                        "{logs_dropped} log messages of this call were not relayed (at most \
                         {MAX_LOGS} a call)"
                    )),
                );
                told.logger = Some(LARKGATE_LOGGER.to_owned());
                send(peer, Said::Log(told)).await;
            }
        }
        let (relayed, dropped) = self.conversation.counts();
        if dropped > 0 {
            tracing::warn!(
                relayed,
                dropped,
                "a call's progress was not all relayed to its client (at most {MAX_PROGRESS} a \
                 call, each increasing, none after the answer)"
            );
        }
    }
}

async fn send(peer: &Peer<RoleServer>, said: Said) {
    match said {
        Said::Progress(progress) => {
            if let Err(error) = peer.notify_progress(progress).await {
                tracing::debug!(%error, "a progress notification could not be sent to the client");
            }
        }
        Said::Log(message) =>
        {
            #[allow(deprecated)]
            if let Err(error) = peer.notify_logging_message(message).await {
                tracing::debug!(%error, "a log message could not be sent to the client");
            }
        }
    }
}

/// How severe `level` is: the higher, the more (RFC 5424's order, which the protocol's
/// levels follow).
#[allow(deprecated)]
pub fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A log message's data, as it came when its JSON is at most [`MAX_LOG_BYTES`]; otherwise
/// the start of its JSON, as a string saying it was cut (see [`cut`]).
fn bounded_data(data: serde_json::Value) -> serde_json::Value {
    let text = data.to_string();
    if text.len() <= MAX_LOG_BYTES {
        return data;
    }
    serde_json::Value::String(cut(&text, MAX_LOG_BYTES).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::String("client-7".into()))
    }

    fn drained(outbox: &mut Outbox) -> Vec<ProgressNotificationParam> {
        let mut said = Vec::new();
        while let Ok(Said::Progress(p)) = outbox.queue.try_recv() {
            said.push(p);
        }
        said
    }

    #[test]
    fn progress_is_relayed_with_the_client_s_token_increasing_and_bounded() {
        let (conversation, mut outbox) =
            Conversation::open(Some(token()), CancellationToken::new());
        conversation.progress(0.0, Some(3.0), Some("starting"));
        conversation.progress(1.0, Some(3.0), None);
        // Not increasing, or not a number: not relayed.
        conversation.progress(1.0, Some(3.0), None);
        conversation.progress(0.5, None, None);
        conversation.progress(f64::NAN, None, None);
        conversation.progress(2.0, Some(f64::INFINITY), Some(&"x".repeat(10_000)));
        let said = drained(&mut outbox);
        assert_eq!(
            said.iter().map(|p| p.progress).collect::<Vec<_>>(),
            [0.0, 1.0, 2.0]
        );
        assert!(said.iter().all(|p| p.progress_token == token()));
        assert_eq!(said[0].message.as_deref(), Some("starting"));
        assert_eq!(said[2].total, None);
        assert!(said[2].message.as_ref().unwrap().len() <= MAX_MESSAGE_BYTES + 128);
        assert_eq!(conversation.counts(), (3, 3));
    }

    #[test]
    fn a_flood_is_cut_at_the_limit_and_a_full_queue_drops_without_waiting() {
        let (conversation, mut outbox) =
            Conversation::open(Some(token()), CancellationToken::new());
        // Nobody drains: the queue fills, and the rest is dropped at once.
        for n in 1..=(QUEUE as u32 + 10) {
            conversation.progress(f64::from(n), None, None);
        }
        assert_eq!(conversation.counts(), (QUEUE as u32, 10));
        drained(&mut outbox);
        for n in 0..(2 * MAX_PROGRESS) {
            conversation.progress(f64::from(1000 + n), None, None);
            drained(&mut outbox);
        }
        assert_eq!(conversation.counts().0, MAX_PROGRESS);
    }

    #[test]
    fn a_client_that_asked_for_no_progress_hears_none_and_a_call_nobody_waits_on_says_nothing() {
        let (conversation, mut outbox) = Conversation::open(None, CancellationToken::new());
        conversation.progress(1.0, None, None);
        assert!(drained(&mut outbox).is_empty());
        assert!(!conversation.wants_progress());
        let none = Conversation::none();
        none.progress(1.0, None, None);
        assert_eq!(none.counts(), (0, 0));
        assert!(!none.is_cancelled());
    }

    #[test]
    fn an_upstream_s_progress_after_larkgate_s_own_still_increases() {
        let (conversation, mut outbox) =
            Conversation::open(Some(token()), CancellationToken::new());
        // An approval's wait, told in seconds; then the upstream counts from 1 again.
        conversation.progress(0.0, Some(60.0), Some("waiting for an approval"));
        conversation.progress(15.0, Some(60.0), Some("waiting for an approval"));
        conversation.relay_progress(1.0, Some(2.0), None);
        conversation.relay_progress(2.0, Some(2.0), None);
        let said = drained(&mut outbox);
        assert_eq!(
            said.iter()
                .map(|p| (p.progress, p.total))
                .collect::<Vec<_>>(),
            [
                (0.0, Some(60.0)),
                (15.0, Some(60.0)),
                (16.0, Some(17.0)),
                (17.0, Some(17.0))
            ]
        );
        // Without a wait before, an upstream's progress is relayed as it was reported.
        let (conversation, mut outbox) =
            Conversation::open(Some(token()), CancellationToken::new());
        conversation.relay_progress(1.0, Some(4.0), Some("1 of 4"));
        let said = drained(&mut outbox);
        assert_eq!((said[0].progress, said[0].total), (1.0, Some(4.0)));
    }

    #[tokio::test]
    async fn cancellation_reaches_the_call_and_the_calls_made_inside_it() {
        let token = CancellationToken::new();
        let (conversation, _outbox) = Conversation::open(None, token.clone());
        let (inside, _inside_outbox) = Conversation::open_within(
            None,
            None,
            Accepts::NOTHING,
            CancellationToken::new(),
            &conversation,
        );
        assert!(!conversation.is_cancelled() && !inside.is_cancelled());
        token.cancel();
        conversation.cancelled().await;
        inside.cancelled().await;
        assert!(conversation.is_cancelled() && inside.is_cancelled());
    }

    #[test]
    #[allow(deprecated)]
    fn log_messages_at_the_client_s_level_are_relayed_bounded_and_cut() {
        let (conversation, mut outbox) = Conversation::open_within(
            None,
            Some(LoggingLevel::Warning),
            Accepts::NOTHING,
            CancellationToken::new(),
            &Conversation::none(),
        );
        conversation.log(LoggingLevel::Info, "weather", "below the level".into());
        conversation.log(LoggingLevel::Error, "weather", "an error".into());
        conversation.log(
            LoggingLevel::Warning,
            &"l".repeat(1000),
            serde_json::json!({"big": "x".repeat(3 * MAX_LOG_BYTES)}),
        );
        let mut said = Vec::new();
        while let Ok(Said::Log(m)) = outbox.queue.try_recv() {
            said.push(m);
        }
        assert_eq!(said.len(), 2);
        assert_eq!(said[0].data, "an error");
        assert_eq!(said[0].logger.as_deref(), Some("weather"));
        let cut = said[1].data.as_str().expect("cut to a string");
        assert!(cut.len() <= MAX_LOG_BYTES + 128, "{}", cut.len());
        assert!(said[1].logger.as_ref().unwrap().len() <= 200 + 128);
        assert_eq!(conversation.log_counts(), (2, 0));
        // A flood: at most MAX_LOGS, the rest counted.
        for n in 0..(MAX_LOGS + 20) {
            conversation.log(LoggingLevel::Error, "weather", n.into());
            while outbox.queue.try_recv().is_ok() {}
        }
        assert_eq!(conversation.log_counts(), (MAX_LOGS, 22));
        // A client that asked for no logs, and a conversation inside one that did.
        let (quiet, _) = Conversation::open(None, CancellationToken::new());
        quiet.log(LoggingLevel::Emergency, "weather", "x".into());
        assert_eq!(quiet.log_counts(), (0, 0));
        let (inside, _) = Conversation::open_within(
            None,
            None,
            Accepts::NOTHING,
            CancellationToken::new(),
            &conversation,
        );
        assert_eq!(inside.log_level(), Some(LoggingLevel::Warning));
    }
}
