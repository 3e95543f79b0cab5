//! The official MCP SDK clients' helpers for the tests that drive them against `larkgate
//! serve` (sign-in, the console, a run in flight at shutdown). The clients' own walk through
//! the edge — code mode and list-changed notifications in both revisions — is the edge's test,
//! in one process (`crates/larkgate-edge/tests/it/sdk.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

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
