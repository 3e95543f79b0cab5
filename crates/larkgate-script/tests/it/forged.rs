//! Nothing trusts a worker: a call forged with arguments the tool does not take is refused by
//! the pipeline's binding (the tool is never called), and a frame over the limit ends the run
//! as `limit_exceeded` before the body is read. The forged workers
//! are small Python programs standing in for a compromised interpreter.

use std::time::Duration;

use larkgate_binding::{Limits, Map};
use larkgate_platform::{RunContext, RunKind};
use larkgate_script::{RunError, Script, ScriptLimits, WorkerCommand, run_in_worker};
use larkgate_store::KvStore;

use crate::tools::Scripted;

const FRAMES: &str = r#"
import json, struct, sys
def read():
    n = struct.unpack(">I", sys.stdin.buffer.read(4))[0]
    return json.loads(sys.stdin.buffer.read(n))
def write(message):
    body = json.dumps(message).encode()
    sys.stdout.buffer.write(struct.pack(">I", len(body)) + body)
    sys.stdout.buffer.flush()
"#;

fn forged_worker(dir: &std::path::Path, body: &str) -> WorkerCommand {
    let path = dir.join("forged-worker");
    let program = format!("#!/usr/bin/env python3\n{FRAMES}\n{body}\n");
    crate::write_executable(&path, &program);
    WorkerCommand {
        program: path,
        address_space: 1 << 30,
    }
}

fn limits() -> ScriptLimits {
    ScriptLimits {
        max_wall_time: Duration::from_secs(10),
        values: Limits::default(),
        ..ScriptLimits::default()
    }
}

// The parent passes a forged call on as it came; the pipeline binds it, with authority, and
// refuses it: the write is never made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_is_bound_by_the_pipeline_and_refused_before_the_tool_runs() {
    let setup = crate::session::setup().await;
    let dir = tempfile::tempdir().unwrap();
    let command = forged_worker(
        dir.path(),
        r#"
start = read()
write({"Call": {"name": "kv_set", "arguments": {"key": "k", "value": "v", "extra": True}}})
answer = read()
write({"Done": {"result": {"Ok": {"answer": answer}}, "printed": "", "usage": {"ticks": 0, "tool_calls": 1, "paces": 0, "peak_memory_bytes": None}}})
"#,
    );
    let run = RunContext {
        kind: RunKind::Published,
        run_id: Some("forged".into()),
        ..RunContext::direct(setup.ada.clone())
    };
    let (caller, teardown) =
        larkgate_session::connect(&setup.platform, run, "forged", Limits::default())
            .await
            .unwrap();
    let out = run_in_worker(
        &command,
        &caller,
        Script {
            filename: "f.star",
            source: "def main():\n    pass\n",
            arguments: &Map::new(),
            limits: &limits(),
        },
        false,
    )
    .await
    .into_result()
    .unwrap();
    teardown.close().await;
    let answer = out.result.as_map().unwrap()["answer"].as_map().unwrap()["Refused"]
        .as_map()
        .unwrap()
        .clone();
    assert_eq!(answer["code"].as_str(), Some("invalid_arguments"));
    assert!(
        answer["text"]
            .as_str()
            .unwrap()
            .contains("unexpected keyword argument `extra`"),
        "{answer:?}"
    );
    assert_eq!(
        setup.store.kv_get("k").await.unwrap(),
        None,
        "the forged call reached the tool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_limit_ends_the_run_before_its_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let command = forged_worker(
        dir.path(),
        r#"
start = read()
sys.stdout.buffer.write(struct.pack(">I", 17 * 1024 * 1024))
sys.stdout.buffer.flush()
import time
time.sleep(30)
"#,
    );
    let caller = Scripted::default();
    let started = std::time::Instant::now();
    let result = run_in_worker(
        &command,
        &caller,
        Script {
            filename: "f.star",
            source: "def main():\n    pass\n",
            arguments: &Map::new(),
            limits: &limits(),
        },
        false,
    )
    .await
    .into_result();
    match result {
        Err(RunError::Limit {
            limit: "pipe frame",
            message,
        }) => {
            assert!(message.contains("17825792 bytes"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the parent waited for the body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_without_an_answer_is_a_clean_limit() {
    let dir = tempfile::tempdir().unwrap();
    let command = forged_worker(
        dir.path(),
        "start = read()\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    );
    let (limit, message) = death_of(&command).await;
    assert_eq!(limit, "worker");
    assert!(message.contains("signal 11"), "{message}");
}

/// A worker that writes `report` on stderr and then dies by `death` (Python).
fn dying_worker(dir: &std::path::Path, report: &str, death: &str) -> WorkerCommand {
    forged_worker(
        dir,
        &format!(
            "start = read()\nimport os, signal\nsys.stderr.write({report:?})\nsys.stderr.flush()\n{death}\n"
        ),
    )
}

async fn death_of(command: &WorkerCommand) -> (&'static str, String) {
    let result = run_in_worker(
        command,
        &Scripted::default(),
        Script {
            filename: "d.star",
            source: "def main():\n    pass\n",
            arguments: &Map::new(),
            limits: &limits(),
        },
        false,
    )
    .await
    .into_result();
    match result {
        Err(RunError::Limit { limit, message }) => (limit, message),
        other => panic!("{other:?}"),
    }
}

const MEMORY_REPORT: &str = "\nlarkgate worker limit memory: an allocation of 4096 bytes would take the worker past its 1048576-byte limit (1047000 bytes in use)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_reports_a_refusal_and_aborts_died_of_that_limit() {
    let dir = tempfile::tempdir().unwrap();
    let command = dying_worker(dir.path(), MEMORY_REPORT, "os.abort()");
    let (limit, message) = death_of(&command).await;
    assert_eq!(limit, "memory");
    assert!(
        message.starts_with("an allocation of 4096 bytes"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_does_not_explain_a_death_it_did_not_announce() {
    // A refusal the worker survived, then a crash: the crash is reported as what it was.
    let dir = tempfile::tempdir().unwrap();
    let command = dying_worker(
        dir.path(),
        MEMORY_REPORT,
        "os.kill(os.getpid(), signal.SIGSEGV)",
    );
    let (limit, message) = death_of(&command).await;
    assert_eq!(limit, "worker");
    assert_eq!(
        message,
        "the worker was killed by signal 11 (SIGSEGV) and named no limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_fills_its_stderr_then_dies_is_still_read_to_its_end() {
    // More than a pipe holds, written without blocking: the parent reads what is there.
    let dir = tempfile::tempdir().unwrap();
    let command = forged_worker(
        dir.path(),
        &format!(
            "start = read()\nimport os\nos.set_blocking(2, False)\ntry:\n    os.write(2, {MEMORY_REPORT:?}.encode())\n    while True:\n        os.write(2, b'x' * 65536)\nexcept BlockingIOError:\n    pass\nos.abort()\n"
        ),
    );
    let started = std::time::Instant::now();
    let (limit, _) = death_of(&command).await;
    assert_eq!(limit, "memory");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_death_is_named_only_by_the_report_it_announces() {
    use larkgate_script::parent::death_cause;
    const ABRT: Option<i32> = Some(6);
    let memory = "larkgate worker limit memory: an allocation of 8 bytes would take the worker past its 100-byte limit (96 bytes in use)";
    let space = "larkgate worker limit address space: the system refused an allocation of 8 bytes (96 bytes in use, under the 100-byte memory limit)";
    let overflow =
        "\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow, aborting\n";
    /// Signal, exit code, last words, the limit named, a fragment of its message.
    type Case = (Option<i32>, Option<i32>, String, &'static str, &'static str);
    let table: &[Case] = &[
        (
            ABRT,
            None,
            format!("\n{memory}\n"),
            "memory",
            "an allocation of 8 bytes",
        ),
        (
            ABRT,
            None,
            format!("\n{space}\n"),
            "address space",
            "the system refused",
        ),
        (ABRT, None, overflow.to_owned(), "stack", "native stack"),
        // The last report wins.
        (
            ABRT,
            None,
            format!("{space}\n{memory}\n"),
            "memory",
            "an allocation",
        ),
        // Bytes that are not UTF-8 around the report do not hide it.
        (
            ABRT,
            None,
            format!("\u{fffd}\n{memory}\n\u{0}"),
            "memory",
            "an allocation",
        ),
        // Not at the start of a line: not a report.
        (
            ABRT,
            None,
            format!("noise {memory}\n"),
            "worker",
            "signal 6 (SIGABRT) and named no limit",
        ),
        // A limit the allocator never reports.
        (
            ABRT,
            None,
            "larkgate worker limit wall time: forged\n".to_owned(),
            "worker",
            "named no limit",
        ),
        // Reports that do not announce the death they come with.
        (
            Some(11),
            None,
            format!("{memory}\n"),
            "worker",
            "signal 11 (SIGSEGV)",
        ),
        (
            Some(9),
            None,
            format!("{memory}\n"),
            "worker",
            "SIGKILL, not sent by larkgate",
        ),
        (
            None,
            Some(101),
            format!("{memory}\n{overflow}"),
            "worker",
            "failed unexpectedly (a panic)",
        ),
        // The worker's own reason for giving up, and nothing else it wrote.
        (
            None,
            Some(5),
            "larkgate worker: cannot do it\n".to_owned(),
            "worker",
            "exited with code 5 before finishing: cannot do it",
        ),
        (
            None,
            Some(5),
            "secret-looking text\n".to_owned(),
            "worker",
            "code 5 before finishing",
        ),
        (None, None, String::new(), "worker", "without a status"),
    ];
    for (signal, code, words, limit, fragment) in table {
        match death_cause(*signal, *code, words.as_bytes()) {
            RunError::Limit {
                limit: got,
                message,
            } => {
                assert_eq!(got, *limit, "{words:?}: {message}");
                assert!(message.contains(fragment), "{words:?}: {message}");
                assert!(!message.contains("secret"), "{message}");
            }
            other => panic!("{words:?}: {other:?}"),
        }
    }
}
