//! Runs in a real worker process: results, host calls through the parent, and hostile scripts
//! that must end as a clean `limit_exceeded` while the parent lives on and serves the next run.

use std::time::Duration;

use larkgate_binding::{Limits, Map};
use larkgate_caller::{CallError, Caller, ToolInfo};
use larkgate_script::{RunError, Script, ScriptLimits, WorkerCommand, run_in_worker};

use crate::tools::Scripted;

fn command() -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_larkgate-script-worker").into(),
        address_space: 512 * 1024 * 1024,
    }
}

fn limits() -> ScriptLimits {
    ScriptLimits {
        max_ticks: 5_000_000,
        max_tool_calls: 100,
        max_wall_time: Duration::from_secs(20),
        values: Limits::default(),
        ..ScriptLimits::default()
    }
}

async fn run(caller: &impl Caller, source: &str) -> Result<larkgate_script::RunOutput, RunError> {
    run_in_worker(
        &command(),
        caller,
        Script {
            filename: "w.star",
            source,
            arguments: &Map::new(),
            limits: &limits(),
        },
        false,
    )
    .await
    .into_result()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_main_and_its_tool_calls_go_through_the_parent() {
    let caller = Scripted::default();
    let out = run(
        &caller,
        "def main():\n    print('hi')\n    return kv_get(key = 'k')['args']\n",
    )
    .await
    .unwrap();
    assert_eq!(out.result.to_string(), r#"{"key":"k"}"#);
    assert_eq!(out.printed, "hi\n");
    assert_eq!(out.tool_calls, 1);
    assert_eq!(
        caller.calls.lock().unwrap().len(),
        1,
        "the parent made the call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_keeps_what_it_printed_and_a_worker_reports_its_peak_memory() {
    let caller = Scripted::default();
    let report = run_in_worker(&command(), &caller, Script {
filename: "f.star",
source: "def main():\n    print('step 1')\n    xs = [0] * 1000000\n    print('step 2')\n    fail('gave up after', len(xs))\n",
arguments: &Map::new(),
limits: &limits(),
}, false)
    .await;
    assert_eq!(report.printed, "step 1\nstep 2\n");
    match &report.outcome {
        Err(RunError::Raised(message)) => {
            assert!(message.contains("gave up after 1000000"), "{message}")
        }
        other => panic!("expected the script's own failure, got {other:?}"),
    }
    let peak = report
        .usage
        .peak_memory_bytes
        .expect("a worker reports its peak memory");
    // A million-element list is at least 8 MB on the worker's heap; an address-space-limited
    // worker cannot have used more than its limit.
    assert!(peak >= 8_000_000, "peak {peak}");
    assert!(peak <= command().address_space, "peak {peak}");
    assert!(report.usage.ticks > 0);
}

fn limit_of(result: Result<larkgate_script::RunOutput, RunError>) -> (&'static str, String) {
    match result {
        Err(RunError::Limit { limit, message }) => (limit, message),
        other => panic!("expected a limit, got {other:?}"),
    }
}

/// A worker as `serve` starts it: the default address space.
fn default_command() -> WorkerCommand {
    WorkerCommand {
        address_space: larkgate_script::worker::DEFAULT_ADDRESS_SPACE,
        ..command()
    }
}

/// Runs `source` in a worker started by `command` under `limits` and names the limit it hit.
async fn limit_in(
    command: &WorkerCommand,
    limits: &ScriptLimits,
    source: &str,
) -> (&'static str, String) {
    let result = run_in_worker(
        command,
        &Scripted::default(),
        Script {
            filename: "hostile.star",
            source,
            arguments: &Map::new(),
            limits,
        },
        false,
    )
    .await
    .into_result();
    limit_of(result)
}

/// [`limit_in`] a worker as `serve` starts it, under the default limits.
async fn limit_under_defaults(source: &str) -> (&'static str, String) {
    limit_in(&default_command(), &ScriptLimits::default(), source).await
}

/// A dict of 10^7 ints: about 480 MiB of container storage, which the interpreter's own heap
/// limit does not count.
pub(crate) const DICT_OF_10E7: &str =
    "def main():\n    d = {}\n    for i in range(10000000):\n        d[i] = i\n    return len(d)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scripts_under_the_default_limits_end_as_exactly_the_limit_they_hit() {
    let caller = Scripted::default();
    let nested = |tail: &str| {
        format!(
            "def main():\n    x = []\n    for _ in range(200000):\n        x = [x]\n    return {tail}\n"
        )
    };
    let table = [
        (DICT_OF_10E7.to_owned(), "memory"),
        ("def main():\n    return len([0] * 2000000000)\n".to_owned(), "memory"),
        ("def main():\n    return len('a' * 2000000000)\n".to_owned(), "memory"),
        ("def main():\n    return len(('a' * 100000) * 100000)\n".to_owned(), "memory"),
        // The interpreter's arena would panic on this refusal: the allocator ends the worker
        // first.
        (
            "def main():\n    s = 'ab'\n    for _ in range(40):\n        s = s + s\n    return len(s)\n"
                .to_owned(),
            "memory",
        ),
        // Native recursion over a deeply nested value.
        (nested("len(str(x))"), "stack"),
        (nested("len(json.encode(x))"), "stack"),
        (
            "def f(n):\n    return f(n + 1)\ndef main():\n    return f(0)\n".to_owned(),
            "call stack",
        ),
        (
            "def main():\n    for _ in range(1000000):\n        print('x' * 100)\n".to_owned(),
            "printed bytes",
        ),
        ("def main():\n    return ['x' * 1000] * 60000\n".to_owned(), "result"),
        (
            "def main():\n    for _ in range(1000000):\n        kv_get(key = 'k')\n".to_owned(),
            "tool calls",
        ),
    ];
    for (source, expected) in table {
        let (limit, message) = limit_under_defaults(&source).await;
        assert_eq!(limit, expected, "{source:?}: {message}");
        // Still serving.
        assert!(run(&caller, "def main():\n    return 1\n").await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_limit_names_the_allocation_that_would_pass_it() {
    let (limit, message) = limit_under_defaults(DICT_OF_10E7).await;
    assert_eq!(limit, "memory");
    assert!(
        message.starts_with("an allocation of ")
            && message.contains("would take the worker past its 268435456-byte limit"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_limits_end_runs_under_the_default_memory_limit() {
    let limits = ScriptLimits {
        max_wall_time: Duration::from_secs(3),
        max_ticks: 5_000_000,
        ..ScriptLimits::default()
    };
    let table = [
        // One multiplication of huge integers is one tick: the deadline kill stops it, long
        // before the integers reach the memory limit.
        (
            "def main():\n    x = 7\n    for _ in range(100):\n        x = x * x\n    return 1\n",
            "wall time",
        ),
        (
            "def main():\n    for _ in range(2000000000):\n        for _ in range(2000000000):\n            pass\n",
            "ticks",
        ),
    ];
    for (source, expected) in table {
        let (limit, message) = limit_in(&default_command(), &limits, source).await;
        assert_eq!(limit, expected, "{source:?}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_the_address_space_cannot_hold_is_named_as_such() {
    // A memory limit above the address space: the system refuses first, and it is said so.
    let command = WorkerCommand {
        address_space: 512 * 1024 * 1024,
        ..command()
    };
    let limits = ScriptLimits {
        max_memory_bytes: 2 * 1024 * 1024 * 1024,
        ..ScriptLimits::default()
    };
    let (limit, message) = limit_in(
        &command,
        &limits,
        "def main():\n    return len('a' * 700000000)\n",
    )
    .await;
    assert_eq!(limit, "address space", "{message}");
    assert!(
        message.contains("the system refused an allocation of 700000000 bytes"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_below_what_the_worker_holds_at_start_refuses_the_run() {
    let limits = ScriptLimits {
        max_memory_bytes: 64 * 1024,
        ..ScriptLimits::default()
    };
    let (limit, message) = limit_in(&command(), &limits, "def main():\n    return 1\n").await;
    assert_eq!(limit, "memory");
    assert!(
        message.contains("before the script starts, over the 65536-byte memory limit"),
        "{message}"
    );
}

/// A caller whose every call takes longer than any run may.
struct Slow;

impl Caller for Slow {
    async fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        Ok(crate::tools::listing())
    }
    async fn call_tool(&self, _: &str, _: Map) -> Result<Map, CallError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(Map::new())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_deadline_is_killed() {
    let limits = ScriptLimits {
        max_wall_time: Duration::from_millis(500),
        ..limits()
    };
    let started = std::time::Instant::now();
    let result = run_in_worker(
        &command(),
        &Slow,
        Script {
            filename: "slow.star",
            source: "def main():\n    return kv_get(key = 'k')\n",
            arguments: &Map::new(),
            limits: &limits,
        },
        false,
    )
    .await
    .into_result();
    let (limit, _) = limit_of(result);
    assert_eq!(limit, "wall time");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_keeps_workers_started_and_uses_each_once() {
    let pool = larkgate_script::WorkerPool::new(command(), 2);
    let caller = Scripted::default();
    for i in 0..5 {
        let source = format!("def main():\n    return {i}\n");
        let out = pool
            .run(
                &caller,
                Script {
                    filename: "p.star",
                    source: &source,
                    arguments: &Map::new(),
                    limits: &limits(),
                },
                false,
            )
            .await
            .into_result()
            .unwrap();
        assert_eq!(out.result, larkgate_binding::Value::Int(i));
    }
    // A hostile run takes a worker like any other; the pool is refilled.
    let boom = pool
        .run(
            &caller,
            Script {
                filename: "b.star",
                source: "def main():\n    return len([0] * 2000000000)\n",
                arguments: &Map::new(),
                limits: &limits(),
            },
            false,
        )
        .await
        .into_result();
    assert!(matches!(boom, Err(RunError::Limit { .. })), "{boom:?}");
    for _ in 0..50 {
        if pool.idle() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.idle(), 2, "the pool refills to its size");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_never_overfill_the_pool() {
    let pool = larkgate_script::WorkerPool::new(command(), 2);
    let caller = Scripted::default();
    // Eight runs at once: each takes a worker (or starts one) and refills the pool after it.
    let runs = (0..8).map(|i| {
        let pool = std::sync::Arc::clone(&pool);
        let caller = &caller;
        async move {
            let source = format!("def main():\n    return {i}\n");
            pool.run(
                caller,
                Script {
                    filename: "c.star",
                    source: &source,
                    arguments: &Map::new(),
                    limits: &limits(),
                },
                false,
            )
            .await
            .into_result()
            .unwrap()
        }
    });
    let results = futures::future::join_all(runs).await;
    assert_eq!(results.len(), 8);
    // Every refill has finished once the count holds still; it must hold at the pool's size.
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen.push(pool.idle());
        if seen.len() >= 15
            && seen
                .iter()
                .rev()
                .take(15)
                .all(|n| *n == seen[seen.len() - 1])
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        seen.iter().all(|n| *n <= 2),
        "the pool overfilled: {seen:?}"
    );
    assert_eq!(pool.idle(), 2, "{seen:?}");
}

#[tokio::test]
async fn a_single_threaded_runtime_is_refused_with_a_reason() {
    let report = run_in_worker(
        &command(),
        &Scripted::default(),
        Script {
            filename: "s.star",
            source: "def main():\n    return 1\n",
            arguments: &Map::new(),
            limits: &limits(),
        },
        false,
    )
    .await;
    match report.outcome {
        Err(RunError::Failed(message)) => {
            assert!(message.contains("multi-thread tokio runtime"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Whether process `pid` has exited (a zombie its parent has not reaped yet, or gone).
fn exited(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_died_while_idle_is_passed_over() {
    // Workers that die as soon as they start, as if killed while they waited — until `alive`
    // exists; from then on, real workers.
    let dir = tempfile::tempdir().unwrap();
    let (pids, alive) = (dir.path().join("pids"), dir.path().join("alive"));
    let wrapper = dir.path().join("worker.sh");
    crate::write_executable(
        &wrapper,
        &format!(
            "#!/bin/sh\n[ -e '{}' ] && exec '{}' \"$@\"\necho $$ >> '{}'\nexit 1\n",
            alive.display(),
            command().program.display(),
            pids.display()
        ),
    );
    let pool = larkgate_script::WorkerPool::new(
        WorkerCommand {
            program: wrapper,
            ..command()
        },
        2,
    );
    let mut dead = 0;
    for _ in 0..500 {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        dead = text.lines().filter(|pid| exited(pid)).count();
        if dead == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dead, 2, "both idle workers died");
    assert_eq!(pool.idle(), 2, "the dead are still in the pool");
    std::fs::write(&alive, "").unwrap();
    let out = pool
        .run(
            &Scripted::default(),
            Script {
                filename: "p.star",
                source: "def main():\n    return 7\n",
                arguments: &Map::new(),
                limits: &limits(),
            },
            false,
        )
        .await
        .into_result()
        .unwrap();
    assert_eq!(out.result, larkgate_binding::Value::Int(7));
}

#[test]
#[ignore = "a worker's body, started by a_worker_in_a_binary_without_the_counting_allocator_refuses_to_run"]
fn uncounted_worker_child() {
    // This test binary's global allocator is the system's.
    let code = larkgate_script::worker::worker_main();
    std::process::exit(if code == std::process::ExitCode::from(5) {
        5
    } else {
        1
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_a_binary_without_the_counting_allocator_refuses_to_run() {
    assert!(
        !larkgate_script::memory::installed(),
        "the test binary counts nothing"
    );
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("uncounted.sh");
    crate::write_executable(
        &wrapper,
        &format!(
            "#!/bin/sh\nexec '{}' --exact worker::uncounted_worker_child --ignored --nocapture >/dev/null\n",
            std::env::current_exe().unwrap().display()
        ),
    );
    let uncounted = WorkerCommand {
        program: wrapper,
        ..command()
    };
    let (limit, message) = limit_in(&uncounted, &limits(), "def main():\n    return 1\n").await;
    assert_eq!(limit, "worker");
    assert!(
        message.contains("exited with code 5")
            && message.contains("global allocator is not larkgate_script::memory::WorkerAllocator"),
        "{message}"
    );
}
