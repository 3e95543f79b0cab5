//! `larkgate capabilities` as a user runs it.

use std::process::Command;

fn larkgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .args(args)
        .output()
        .expect("larkgate runs")
}

#[test]
fn capabilities_lists_signatures_and_schemas_as_text() {
    let out = larkgate(&["capabilities"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "kv_get(*, key: str, default: str | None = None) -> dict",
        "clock_now() -> dict",
        "kv_set(*, key: str, value: str) -> dict",
        "  Write a key (write)",
        "  Read a key (read-only)",
        "  annotations: readOnlyHint=false destructiveHint=true idempotentHint=true openWorldHint=false",
        "approvals_approve(*, id: str, reason: str | None = None) -> dict",
        r#"  input schema:  {"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }
}

#[test]
fn capabilities_json_is_machine_readable() {
    let out = larkgate(&["capabilities", "--json"]);
    assert!(out.status.success());
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = listing
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "clock_now",
            "kv_get",
            "kv_list",
            "kv_delete",
            "kv_set",
            "approvals_list",
            "approvals_approve",
            "approvals_deny"
        ]
    );
    assert_eq!(listing[1]["annotations"]["readOnlyHint"], true);
    assert_eq!(listing[4]["annotations"]["destructiveHint"], true);
    assert!(listing[1]["inputSchema"]["properties"]["key"].is_object());
    assert!(listing[1]["outputSchema"]["properties"]["found"].is_object());
    assert_eq!(
        listing[1]["_meta"]["larkgate/origin"]["source"],
        "capability"
    );
    assert_eq!(listing[6]["_meta"]["larkgate/origin"]["source"], "platform");
}

#[test]
fn an_unknown_command_fails_with_usage() {
    let out = larkgate(&["frobnicate"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unrecognized subcommand 'frobnicate'"),
        "{stderr}"
    );
}
