//! What the policy's rules with conditions cost a call: `kv_get` with a small argument map
//! through an in-memory session and the whole pipeline (durable audit included), on platforms
//! whose policies have 0, 10 and 100 deny rules that apply to the call and whose conditions
//! read its arguments (each false, so every one is evaluated and the call goes through).
//! Batches of each are interleaved, so all see the same conditions; it prints each one's
//! median and p99 and what the rules add to the median, and the CPU time the process spends
//! per call (every thread's, from `/proc/self/task/*/schedstat`, the median of the batches):
//! the wall-clock median also moves with how often a waiting thread parks and is woken, which
//! a few µs more of work per call can change, and the CPU time does not.
//!
//! Target (issue: policy on arguments): 100 rules add at most 20 µs to the median call.
//!
//! Then the decision alone, without the pipeline's noise: making a call's facts and judging it
//! (`Policy::judge`), per call, for the same three policies, and for 100 rules written so that
//! the cel crate evaluates each (the conditions' fast path does not take them): the baseline
//! the fast path is measured against. Each is timed twice: in a hot loop, and with the caches
//! emptied before each call (8 MiB written between calls), as a call in a server finds them.
//!
//! `cargo bench -p larkgate-session --bench rules`

use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_binding::{Limits, Map, Value};
use larkgate_caller::Caller;
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::policy::Policy;
use larkgate_platform::{Platform, RunContext};
use larkgate_session::SessionCaller;
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore};

/// The conditions the rules have: each reads the key.
const CONDITION: &str = r#"args.key.startsWith("denied-N/") || size(args.key) > 1000"#;

/// The same test written with an operator the fast path does not take (`+`), so the cel
/// crate evaluates every one: the cost without the fast path, measured in the same run.
const CEL_ONLY: &str = r#"(args.key + "").startsWith("denied-N/") || size(args.key) > 1000"#;

/// The policy: `admin` calls everything, and `rules` deny rules on `kv_get`, each reading the
/// key (`args.key.startsWith("denied-N/")`).
fn policy(rules: usize) -> Policy {
    policy_of(rules, CONDITION)
}

/// The policy with `rules` deny rules whose conditions are `condition` with N their number.
fn policy_of(rules: usize, condition: &str) -> Policy {
    let mut text = String::from("[roles.admin]\ncall = [\"*\"]\n");
    for n in 0..rules {
        let when = condition.replace('N', &n.to_string());
        text.push_str(&format!(
            "[[rules]]\nname = \"rule {n}\"\ntools = [\"kv_get\"]\nwhen = '{when}'\n\
             effect = \"deny\"\n"
        ));
    }
    let policy: Policy = toml::from_str(&text).expect("the bench's policy parses");
    policy.validate().expect("the bench's policy is valid");
    policy
}

fn admin() -> Principal {
    Principal {
        id: "bench".into(),
        kind: PrincipalKind::Service,
        roles: vec!["admin".into()],
        issuer: IssuerBinding::Local,
    }
}

async fn session(dir: &std::path::Path, rules: usize) -> SessionCaller {
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let audit = AuditLog::open(dir, store.clone(), AuditOptions::default())
        .await
        .unwrap();
    let platform = Platform::builder(store, audit)
        .unwrap()
        .policy(policy(rules))
        .build();
    let (caller, teardown) = larkgate_session::connect(
        &platform,
        RunContext::direct(admin()),
        "bench",
        Limits::default(),
    )
    .await
    .unwrap();
    // The session lives as long as the bench.
    std::mem::forget(teardown);
    caller
}

/// The CPU time every thread of this process has run for, in ns (Linux; 0 elsewhere).
fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn median_and_p99(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let counts = [0usize, 10, 100];
    let dirs: Vec<tempfile::TempDir> = counts
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let sessions: Vec<SessionCaller> = runtime.block_on(async {
        let mut sessions = Vec::new();
        for (dir, rules) in dirs.iter().zip(counts) {
            sessions.push(session(dir.path(), rules).await);
        }
        sessions
    });
    let arguments: Map = [("key".to_owned(), Value::from("reports/2026-12"))].into();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); counts.len()];
    let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); counts.len()];
    runtime.block_on(async {
        // The key, set; a warm-up; then 200 interleaved batches of 25 calls each.
        let mut set = arguments.clone();
        set.insert("value".to_owned(), Value::from("v"));
        for session in &sessions {
            session.call_tool("kv_set", set.clone()).await.unwrap();
            for _ in 0..200 {
                session
                    .call_tool("kv_get", arguments.clone())
                    .await
                    .unwrap();
            }
        }
        for _ in 0..200 {
            for ((session, samples), cpu) in sessions.iter().zip(samples.iter_mut()).zip(&mut cpu) {
                let before = process_cpu_ns();
                for _ in 0..25 {
                    let started = Instant::now();
                    session
                        .call_tool("kv_get", arguments.clone())
                        .await
                        .unwrap();
                    samples.push(started.elapsed());
                }
                cpu.push(Duration::from_nanos(
                    process_cpu_ns().saturating_sub(before) / 25,
                ));
            }
        }
    });
    let (base, _) = median_and_p99(samples[0].clone());
    println!(
        "kv_get through the whole pipeline, {} calls each:",
        samples[0].len()
    );
    let (base_cpu, _) = median_and_p99(cpu[0].clone());
    for ((rules, samples), cpu) in counts.iter().zip(samples).zip(cpu) {
        let (median, p99) = median_and_p99(samples);
        let (cpu, _) = median_and_p99(cpu);
        println!(
            "  {rules:>3} rules: median {:>7.1} µs, p99 {:>7.1} µs, rules add {:>6.1} µs to the \
             median; CPU {:>6.1} µs per call, rules add {:>5.1} µs",
            median.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            (median.as_secs_f64() - base.as_secs_f64()) * 1e6,
            cpu.as_secs_f64() * 1e6,
            (cpu.as_secs_f64() - base_cpu.as_secs_f64()) * 1e6
        );
    }
    judge_alone(&counts, &arguments);
}

/// Facts made and the call judged, alone: the median of 50 batches of 200 per policy.
fn judge_alone(counts: &[usize], arguments: &Map) {
    let principal = admin();
    let chain = larkgate_store::CallChain::default();
    // kv_get's arguments as its input schema lists them, which the pipeline reads the rules'
    // fields against, as here.
    let takes: Arc<[String]> = ["key".to_owned()].into();
    let mut policies: Vec<Policy> = counts.iter().map(|&n| policy(n)).collect();
    policies.push(policy_of(100, CEL_ONLY));
    for cold in [false, true] {
        judge_each(
            &policies, &principal, &chain, &takes, arguments, counts, cold,
        );
    }
}

/// The median of 50 batches of 200 decisions per policy; with `cold`, 8 MiB are written
/// before each decision (outside its time), so it finds the caches as a server's call does.
fn judge_each(
    policies: &[Policy],
    principal: &Principal,
    chain: &larkgate_store::CallChain,
    takes: &Arc<[String]>,
    arguments: &Map,
    counts: &[usize],
    cold: bool,
) {
    use larkgate_platform::policy::Facts;
    let mut junk = vec![0u8; if cold { 8 << 20 } else { 0 }];
    let mut per_call: Vec<Vec<Duration>> = vec![Vec::new(); policies.len()];
    for _ in 0..50 {
        for (policy, samples) in policies.iter().zip(per_call.iter_mut()) {
            let mut spent = Duration::ZERO;
            for i in 0..200u32 {
                for byte in junk.iter_mut().step_by(64) {
                    *byte = byte.wrapping_add(i as u8);
                }
                std::hint::black_box(&junk);
                let started = Instant::now();
                let verdict = policy.judge(
                    principal,
                    "kv_get",
                    true,
                    &Facts {
                        args: arguments,
                        principal,
                        tool: "kv_get",
                        source: "builtin",
                        alias: "",
                        read_only: true,
                        chain,
                        now_ms: 0,
                        arguments: Some(takes),
                    }
                    .values(),
                );
                std::hint::black_box(verdict);
                spent += started.elapsed();
            }
            samples.push(spent / 200);
        }
    }
    println!(
        "the decision alone (facts made, every rule evaluated), per call, {}:",
        if cold {
            "the caches emptied before each"
        } else {
            "in a hot loop"
        }
    );
    let labels = counts
        .iter()
        .map(|rules| format!("{rules:>3} rules"))
        .chain(["100 rules, each by the cel crate (no fast path)".to_owned()]);
    for (label, samples) in labels.zip(per_call) {
        let (median, _) = median_and_p99(samples);
        println!("  {label}: {:>7.2} µs", median.as_secs_f64() * 1e6);
    }
}
