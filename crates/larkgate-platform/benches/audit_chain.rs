//! What signed checkpoints cost the audit chain, in-process on a real SQLite store and journal,
//! against the same chain without them (the baseline), measured in the same run with their
//! batches interleaved: records journaled (as a call's intent and outcome are) and chained in
//! batches of 50 (as the journal's flush hands them to the store), with
//!
//! - `off`: no checkpoints (`[audit] checkpoints = false`);
//! - `every 1000`: the default, an Ed25519 signature and a checkpoint record per 1,000 records;
//! - `every 100`: ten times as many, to show how the cost scales;
//! - `off, rotating`: no checkpoints, and the journal moved to a new segment file at every
//!   flush (`segment_bytes = 0`, as every flush did before segments rotated only when full).
//!
//! Prints the median time per record of each over the rounds, and its ratio to the baseline.
//! Target: the default adds at most 5%.
//!
//! `cargo bench -p larkgate-platform --bench audit_chain`

use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_platform::audit::checkpoint::{Checkpoints, Signer};
use larkgate_platform::audit::{AuditCode, AuditEntry, AuditLog, AuditOptions, AuditSink};
use larkgate_store::{AuditKind, SqliteStore};

/// Records in one measured batch.
const RECORDS: usize = 4_000;
/// Records chained per flush.
const PER_FLUSH: usize = 50;
/// Interleaved rounds.
const ROUNDS: usize = 15;

async fn open(dir: &std::path::Path, every: Option<u64>, rotating: bool) -> Arc<AuditLog> {
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let defaults = AuditOptions::default();
    let options = AuditOptions {
        flush_interval: Duration::from_secs(3600),
        segment_bytes: if rotating { 0 } else { defaults.segment_bytes },
        ..defaults
    };
    let log = AuditLog::open(dir, store, options).await.unwrap();
    log.policy_in_force(&"ab".repeat(32));
    if let Some(every_records) = every {
        let (signer, _) = Signer::generate().unwrap();
        log.set_checkpoints(Checkpoints {
            signer,
            every_records,
            every: Duration::from_secs(3600),
        });
    }
    log
}

/// Time per record of `RECORDS` records, chained `PER_FLUSH` at a time.
async fn batch(log: &AuditLog) -> Duration {
    let started = Instant::now();
    let mut intent = None;
    for i in 0..RECORDS {
        let outcome = i % 2 == 1;
        let seq = log
            .append(AuditEntry {
                kind: Some(if outcome {
                    AuditKind::Outcome
                } else {
                    AuditKind::Intent
                }),
                principal: "ada".into(),
                tool: Some("kv_set".into()),
                args_hash: Some("cd".repeat(32)),
                code: outcome.then_some(AuditCode::Ok),
                intent_seq: if outcome { intent } else { None },
                duration_us: outcome.then_some(120),
                ..AuditEntry::default()
            })
            .unwrap();
        intent = Some(seq);
        if (i + 1) % PER_FLUSH == 0 {
            log.flush().await.unwrap();
        }
    }
    log.flush().await.unwrap();
    started.elapsed() / RECORDS as u32
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let configs: [(&str, Option<u64>, bool); 4] = [
        ("off", None, false),
        ("every 1000", Some(1_000), false),
        ("every 100", Some(100), false),
        ("off, rotating", None, true),
    ];
    let dirs: Vec<_> = configs
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let logs: Vec<Arc<AuditLog>> = runtime.block_on(async {
        let mut logs = Vec::new();
        for ((_, every, rotating), dir) in configs.iter().zip(&dirs) {
            logs.push(open(dir.path(), *every, *rotating).await);
        }
        logs
    });
    // A warm-up batch each: the table's first pages, the statements.
    for log in &logs {
        runtime.block_on(batch(log));
    }
    let mut times: Vec<Vec<Duration>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (i, log) in logs.iter().enumerate() {
            times[i].push(runtime.block_on(batch(log)));
        }
    }
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    println!(
        "audit records journaled and chained into SQLite, {PER_FLUSH} per flush, median of \
         {ROUNDS} interleaved batches of {RECORDS}:"
    );
    for ((name, _, _), median) in configs.iter().zip(&medians) {
        println!(
            "  checkpoints {name:<13} {:>8.2?} per record | {:.3}x the baseline's time",
            median,
            median.as_secs_f64() / medians[0].as_secs_f64()
        );
    }
    let added = medians[1].as_secs_f64() / medians[0].as_secs_f64() - 1.0;
    println!(
        "  target: the default's checkpoints add at most 5%: {:+.1}% ({})",
        100.0 * added,
        if added <= 0.05 { "met" } else { "NOT met" }
    );
}
