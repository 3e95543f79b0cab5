//! The accept loop of every listener `larkgate serve` opens (`/mcp`, and the operational
//! endpoints on `ops_listen`): HTTP/1.1 connections, each bounded in count, in time and in
//! header size, and shut down gracefully.
//!
//! ## Threat model
//!
//! Anyone who can reach the socket can open connections and send bytes as slowly as they like,
//! without a token: nothing here may depend on a request being authenticated.
//! - **Descriptor exhaustion.** At most [`SocketLimits::max_connections`] connections are open
//!   at once. A connection past the cap is accepted and closed at once (the client sees the
//!   close, not a hang) and counted; the listener itself keeps accepting, so the process never
//!   runs out of descriptors because of one peer. At start, `serve` raises its soft open-file
//!   limit to the hard one and warns when the cap does not fit under it ([`make_room_for`]).
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

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            metrics.refused.inc();
            if last_full_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                last_full_warning = Some(Instant::now());
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "the connection cap is reached; new connections are closed as they arrive"
                );
            }
            drop(stream);
            continue;
        };
        prepare(&stream);
        let connection = connection(
            stream,
            peer,
            app.clone(),
            Arc::clone(&limits),
            metrics.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move {
            connection.await;
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

/// One connection: served by hyper until it closes, times out, or is shut down.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: Arc<SocketLimits>,
    metrics: ConnectionMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    metrics.open.inc();
    let activity = Arc::new(Activity::new());
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
            () = activity.changed.notified() => {}
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
    /// Woken when a head starts: its deadline is earlier than the idle one.
    changed: Notify,
}

const NO_HEAD: u64 = u64::MAX;

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            head_ms: AtomicU64::new(NO_HEAD),
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
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
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
