//! Script-engine figures, each against a baseline measured in the same run:
//!
//! 1. A script making 10,000 `clock_now` calls: per-call median in worker mode and in
//!    in-process mode, against the in-memory session round trip and a bare pipe round trip
//!    between two processes. Target: worker mode adds at most 1.2 × the pipe round trip to the
//!    in-process figure. A bare round trip costs very different amounts depending on where the
//!    two processes run (on one core each write hands the core over; across cores it wakes the
//!    other core, several times dearer on a virtual machine), and the scheduler places them
//!    differently from run to run, so the baseline is measured three ways: as the scheduler
//!    places it, pinned to one core, and pinned to two.
//! 2. Request-to-result latency of a trivial script with a warm pool, against spawning a fresh
//!    worker. Target: ≤ 2 ms p50.
//! 3. A 10^6-iteration loop against CPython running the same loop (context, not a target).
//!
//! Runs as plain timed loops (medians of repeated runs) rather than criterion groups: each
//! sample is a whole script run.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_binding::{Limits, Map};
use larkgate_caller::Caller;
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::{Platform, RunContext, RunKind};
use larkgate_script::{
    Blocking, Script, ScriptLimits, Tools, WorkerCommand, WorkerPool, run_in_process, run_in_worker,
};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn command() -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_larkgate-script-worker").into(),
        address_space: 1024 * 1024 * 1024,
    }
}

/// Where the two processes of the pipe baseline run.
#[derive(Clone, Copy, Debug)]
enum Placement {
    /// Wherever the scheduler puts them (what an unpinned worker gets).
    Scheduler,
    /// Both on one core: each write hands the core to the reader, no cross-core wake-up.
    SameCore,
    /// On two cores: each write wakes the other core.
    CrossCore,
}

impl Placement {
    const ALL: [Placement; 3] = [
        Placement::Scheduler,
        Placement::SameCore,
        Placement::CrossCore,
    ];

    fn label(self) -> &'static str {
        match self {
            Placement::Scheduler => "placed by the scheduler",
            Placement::SameCore => "both pinned to one core",
            Placement::CrossCore => "pinned to two cores",
        }
    }

    /// The cores of this process and of the child, as indexes into the cores this process
    /// may use, or `None` for no pinning.
    fn cores(self) -> Option<(usize, usize)> {
        match self {
            Placement::Scheduler => None,
            Placement::SameCore => Some((0, 0)),
            Placement::CrossCore => Some((0, 1)),
        }
    }
}

fn only(cpu: usize) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    set
}

/// A bare round trip of 8 bytes through `cat` in another process, both sides blocking in
/// `read`, the two processes placed as `placement` says.
fn pipe_round_trip(placement: Placement) -> Duration {
    let mine = rustix::thread::sched_getaffinity(None).unwrap();
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some((parent, other)) = placement.cores() {
        let allowed: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| mine.is_set(cpu))
            .collect();
        let (parent, other) = (allowed[parent], allowed[other]);
        let pid = rustix::process::Pid::from_child(&child);
        rustix::thread::sched_setaffinity(Some(pid), &only(other)).unwrap();
        rustix::thread::sched_setaffinity(None, &only(parent)).unwrap();
    }
    let mut input = child.stdin.take().unwrap();
    let mut output = child.stdout.take().unwrap();
    let mut samples = Vec::new();
    let mut buf = [0u8; 8];
    for _ in 0..5_000 {
        let t = Instant::now();
        input.write_all(b"12345678").unwrap();
        output.read_exact(&mut buf).unwrap();
        samples.push(t.elapsed());
    }
    drop(input);
    let _ = child.wait();
    rustix::thread::sched_setaffinity(None, &mine).unwrap();
    median(samples)
}

/// Rounds of the per-call measurement.
const ROUNDS: usize = 9;

const CALLS: &str = "def main():\n    for _ in range(10000):\n        clock_now()\n    return 1\n";
const TRIVIAL: &str = "def main():\n    return 1\n";
const LOOP: &str =
    "def main():\n    n = 0\n    for i in range(1000000):\n        n += i\n    return n\n";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let platform = runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
            .await
            .unwrap();
        Platform::builder(store, audit).unwrap().build()
    });
    let run_context = || RunContext {
        principal: Principal {
            id: "bench".into(),
            kind: PrincipalKind::Service,
            roles: vec!["admin".into()],
            issuer: IssuerBinding::Local,
        },
        run_id: None,
        kind: RunKind::Published,
        depth: 1,
        chain: Default::default(),
        upstream_tools: None,
    };
    let limits = ScriptLimits {
        max_tool_calls: 100_000,
        max_ticks: 1_000_000_000,
        ..ScriptLimits::default()
    };
    let (caller, _teardown) = runtime
        .block_on(larkgate_session::connect(
            &platform,
            run_context(),
            "bench",
            Limits::default(),
        ))
        .unwrap();

    // 1. Per-call cost, in rounds: each round measures the pipe, the in-process run and the
    // worker run back to back, so a ratio compares figures taken under the same machine load.
    let session = runtime.block_on(async {
        let mut samples = Vec::new();
        for _ in 0..10_000 {
            let t = Instant::now();
            caller.call_tool("clock_now", Map::new()).await.unwrap();
            samples.push(t.elapsed());
        }
        median(samples)
    });
    let cores = rustix::thread::sched_getaffinity(None).unwrap().count();
    let placements: Vec<Placement> = if cores > 1 {
        Placement::ALL.to_vec()
    } else {
        vec![Placement::Scheduler, Placement::SameCore]
    };
    let mut pipes = vec![Vec::new(); placements.len()];
    let mut ratios = vec![Vec::new(); placements.len()];
    let mut in_process = Vec::new();
    let mut worker = Vec::new();
    for _ in 0..ROUNDS {
        let round: Vec<Duration> = placements.iter().map(|p| pipe_round_trip(*p)).collect();
        let host = Arc::new(Blocking(caller.clone()));
        let limits_copy = limits;
        let t = Instant::now();
        runtime
            .block_on(runtime.spawn_blocking(move || {
                run_in_process(
                    Script {
                        filename: "calls.star",
                        source: CALLS,
                        arguments: &Map::new(),
                        limits: &limits_copy,
                    },
                    Some(Tools { host, draft: false }),
                )
            }))
            .unwrap()
            .outcome
            .unwrap();
        let in_process_call = t.elapsed() / 10_000;
        let t = Instant::now();
        runtime
            .block_on(run_in_worker(
                &command(),
                &caller,
                Script {
                    filename: "calls.star",
                    source: CALLS,
                    arguments: &Map::new(),
                    limits: &limits,
                },
                false,
            ))
            .outcome
            .unwrap();
        let worker_call = t.elapsed() / 10_000;
        let added = worker_call.saturating_sub(in_process_call);
        for (i, pipe) in round.into_iter().enumerate() {
            ratios[i].push(added.as_secs_f64() / pipe.as_secs_f64());
            pipes[i].push(pipe);
        }
        in_process.push(in_process_call);
        worker.push(worker_call);
    }
    let (in_process, worker) = (median(in_process), median(worker));
    println!("1. a script making 10,000 clock_now calls, per call (median of {ROUNDS} rounds):");
    println!("   in-memory session round trip:         {session:>10.2?}");
    println!("   in-process script:                    {in_process:>10.2?}");
    println!("   worker script:                        {worker:>10.2?}");
    let added = worker.saturating_sub(in_process);
    println!(
        "   worker adds {added:.2?} per call; against a bare pipe round trip between two processes:"
    );
    for ((placement, pipe), mut ratios) in placements.iter().zip(pipes).zip(ratios) {
        ratios.sort_by(f64::total_cmp);
        println!(
            "   - {:<24} {:>10.2?}: worker adds {:.2}x (median of per-round ratios; range \
             {:.2}x..{:.2}x; target: at most 1.2x)",
            placement.label(),
            median(pipe),
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }

    // 2. Request-to-result latency of a trivial script.
    let pool = runtime.block_on(async { WorkerPool::new(command(), 2) });
    std::thread::sleep(Duration::from_millis(500)); // let the pool start its workers
    let mut warm = Vec::new();
    let mut fresh = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        runtime
            .block_on(pool.run(
                &caller,
                Script {
                    filename: "t.star",
                    source: TRIVIAL,
                    arguments: &Map::new(),
                    limits: &limits,
                },
                false,
            ))
            .outcome
            .unwrap();
        warm.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(30)); // the pool refills between requests
        let t = Instant::now();
        runtime
            .block_on(run_in_worker(
                &command(),
                &caller,
                Script {
                    filename: "t.star",
                    source: TRIVIAL,
                    arguments: &Map::new(),
                    limits: &limits,
                },
                false,
            ))
            .outcome
            .unwrap();
        fresh.push(t.elapsed());
    }
    let (warm, fresh) = (median(warm), median(fresh));
    println!("2. request to result, trivial script (median of 50):");
    println!("   warm pool: {warm:>10.2?}  (target: at most 2 ms)");
    println!(
        "   fresh worker: {fresh:>10.2?}  ratio fresh / warm {:.1}x",
        fresh.as_secs_f64() / warm.as_secs_f64()
    );

    // 3. A 10^6-iteration loop, against CPython.
    let mut ours = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        run_in_process(
            Script {
                filename: "loop.star",
                source: LOOP,
                arguments: &Map::new(),
                limits: &limits,
            },
            None,
        )
        .outcome
        .unwrap();
        ours.push(t.elapsed());
    }
    let ours = median(ours);
    let python = Command::new("python3")
        .args(["-c", "import time\nt=time.perf_counter()\nn=0\nfor i in range(1000000):\n    n += i\nprint(time.perf_counter()-t)"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok());
    println!("3. a 10^6-iteration loop:");
    println!("   larkgate (in-process): {ours:>10.2?}");
    match python {
        Some(seconds) => println!(
            "   CPython: {:>10.2?}  ratio larkgate / CPython {:.2}x (context, not a target)",
            Duration::from_secs_f64(seconds),
            ours.as_secs_f64() / seconds
        ),
        None => println!("   CPython: not available"),
    }
}
