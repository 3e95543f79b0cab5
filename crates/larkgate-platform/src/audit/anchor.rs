//! Anchors: every signed checkpoint ([`super::checkpoint`]) also sent somewhere the database's
//! keeper cannot rewrite — an append-only file on other storage, the system log, an HTTP
//! endpoint — so that `audit verify --anchor` can show a database that was rolled back whole
//! or rewritten, which the chain and its signatures alone cannot.
//!
//! # Threat model
//!
//! - **A database rolled back to an earlier backup** is a valid, signed, shorter chain. An
//!   anchor holds a later checkpoint: its position is past the chain's end, or (once the
//!   rolled-back chain grows again) the chain holds another hash there.
//! - **A rewrite with the signing key** (the keeper holds the data directory too): the
//!   anchored checkpoints name the hashes signed before it, which the rewritten chain lacks.
//! - **A failing or slow sink** must not stop calls, nor the chain's flushes: each sink has
//!   its own task and queue (at most [`MAX_QUEUED`] checkpoints; a later checkpoint covers an
//!   earlier one, so the oldest go first when it overflows, counted). A failure is retried
//!   with a growing pause (up to [`MAX_BACKOFF`]), counted, and logged when it starts and
//!   ends, not per attempt. Only an operator who says so (`[audit] anchors_required = true`)
//!   has calls refused while a sink is failing ([`Anchors::refusing`]).
//! - **What a sink is sent** is the checkpoint only: positions, hashes, a time, the replica's
//!   name, the policy's hash and public keys. No record, argument or secret.
//!
//! Not covered: an anchor the keeper can also rewrite (a file on the same disk, a log they
//! administer). Where anchors are kept decides what they prove.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use super::checkpoint::Checkpoint;

/// Checkpoints one sink holds while it fails; the oldest are dropped beyond this.
pub const MAX_QUEUED: usize = 10_000;
/// The longest pause between two attempts of a failing sink.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The first pause after a failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// Somewhere checkpoints are appended.
pub trait AnchorSink: Send + Sync + std::fmt::Debug {
    /// What it is, for logs, metrics and messages (`file /path`, `webhook https://...`).
    fn describe(&self) -> String;

    /// Appends one checkpoint; why not, if it could not.
    fn append<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), String>>;
}

/// The line a checkpoint is anchored as: its JSON, as the chain's `checkpoint` record holds it.
pub fn anchor_line(checkpoint: &Checkpoint) -> String {
    // A struct of strings and integers always serializes.
    serde_json::to_string(checkpoint).unwrap_or_default()
}

/// An append-only file: one checkpoint per line, written with one `write(2)` in append mode
/// and synced before it counts as anchored. The file is created (mode 0600) if missing.
#[derive(Debug)]
pub struct FileAnchor {
    path: PathBuf,
}

impl FileAnchor {
    /// Anchors into `path`.
    pub fn new(path: PathBuf) -> Self {
        FileAnchor { path }
    }
}

impl AnchorSink for FileAnchor {
    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }

    fn append<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), String>> {
        let path = self.path.clone();
        let mut line = anchor_line(checkpoint);
        line.push('\n');
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&path)?;
                file.write_all(line.as_bytes())?;
                file.sync_data()
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
        })
    }
}

/// The system log, through its local datagram socket (`/dev/log`, where journald listens too
/// on systemd machines): each checkpoint one message of facility `authpriv`, severity `info`,
/// tagged `larkgate-audit`, its text the checkpoint's JSON.
#[derive(Debug)]
pub struct SyslogAnchor {
    socket: PathBuf,
}

impl SyslogAnchor {
    /// Sends to the socket at `socket`.
    pub fn new(socket: PathBuf) -> Self {
        SyslogAnchor { socket }
    }

    /// The datagram sent for `checkpoint` (RFC 3164's local form, which syslog daemons and
    /// journald both read).
    pub fn message(checkpoint: &Checkpoint) -> String {
        // authpriv (10) * 8 + info (6)
        format!(
            "<86>larkgate-audit[{}]: {}",
            std::process::id(),
            anchor_line(checkpoint)
        )
    }
}

impl AnchorSink for SyslogAnchor {
    fn describe(&self) -> String {
        format!("syslog {}", self.socket.display())
    }

    fn append<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), String>> {
        let socket = self.socket.clone();
        let message = SyslogAnchor::message(checkpoint);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let datagram = std::os::unix::net::UnixDatagram::unbound()?;
                datagram.set_write_timeout(Some(Duration::from_secs(5)))?;
                datagram.send_to(message.as_bytes(), &socket).map(|_| ())
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
        })
    }
}

/// Labels of a sink's metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnchorLabels {
    /// The sink, as [`AnchorSink::describe`] says it.
    pub anchor: String,
}

/// One sink and what it has not taken yet.
#[derive(Debug)]
struct Anchored {
    sink: Arc<dyn AnchorSink>,
    name: String,
    queue: Mutex<VecDeque<Checkpoint>>,
    wake: Notify,
    /// Its last attempt failed.
    failing: AtomicBool,
    /// Checkpoints it took.
    anchored: AtomicU64,
}

/// The sinks checkpoints are anchored in, each delivered by a task of its own. See the module
/// documentation.
#[derive(Debug)]
pub struct Anchors {
    sinks: Vec<Arc<Anchored>>,
    required: bool,
    failures: Family<AnchorLabels, Counter>,
    dropped: Family<AnchorLabels, Counter>,
    queued: Family<AnchorLabels, Gauge>,
}

impl Anchors {
    /// Starts a task for each sink on the current runtime. With `required`, calls are refused
    /// while any sink is failing ([`Anchors::refusing`]).
    pub fn start(sinks: Vec<Arc<dyn AnchorSink>>, required: bool) -> Arc<Anchors> {
        let anchors = Arc::new(Anchors {
            sinks: sinks
                .into_iter()
                .map(|sink| {
                    Arc::new(Anchored {
                        name: sink.describe(),
                        sink,
                        queue: Mutex::new(VecDeque::new()),
                        wake: Notify::new(),
                        failing: AtomicBool::new(false),
                        anchored: AtomicU64::new(0),
                    })
                })
                .collect(),
            required,
            failures: Family::default(),
            dropped: Family::default(),
            queued: Family::default(),
        });
        for index in 0..anchors.sinks.len() {
            let weak = Arc::downgrade(&anchors);
            tokio::spawn(async move { deliver(weak, index).await });
        }
        anchors
    }

    /// Queues `checkpoint` for every sink.
    pub fn send(&self, checkpoint: &Checkpoint) {
        for anchored in &self.sinks {
            let labels = self.labels(anchored);
            {
                let mut queue = anchored.queue.lock().unwrap_or_else(|p| p.into_inner());
                if queue.len() >= MAX_QUEUED {
                    queue.pop_front();
                    self.dropped.get_or_create(&labels).inc();
                }
                queue.push_back(checkpoint.clone());
                self.queued.get_or_create(&labels).set(queue.len() as i64);
            }
            anchored.wake.notify_one();
        }
    }

    /// Waits until every sink took what it was sent, or `within` passed (a process about to
    /// exit gives its last checkpoint a chance); whether they all did.
    pub async fn settle(&self, within: Duration) -> bool {
        let settled = || self.state().iter().all(|s| s.queued == 0);
        let waited = tokio::time::timeout(within, async {
            while !settled() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        waited.is_ok()
    }

    /// Why a call is refused now, when anchors are required and one is failing.
    pub fn refusing(&self) -> Option<String> {
        if !self.required {
            return None;
        }
        self.sinks
            .iter()
            .find(|a| a.failing.load(Ordering::Acquire))
            .map(|a| a.name.clone())
    }

    /// Each sink, whether it is failing, how many checkpoints it took and how many wait.
    pub fn state(&self) -> Vec<AnchorState> {
        self.sinks
            .iter()
            .map(|a| AnchorState {
                anchor: a.name.clone(),
                failing: a.failing.load(Ordering::Acquire),
                anchored: a.anchored.load(Ordering::Acquire),
                queued: a.queue.lock().unwrap_or_else(|p| p.into_inner()).len(),
            })
            .collect()
    }

    /// Registers the sinks' metrics: failed attempts, checkpoints dropped from a full queue,
    /// and checkpoints waiting.
    pub fn register_metrics(&self, metrics: &crate::metrics::Metrics) {
        metrics.register(
            "audit_anchor_failures",
            "Failed attempts to append a checkpoint to an audit anchor",
            self.failures.clone(),
        );
        metrics.register(
            "audit_anchor_dropped",
            "Checkpoints dropped from a failing audit anchor's full queue",
            self.dropped.clone(),
        );
        metrics.register(
            "audit_anchor_queued",
            "Checkpoints waiting for an audit anchor",
            self.queued.clone(),
        );
    }

    fn labels(&self, anchored: &Anchored) -> AnchorLabels {
        AnchorLabels {
            anchor: anchored.name.clone(),
        }
    }
}

/// A sink, as [`Anchors::state`] tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorState {
    /// The sink.
    pub anchor: String,
    /// Its last attempt failed.
    pub failing: bool,
    /// Checkpoints it took.
    pub anchored: u64,
    /// Checkpoints waiting for it.
    pub queued: usize,
}

/// One sink's task: appends its queue in order, pausing after a failure; ends when the
/// anchors are dropped.
async fn deliver(anchors: std::sync::Weak<Anchors>, index: usize) {
    let mut failing = crate::failing::Failing::default();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let anchored = {
            let Some(anchors) = anchors.upgrade() else {
                return;
            };
            Arc::clone(&anchors.sinks[index])
        };
        if failing.failing() {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        } else {
            backoff = FIRST_BACKOFF;
            // Woken by a checkpoint; the timeout only notices the anchors were dropped.
            let _ = tokio::time::timeout(Duration::from_secs(1), anchored.wake.notified()).await;
        }
        loop {
            let next = anchored
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .front()
                .cloned();
            let Some(checkpoint) = next else { break };
            let outcome = anchored.sink.append(&checkpoint).await;
            let Some(anchors) = anchors.upgrade() else {
                return;
            };
            let labels = anchors.labels(&anchored);
            let ok = outcome.is_ok();
            if ok {
                let mut queue = anchored.queue.lock().unwrap_or_else(|p| p.into_inner());
                if queue.front() == Some(&checkpoint) {
                    queue.pop_front();
                }
                anchors
                    .queued
                    .get_or_create(&labels)
                    .set(queue.len() as i64);
                anchored.anchored.fetch_add(1, Ordering::AcqRel);
            } else {
                anchors.failures.get_or_create(&labels).inc();
            }
            anchored.failing.store(!ok, Ordering::Release);
            let required = anchors.required;
            failing.note(
                outcome,
                |error, failed| {
                    tracing::error!(
                        anchor = %anchored.name,
                        %error,
                        failed_attempts_since_last_logged = failed,
                        "a checkpoint could not be anchored; larkgate keeps it and tries again{}",
                        if required {
                            " (anchors_required: calls are refused meanwhile)"
                        } else {
                            ""
                        }
                    );
                },
                || {
                    tracing::info!(
                        target: crate::failing::RECOVERED,
                        anchor = %anchored.name,
                        "checkpoints are anchored again"
                    )
                },
            );
            if !ok {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(seq: u64) -> Checkpoint {
        Checkpoint {
            seq,
            hash: "ab".repeat(32),
            at_ms: 1,
            replica: "r1".into(),
            policy: "cd".repeat(32),
            key: "K".into(),
            next_key: None,
            signature: "S".into(),
        }
    }

    /// A sink that fails while told to, and keeps what it took.
    #[derive(Debug, Default)]
    struct Flaky {
        down: AtomicBool,
        took: Mutex<Vec<u64>>,
    }

    impl AnchorSink for Flaky {
        fn describe(&self) -> String {
            "flaky".into()
        }
        fn append<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                if self.down.load(Ordering::Acquire) {
                    return Err("down".into());
                }
                self.took.lock().unwrap().push(c.seq);
                Ok(())
            })
        }
    }

    async fn until(what: &str, ready: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if ready() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never: {what}");
    }

    /// A failing sink keeps its checkpoints and delivers them in order once it works again;
    /// while it fails, calls are refused only when anchors are required; failures are counted.
    #[tokio::test(start_paused = true)]
    async fn a_failing_sink_is_retried_in_order_and_refuses_only_when_required() {
        for required in [false, true] {
            let sink = Arc::new(Flaky::default());
            sink.down.store(true, Ordering::Release);
            let anchors = Anchors::start(vec![sink.clone()], required);
            assert_eq!(anchors.refusing(), None, "nothing failed yet");
            anchors.send(&checkpoint(1));
            anchors.send(&checkpoint(2));
            until("the sink failed", || anchors.state()[0].failing).await;
            assert_eq!(anchors.refusing().is_some(), required);
            let metrics = crate::metrics::Metrics::default();
            anchors.register_metrics(&metrics);
            // Paused time: the retries come as the pauses pass.
            until("several attempts failed", || {
                metrics
                    .encode()
                    .contains("larkgate_audit_anchor_failures_total{anchor=\"flaky\"} 3")
            })
            .await;
            assert_eq!(anchors.state()[0].queued, 2);
            sink.down.store(false, Ordering::Release);
            until("the sink took both", || anchors.state()[0].queued == 0).await;
            assert_eq!(*sink.took.lock().unwrap(), [1, 2]);
            assert_eq!(anchors.refusing(), None);
            assert_eq!(anchors.state()[0].anchored, 2);
        }
    }

    /// A sink failing for long drops the oldest checkpoints beyond its queue, counted.
    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_the_oldest() {
        let sink = Arc::new(Flaky::default());
        sink.down.store(true, Ordering::Release);
        let anchors = Anchors::start(vec![sink.clone()], false);
        for seq in 1..=(MAX_QUEUED as u64 + 3) {
            anchors.send(&checkpoint(seq));
        }
        let metrics = crate::metrics::Metrics::default();
        anchors.register_metrics(&metrics);
        assert!(
            metrics
                .encode()
                .contains("larkgate_audit_anchor_dropped_total{anchor=\"flaky\"} 3")
        );
        sink.down.store(false, Ordering::Release);
        until("the sink took the rest", || anchors.state()[0].queued == 0).await;
        let took = sink.took.lock().unwrap().clone();
        assert_eq!(took.len(), MAX_QUEUED);
        assert_eq!(took.first(), Some(&4), "the three oldest went");
    }

    /// The file sink appends one JSON line per checkpoint; the syslog sink sends one datagram
    /// that a real datagram socket receives; a missing socket or directory is an error.
    #[tokio::test]
    async fn file_and_syslog_sinks_write_what_they_are_given() {
        let dir = std::env::temp_dir().join(format!("larkgate-anchor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = FileAnchor::new(dir.join("anchors.jsonl"));
        file.append(&checkpoint(1)).await.unwrap();
        file.append(&checkpoint(2)).await.unwrap();
        let text = std::fs::read_to_string(dir.join("anchors.jsonl")).unwrap();
        let read: Vec<Checkpoint> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read, [checkpoint(1), checkpoint(2)]);
        assert!(
            FileAnchor::new(dir.join("missing/anchors.jsonl"))
                .append(&checkpoint(1))
                .await
                .is_err()
        );

        let socket = dir.join("log.sock");
        let _ = std::fs::remove_file(&socket);
        let receiver = std::os::unix::net::UnixDatagram::bind(&socket).unwrap();
        let syslog = SyslogAnchor::new(socket.clone());
        syslog.append(&checkpoint(3)).await.unwrap();
        let mut buffer = vec![0; 4096];
        let n = receiver.recv(&mut buffer).unwrap();
        let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
        let (head, json) = message.split_once("]: ").unwrap();
        assert!(head.starts_with("<86>larkgate-audit["), "{message}");
        assert_eq!(
            serde_json::from_str::<Checkpoint>(json).unwrap(),
            checkpoint(3)
        );
        assert!(
            SyslogAnchor::new(dir.join("no.sock"))
                .append(&checkpoint(1))
                .await
                .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
