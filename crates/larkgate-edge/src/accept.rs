//! The accept loop of every listener `larkgate serve` opens (`/mcp`, and the operational
//! endpoints on `ops_listen`): HTTP/1.1 connections, each bounded in count, in time and in
//! header size, and shut down gracefully.
//!
//! ## Threat model
//!
//! Anyone who can reach the socket can open connections and send bytes as slowly as they like,
//! without a token: nothing here may depend on a request being authenticated.
//! - **Descriptor exhaustion.** At most [`SocketLimits::max_connections`] connections are open
//!   at once. The listener itself keeps accepting, so the process never runs out of
//!   descriptors because of one peer. At start, `serve` raises its soft open-file limit to the
//!   hard one and warns when the cap does not fit under it ([`make_room_for`]).
//! - **Holding the cap.** A connection that arrives when the cap is full makes room: the
//!   connection that has gone longest without a request in flight (open and silent, between
//!   requests, or dribbling a request head) is closed, oldest first, and the newcomer takes
//!   its place, so a flood of idle or slow sockets cannot keep clients out for the idle or
//!   header timeout. A connection serving a request (an event stream included) is never
//!   closed for this; when every connection is serving one, the newcomer is closed at once
//!   (the client sees the close, not a hang) and counted.
//! - **Slow headers (slowloris).** A connection with no request in flight must deliver a whole
//!   request head within [`SocketLimits::header_read_timeout`] of its first byte, else it is
//!   closed. Headers are capped at [`SocketLimits::max_header_bytes`] (hyper answers 431).
//! - **Idle connections.** A connection with no request in flight and no byte read for
//!   [`SocketLimits::idle_timeout`] is closed. A request in flight is not timed here: its body
//!   is read within the same idle timeout by [`super::json_rpc`], and the call itself is bounded
//!   by the pipeline's own limits (script wall time, upstream round trips), and an event stream
//!   sends keep-alive comments.
//! - **`TCP_NODELAY`** on every accepted socket: a 2025-11-25 session's answer is an event stream
//!   written in two writes, and without the option Nagle's algorithm holds the second until the
//!   client's delayed acknowledgement (about 40 ms on every call).
//!
//! At shutdown the listener is closed first, then each connection finishes the request it is
//! serving and closes (hyper's graceful shutdown); [`serve`] returns when the last one has.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tower::ServiceExt as _;

/// The bounds of one listener's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketLimits {
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// How long a connection may take to send a request head, from its first byte.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight and nothing read.
    pub idle_timeout: Duration,
    /// The largest request head (request line and headers) read, in bytes.
    pub max_header_bytes: usize,
}

impl Default for SocketLimits {
    fn default() -> Self {
        SocketLimits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
        }
    }
}

/// Descriptors kept free beside the connections: the store, the audit journal, script
/// workers' pipes, upstream connections, the listeners themselves.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises this process's soft limit on open files to its hard limit (as a server must, to hold
/// `connections` sockets besides its own files), and warns when even that leaves too little
/// room. Answers the soft limit in force.
pub fn make_room_for(connections: usize) -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut raised = limit;
    raised.current = limit.maximum.or(limit.current);
    if raised != limit
        && let Err(error) = setrlimit(Resource::Nofile, raised)
    {
        tracing::debug!(%error, "the open-file limit could not be raised");
        raised = limit;
    }
    let soft = raised.current?;
    let needed = connections as u64 + RESERVED_DESCRIPTORS;
    if soft < needed {
        tracing::warn!(
            open_files = soft,
            connections,
            "the open-file limit ({soft}) leaves too little room for server.max_connections \
             ({connections}) and larkgate's own files: raise it (`ulimit -n`, LimitNOFILE= in \
             systemd) to at least {needed}, or lower max_connections"
        );
    }
    Some(soft)
}

/// What a listener counts, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    /// Connections open now.
    pub open: Gauge,
    /// Connections closed on arrival because the cap was reached.
    pub refused: Counter,
    /// Connections closed for a slow request head or for idling.
    pub timed_out: Counter,
    /// Idle connections closed to make room for a new one when the cap was reached.
    pub evicted: Counter,
}

/// How long a connection that made room waits for the one it displaced to let its place go
/// (it closes at once; this bounds a stall that should never happen).
const DISPLACED_WAIT: Duration = Duration::from_secs(5);

/// The connections a listener holds, by the order in which they went without a request in
/// flight: who makes room when the cap is full.
#[derive(Debug, Default)]
struct Held {
    next: AtomicU64,
    connections: Mutex<HashMap<u64, Arc<Activity>>>,
}

impl Held {
    fn add(&self, activity: Arc<Activity>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, activity);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        // A panic while holding the map cannot leave it inconsistent: keep using it.
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the connection that has gone longest without a request in flight to close;
    /// whether there was one.
    fn evict_oldest_idle(&self) -> bool {
        let connections = self.lock();
        let oldest = connections
            .iter()
            .filter_map(|(id, activity)| activity.idle_since().map(|since| (since, *id, activity)))
            // Idle since the same instant: the one accepted first.
            .min_by_key(|(since, id, _)| (*since, *id));
        match oldest {
            Some((_, _, activity)) => activity.evict(),
            None => false,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` turns true, then lets each connection finish
/// its request and returns when all are closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: SocketLimits,
    metrics: ConnectionMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = Arc::new(limits);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let held = Arc::new(Held::default());
    let mut last_full_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stopping| *stopping) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, or a connection reset before it was accepted: the next
                // accept may succeed; a short pause keeps a persistent error from spinning.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = Arc::clone(&permits).try_acquire_owned().ok();
        if permit.is_none() {
            let made_room = held.evict_oldest_idle();
            if last_full_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                last_full_warning = Some(Instant::now());
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "the connection cap is reached; idle connections are closed, oldest first, \
                     to make room, and new ones are closed when every connection is serving"
                );
            }
            if made_room {
                metrics.evicted.inc();
            } else {
                metrics.refused.inc();
                drop(stream);
                continue;
            }
        }
        prepare(&stream);
        let (permits, held) = (Arc::clone(&permits), Arc::clone(&held));
        let connection = Connection {
            stream,
            accepted_at: Instant::now(),
            peer,
            app: app.clone(),
            limits: Arc::clone(&limits),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        };
        tokio::spawn(async move {
            let permit = match permit {
                Some(permit) => permit,
                // The displaced connection lets its place go as it closes.
                None => match tokio::time::timeout(DISPLACED_WAIT, permits.acquire_owned()).await {
                    Ok(Ok(permit)) => permit,
                    _ => return,
                },
            };
            connection.run(&held).await;
            drop(permit);
        });
    }
    drop(listener);
    // Every connection holds a permit until it has closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

/// Sets the options every accepted socket has: `TCP_NODELAY`.
fn prepare(stream: &TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::warn!(%error, "TCP_NODELAY could not be set on an accepted connection");
    }
}

/// One accepted connection, to be served once it has a place under the cap.
struct Connection {
    stream: TcpStream,
    /// When it was accepted: its age among the connections held counts from here, in the
    /// order they arrived, whenever its task first runs.
    accepted_at: Instant,
    peer: SocketAddr,
    app: axum::Router,
    limits: Arc<SocketLimits>,
    metrics: ConnectionMetrics,
    shutdown: watch::Receiver<bool>,
}

impl Connection {
    /// Served by hyper until it closes, times out, is displaced, or is shut down; among the
    /// connections `held` while it is open.
    async fn run(self, held: &Held) {
        let activity = Arc::new(Activity::since(self.accepted_at));
        let id = held.add(Arc::clone(&activity));
        self.serve(activity).await;
        held.remove(id);
    }

    async fn serve(self, activity: Arc<Activity>) {
        let Connection {
            stream,
            accepted_at: _,
            peer,
            app,
            limits,
            metrics,
            mut shutdown,
        } = self;
        metrics.open.inc();
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: Arc::clone(&activity),
        });
        let service = hyper_util::service::TowerToHyperService::new(Tracked {
            app,
            peer,
            activity: Arc::clone(&activity),
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .max_header_size(limits.max_header_bytes)
            // The head's time is bounded below, from its first byte, not from the moment the
            // connection starts waiting (hyper's own timer would also close idle connections).
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(None);
        let conn = builder.serve_connection(io, service);
        let mut conn = std::pin::pin!(conn);
        // One timer for the connection's life, moved when its deadline moves.
        let mut deadline = activity.deadline(&limits);
        let timer = tokio::time::sleep_until(deadline.into());
        let mut timer = std::pin::pin!(timer);
        let mut closing = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "a connection ended with an error");
                    }
                    break;
                }
                () = timer.as_mut() => {
                    if let Some(reason) = activity.expired(&limits) {
                        tracing::debug!(%peer, reason, "closing a connection");
                        metrics.timed_out.inc();
                        break;
                    }
                }
                () = activity.changed.notified() => {
                    if activity.evicted.load(Ordering::Acquire) && !closing {
                        tracing::debug!(%peer, "closing an idle connection to make room");
                        // Idle, it closes now; a request that began meanwhile is answered first.
                        if activity.in_flight.load(Ordering::Acquire) == 0 {
                            break;
                        }
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                _ = shutdown.wait_for(|stopping| *stopping), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            let next = activity.deadline(&limits);
            if next != deadline {
                deadline = next;
                timer.as_mut().reset(deadline.into());
            }
        }
        metrics.open.dec();
    }
}

/// What a connection's watchdog needs to know: requests in flight, when a byte was last read,
/// and when the head of the next request began to arrive.
#[derive(Debug)]
struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `start` of the last byte read or written.
    last_ms: AtomicU64,
    /// Milliseconds since `start` of the first byte of a request head not yet complete, or
    /// [`NO_HEAD`].
    head_ms: AtomicU64,
    /// Milliseconds since `start` of the moment it last had no request in flight (its start,
    /// or the end of its last request).
    idle_since_ms: AtomicU64,
    /// Set when the listener needs its place: it closes.
    evicted: AtomicBool,
    /// Woken when a head starts (its deadline is earlier than the idle one) and when it is
    /// evicted.
    changed: Notify,
}

const NO_HEAD: u64 = u64::MAX;

impl Activity {
    #[cfg(test)]
    fn new() -> Self {
        Activity::since(Instant::now())
    }

    /// The activity of a connection accepted at `start`.
    fn since(start: Instant) -> Self {
        Activity {
            start,
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            head_ms: AtomicU64::new(NO_HEAD),
            idle_since_ms: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn read(&self) {
        let now = self.now_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0
            && self
                .head_ms
                .compare_exchange(NO_HEAD, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.changed.notify_one();
        }
    }

    fn wrote(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A request head is complete and its request is being served. (The watchdog need not
    /// wake: at its next deadline it finds a request in flight and looks again later.)
    fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_ms.store(NO_HEAD, Ordering::Release);
    }

    /// A request's answer is complete (or abandoned). (The watchdog's deadline is then the
    /// idle one, never earlier than the one it sleeps on.)
    fn end(&self) {
        let now = self.now_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        self.idle_since_ms.store(now, Ordering::Release);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// Since when it has had no request in flight; `None` while it serves one, or once it
    /// was told to close. A request head arriving byte by byte does not count as a request:
    /// a slow sender is as idle as a silent one.
    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 || self.evicted.load(Ordering::Acquire) {
            return None;
        }
        Some(self.start + Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire)))
    }

    /// Tells the connection to close to make room; `false` if it already was.
    fn evict(&self) -> bool {
        let first = self
            .evicted
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if first {
            self.changed.notify_one();
        }
        first
    }

    /// When this connection is due to be closed if nothing happens before; with a request in
    /// flight, when to look again (a request in flight is never cut).
    fn deadline(&self, limits: &SocketLimits) -> Instant {
        let at = |ms: u64, timeout: Duration| self.start + Duration::from_millis(ms) + timeout;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return at(self.now_ms(), limits.idle_timeout);
        }
        match self.head_ms.load(Ordering::Acquire) {
            NO_HEAD => at(self.last_ms.load(Ordering::Relaxed), limits.idle_timeout),
            head => at(head, limits.header_read_timeout),
        }
    }

    /// Why this connection is to be closed now, if it is.
    fn expired(&self, limits: &SocketLimits) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        (Instant::now() >= self.deadline(limits)).then(|| {
            if self.head_ms.load(Ordering::Acquire) == NO_HEAD {
                "idle for longer than the idle timeout"
            } else {
                "its request head took longer than the header read timeout"
            }
        })
    }
}

/// The socket, noting every byte read and written in the connection's [`Activity`].
#[derive(Debug)]
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The application, counting each request as in flight until its answer's body is done, and
/// giving handlers the peer's address ([`ConnectInfo`]).
#[derive(Clone, Debug)]
struct Tracked {
    app: axum::Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

impl tower::Service<http::Request<Incoming>> for Tracked {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        self.activity.begin();
        let guard = InFlight(Arc::clone(&self.activity));
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let answer = self.app.clone().oneshot(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Guarded {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// Ends a request's time in flight when dropped: with its answer's body, or with the request
/// if the client went away first.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// An answer's body that holds its request's [`InFlight`] until it is done.
struct Guarded {
    body: Body,
    _guard: InFlight,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guarded")
    }
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A listener with `max_connections` serving `/` at once and `/hold` once `release` has
    /// a permit for it; its metrics, its address, and the number of `/hold` requests entered.
    struct Served {
        address: SocketAddr,
        metrics: ConnectionMetrics,
        release: Arc<Semaphore>,
        holding: Arc<AtomicUsize>,
        _stop: watch::Sender<bool>,
    }

    async fn served(max_connections: usize) -> Served {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let release = Arc::new(Semaphore::new(0));
        let holding = Arc::new(AtomicUsize::new(0));
        let (gate, entered) = (Arc::clone(&release), Arc::clone(&holding));
        let app = axum::Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route(
                "/hold",
                axum::routing::get(move || {
                    let (gate, entered) = (Arc::clone(&gate), Arc::clone(&entered));
                    async move {
                        entered.fetch_add(1, Ordering::SeqCst);
                        gate.acquire().await.unwrap().forget();
                        "held"
                    }
                }),
            );
        let limits = SocketLimits {
            max_connections,
            // Nothing here waits for a timeout: only for room to be made.
            header_read_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(600),
            ..SocketLimits::default()
        };
        let metrics = ConnectionMetrics::default();
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, app, limits, metrics.clone(), stopped));
        Served {
            address,
            metrics,
            release,
            holding,
            _stop: stop,
        }
    }

    /// Waits until `ready` holds (a condition the server reaches by itself, promptly).
    async fn until(what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn open(served: &Served, count: i64) -> TcpStream {
        let stream = TcpStream::connect(served.address).await.unwrap();
        until(&format!("{count} open"), || {
            served.metrics.open.get() == count
        })
        .await;
        stream
    }

    /// A whole request for `path` on `stream`; the start of its answer.
    async fn request(stream: &mut TcpStream, path: &str) -> String {
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let n = stream.read(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer[..n]).into_owned()
    }

    /// Whether the server closed `stream` (it reads the end, or a reset).
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_full_cap_closes_the_connection_idle_longest_to_make_room() {
        let served = served(3).await;
        // Silent; dribbling a request head (never finished); between requests.
        let mut silent = open(&served, 1).await;
        let mut dribbling = open(&served, 2).await;
        dribbling
            .write_all(b"GET / HTTP/1.1\r\nX-Slow: a")
            .await
            .unwrap();
        let mut between = open(&served, 3).await;
        assert!(request(&mut between, "/").await.starts_with("HTTP/1.1 200"));
        // Each newcomer is served, and the one idle longest makes room: the silent one, then
        // the one sending its head slowly (bytes do not make it less idle), then the one whose
        // last request ended last.
        let mut newcomers = Vec::new();
        for (n, displaced) in [&mut silent, &mut dribbling, &mut between]
            .into_iter()
            .enumerate()
        {
            let mut newcomer = TcpStream::connect(served.address).await.unwrap();
            assert!(
                request(&mut newcomer, "/")
                    .await
                    .starts_with("HTTP/1.1 200")
            );
            assert!(closed(displaced).await, "connection {n} was kept");
            assert_eq!(served.metrics.evicted.get(), n as u64 + 1);
            // The newcomers, now between requests, are the next to go; kept open meanwhile.
            newcomers.push(newcomer);
        }
        assert_eq!(served.metrics.refused.get(), 0);
        assert_eq!(served.metrics.open.get(), 3);
    }

    #[tokio::test]
    async fn a_connection_serving_a_request_is_never_displaced() {
        let served = served(2).await;
        let mut first = open(&served, 1).await;
        let mut second = open(&served, 2).await;
        for stream in [&mut first, &mut second] {
            stream
                .write_all(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
        }
        until("both requests in flight", || {
            served.holding.load(Ordering::SeqCst) == 2
        })
        .await;
        // Every connection serves a request: a newcomer is closed at once, nobody displaced.
        let mut newcomer = TcpStream::connect(served.address).await.unwrap();
        assert!(closed(&mut newcomer).await);
        assert_eq!(served.metrics.refused.get(), 1);
        assert_eq!(served.metrics.evicted.get(), 0);
        served.release.add_permits(2);
        for stream in [&mut first, &mut second] {
            let mut answer = vec![0u8; 1024];
            let n = stream.read(&mut answer).await.unwrap();
            assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
        }
    }

    #[tokio::test]
    async fn every_accepted_connection_has_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        for _ in 0..3 {
            let client = TcpStream::connect(address).await.unwrap();
            let (accepted, peer) = listener.accept().await.unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            assert!(
                !accepted.nodelay().unwrap(),
                "the option is larkgate's doing"
            );
            prepare(&accepted);
            assert!(
                accepted.nodelay().unwrap(),
                "an accepted socket without TCP_NODELAY"
            );
        }
    }

    #[test]
    fn the_open_file_limit_is_raised_to_its_hard_limit() {
        use rustix::process::{Resource, getrlimit};
        let soft = make_room_for(16).expect("a finite limit here");
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(limit.current, Some(soft));
        assert_eq!(limit.current, limit.maximum.or(limit.current));
    }

    #[test]
    fn a_connection_is_due_from_the_first_byte_of_a_head_and_never_while_serving() {
        let limits = SocketLimits {
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(60),
            ..SocketLimits::default()
        };
        let activity = Activity::new();
        let idle = activity.deadline(&limits);
        assert!(idle >= activity.start + Duration::from_secs(60));
        activity.read();
        let head = activity.deadline(&limits);
        assert!(head < activity.start + Duration::from_secs(2), "{head:?}");
        // A second byte of the same head does not move its deadline.
        activity.read();
        assert_eq!(activity.deadline(&limits), head);
        activity.begin();
        assert!(activity.deadline(&limits) >= activity.start + Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(activity.expired(&limits), None, "never cut while serving");
        // Bytes of a body read while serving do not start a head.
        activity.read();
        activity.end();
        let after = activity.deadline(&limits);
        assert!(
            after >= activity.start + Duration::from_secs(60),
            "{after:?}"
        );
        assert_eq!(activity.expired(&limits), None);
    }
}
