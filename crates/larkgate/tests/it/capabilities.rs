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
        ["kv_get", "kv_list", "clock_now", "kv_set", "kv_delete"]
    );
    assert_eq!(listing[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(listing[3]["annotations"]["destructiveHint"], true);
    assert!(listing[0]["inputSchema"]["properties"]["key"].is_object());
    assert!(listing[0]["outputSchema"]["properties"]["found"].is_object());
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
