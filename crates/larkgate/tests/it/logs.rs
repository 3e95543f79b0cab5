//! What larkgate writes to stderr, as a log collector reads it: text without colour codes when
//! stderr is not a terminal, one JSON object per line with `--log-format json` (or the
//! environment, or `[server] log_format`), and quiet commands apart from `serve` and `stdio`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::{larkgate_in, ok, stderr};

/// A configuration with an upstream that is down and may reach a non-public address: every
/// command that starts the federation warns about it, and `serve` logs its allow-list.
const DOWN_UPSTREAM: &str =
    "[[upstreams]]\nalias = \"down\"\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"127.0.0.1\"]\n";

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect()
}

#[test]
fn commands_log_only_warnings_and_no_colour_codes_into_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), DOWN_UPSTREAM).unwrap();
    let output = larkgate_in(d, &["call", "clock_now"]);
    let log = stderr(&output);
    assert!(log.contains("an upstream is down"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a pipe: {log:?}");
    assert!(
        !log.contains("non-public targets") && !log.contains(" INFO "),
        "a command logged more than warnings: {log}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_from_the_flag_the_environment_or_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), DOWN_UPSTREAM).unwrap();
    let check = |output: std::process::Output| {
        let lines = json_lines(&stderr(&output));
        let warning = lines
            .iter()
            .find(|l| l["message"] == "an upstream is down")
            .unwrap_or_else(|| panic!("{lines:?}"));
        assert_eq!(warning["level"], "WARN");
        assert_eq!(warning["alias"], "down");
        assert!(warning["timestamp"].as_str().unwrap().ends_with('Z'));
        // Why the command failed is a line of its own, at error.
        let failed = lines.last().unwrap();
        assert_eq!(failed["level"], "ERROR", "{failed}");
        assert!(
            failed["message"]
                .as_str()
                .unwrap()
                .starts_with("not_found: no tool named \"nope\""),
            "{failed}"
        );
    };
    check(larkgate_in(d, &["--log-format", "json", "call", "nope"]));
    let from_env = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(["call", "nope"])
        .env("LARKGATE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    check(from_env);
    std::fs::write(
        crate::config_path(d),
        format!("[server]\nlog_format = \"json\"\n{DOWN_UPSTREAM}"),
    )
    .unwrap();
    check(larkgate_in(d, &["call", "nope"]));
    // The flag wins over the file.
    let text = stderr(&larkgate_in(d, &["--log-format", "text", "call", "nope"]));
    assert!(text.contains("larkgate: not_found"), "{text}");
}

#[test]
fn a_log_format_that_does_not_exist_is_refused_naming_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let output = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(["principal", "list"])
        .env("LARKGATE_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .contains("LARKGATE_LOG_FORMAT=\"xml\" is not a log format: use \"text\" or \"json\""),
        "{}",
        stderr(&output)
    );
    let flag = larkgate_in(d, &["--log-format", "xml", "principal", "list"]);
    assert!(!flag.status.success());
    assert!(
        stderr(&flag).contains("possible values: text, json"),
        "{}",
        stderr(&flag)
    );
    std::fs::write(crate::config_path(d), "[server]\nlog_format = \"xml\"\n").unwrap();
    let file = crate::fails(d, &["check"]);
    assert!(file.contains("log_format"), "{file}");
}

#[test]
fn serve_in_json_says_where_it_serves_and_logs_the_allow_lists_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), DOWN_UPSTREAM).unwrap();
    ok(d, &["principal", "list"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        let serving = value["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("serving MCP at http://127.0.0.1:"));
        lines.push(value);
        if serving {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let allow = lines
        .iter()
        .find(|l| l["message"] == "an upstream may reach these non-public targets")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(allow["level"], "INFO");
    assert_eq!(allow["alias"], "down");
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("configuration read from"))),
        "{lines:?}"
    );
}
