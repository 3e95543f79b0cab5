//! The parent does not trust its worker: a worker that forges a call with arguments the tool
//! does not take is refused by the parent's own binding (the tool is never called), and a frame
//! over the limit ends the run as `limit_exceeded` before the body is read. The forged workers
//! are small Python programs standing in for a compromised interpreter.

use std::time::Duration;

use larkgate_binding::{Limits, Map};
use larkgate_script::{RunError, ScriptLimits, WorkerCommand, run_in_worker};

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
    std::fs::write(&path, program).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_is_bound_again_by_the_parent_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let command = forged_worker(
        dir.path(),
        r#"
start = read()
write({"Call": {"name": "kv_get", "arguments": {"key": 5, "extra": True}}})
answer = read()
write({"Done": {"result": {"Ok": {"answer": answer}}, "printed": "", "usage": {"ticks": 0, "tool_calls": 1, "paces": 0, "peak_memory_bytes": None}}})
"#,
    );
    let caller = Scripted::default();
    let out = run_in_worker(
        &command,
        &caller,
        "f.star",
        "def main():\n    pass\n",
        &Map::new(),
        &limits(),
        false,
    )
    .await
    .into_result()
    .unwrap();
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
    assert!(
        caller.calls.lock().unwrap().is_empty(),
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
        "f.star",
        "def main():\n    pass\n",
        &Map::new(),
        &limits(),
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
    let caller = Scripted::default();
    let result = run_in_worker(
        &command,
        &caller,
        "f.star",
        "def main():\n    pass\n",
        &Map::new(),
        &limits(),
        false,
    )
    .await
    .into_result();
    match result {
        Err(RunError::Limit {
            limit: "worker",
            message,
        }) => {
            assert!(message.contains("signal 11"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
