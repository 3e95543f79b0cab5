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
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ])
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

/// The fields of a text access-log line (`... INFO access edge="http" principal="ada" ...`),
/// or `None` for another line.
pub(crate) fn access_fields(line: &str) -> Option<std::collections::HashMap<String, String>> {
    let rest = line.split_once(" INFO access ")?.1;
    Some(
        rest.split(' ')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
            .collect(),
    )
}

/// A JSON-RPC request in the 2026-07-28 revision to `method`, saying it was forwarded for
/// `client` (`X-Forwarded-For`) when given; answers the HTTP status.
fn post_forwarded(url: &str, token: &str, method: &str, name: &str, client: Option<&str>) -> u16 {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": "raw-7", "method": method,
        "params": {"name": name, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    });
    let mut request = reqwest::blocking::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name);
    if let Some(client) = client {
        request = request.header("x-forwarded-for", client);
    }
    request.json(&body).send().unwrap().status().as_u16()
}

#[test]
fn serve_writes_one_access_line_per_request_with_no_token_and_no_argument() {
    let policy =
        "[policy.roles.admin]\ncall = [\"*\"]\n[policy.roles.reader]\ncall = [\"kv_get\"]\n";
    let (dir, server, token) = crate::serve::admin_gateway(policy);
    let d = dir.path();
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let bob = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let url = server.url.clone();
    let secret = "hunter2-argument";
    let call_at = |url: &str, token: &str, tool: &str| {
        crate::traces::call(
            url,
            token,
            None,
            None,
            tool,
            serde_json::json!({"key": "k", "value": secret}),
        )
    };
    let call = |token: &str, tool: &str| call_at(&url, token, tool);
    call(&token, "kv_set");
    // Hidden from bob: the same answer as a tool that does not exist.
    call(&bob, "kv_set");
    call("lgt_not-a-valid-token", "kv_get");
    // A client-written name cannot forge a line nor carry escape codes into the log.
    call(&token, "kv_get\nINFO access principal=\"root\"\u{1b}[2J");
    // rmcp answers a method it does not know with 404 and a JSON-RPC error; its sender's
    // claim to forward for another address is not believed (no trusted proxies).
    assert_eq!(
        post_forwarded(&url, &token, "nope/nope", "x", Some("203.0.113.9")),
        404
    );

    let mut lines = Vec::new();
    while lines.len() < 5 {
        let line = server.next_stderr_line();
        assert!(!line.contains(&token) && !line.contains(&bob), "{line}");
        assert!(!line.contains(secret), "an argument in the log: {line}");
        assert!(!line.contains('\u{1b}'), "{line:?}");
        if let Some(fields) = access_fields(&line) {
            lines.push(fields);
        }
    }
    let expected = [
        ("ada", "tools/call", "kv_set", "ok", "200"),
        ("bob", "tools/call", "kv_set", "not_found", "200"),
        ("-", "-", "-", "unauthenticated", "401"),
        (
            "ada",
            "tools/call",
            "kv_get?INFO?access?principal=\\\"root\\\"?[2J",
            // Without the `Mcp-Name` header (a newline is no header text), rmcp refuses it.
            "rpc_error_-32020",
            "400",
        ),
        ("ada", "other", "-", "method_not_found", "404"),
    ];
    for (fields, (principal, method, tool, outcome, status)) in lines.iter().zip(expected) {
        let got = (
            fields["principal"].as_str(),
            fields["method"].as_str(),
            fields["tool"].as_str(),
            fields["outcome"].as_str(),
            fields["status"].as_str(),
        );
        assert_eq!(
            got,
            (principal, method, tool, outcome, status),
            "{fields:?}"
        );
        assert_eq!(fields["edge"], "http");
        assert_eq!(fields["client"], "127.0.0.1", "{fields:?}");
        assert!(
            fields["duration_ms"].parse::<f64>().unwrap() > 0.0,
            "{fields:?}"
        );
    }
    assert_eq!(lines[0]["request_id"], "1");
    assert_eq!(lines[4]["request_id"], "raw-7");

    // Off in the configuration: no lines.
    let rest = server.stop_reading_stderr();
    assert!(rest.iter().all(|l| access_fields(l).is_none()), "{rest:?}");
    std::fs::write(
        crate::config_path(d),
        format!("{policy}[server]\naccess_log = false\n"),
    )
    .unwrap();
    let server = crate::serve::Server::start(d);
    call_at(&server.url, &token, "kv_get");
    let rest = server.stop_reading_stderr();
    assert!(rest.iter().all(|l| access_fields(l).is_none()), "{rest:?}");

    // Behind a trusted proxy, the line names the client it forwarded for.
    std::fs::write(
        crate::config_path(d),
        format!("{policy}[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n"),
    )
    .unwrap();
    let server = crate::serve::Server::start(d);
    assert_eq!(
        post_forwarded(
            &server.url,
            &token,
            "tools/call",
            "kv_get",
            Some("203.0.113.9")
        ),
        200
    );
    let rest = server.stop_reading_stderr();
    let lines: Vec<_> = rest.iter().filter_map(|l| access_fields(l)).collect();
    assert_eq!(lines.len(), 1, "{rest:?}");
    assert_eq!(lines[0]["client"], "203.0.113.9", "{rest:?}");
}

#[test]
fn stdio_writes_access_lines_in_json_to_stderr_and_only_mcp_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["principal", "add", "desk", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stderr = runtime.block_on(async {
        use rmcp::ServiceExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
        command
            .current_dir(d)
            .arg("stdio")
            .env("LARKGATE_TOKEN", &token)
            .env("LARKGATE_LOG_FORMAT", "json");
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let client = ().serve(transport).await.unwrap();
        let arguments = serde_json::json!({"key": "k", "value": "hunter2-argument"});
        let set = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("kv_set")
                    .with_arguments(arguments.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_eq!(set.is_error, Some(false), "{set:?}");
        client.cancel().await.unwrap();
        let mut text = String::new();
        use tokio::io::AsyncReadExt;
        stderr.unwrap().read_to_string(&mut text).await.unwrap();
        text
    });
    assert!(
        !stderr.contains(&token) && !stderr.contains("hunter2"),
        "{stderr}"
    );
    let lines = json_lines(&stderr);
    let access: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["message"] == "access").collect();
    let call = access
        .iter()
        .find(|l| l["method"] == "tools/call")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(call["edge"], "stdio");
    assert_eq!(call["principal"], "desk");
    assert_eq!(call["tool"], "kv_set");
    assert_eq!(call["outcome"], "ok");
    assert_eq!(call["level"], "INFO");
    assert!(call["duration_ms"].as_f64().unwrap() > 0.0, "{call}");
    assert!(
        call["status"].is_null(),
        "no HTTP status over stdio: {call}"
    );
    assert!(
        access
            .iter()
            .any(|l| l["method"] == "initialize" && l["outcome"] == "ok"),
        "{access:?}"
    );
}

#[test]
fn a_sessions_event_stream_is_logged_when_it_ends_with_how_long_it_was_open() {
    let (_dir, server, token) = crate::serve::admin_gateway("");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = crate::serve::client(
            &server.url,
            &token,
            larkgate_upstream::client::Revisions::Legacy,
        )
        .await
        .unwrap();
        client
            .call_tool("clock_now", Default::default())
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        client.close().await;
    });
    let lines: Vec<_> = server
        .stop_reading_stderr()
        .iter()
        .filter_map(|l| access_fields(l))
        .collect();
    let initialize = lines.iter().find(|l| l["method"] == "initialize").unwrap();
    let session = initialize["session"].clone();
    assert_ne!(session, "-", "the session it opened: {initialize:?}");
    let call = lines.iter().find(|l| l["method"] == "tools/call").unwrap();
    assert_eq!(
        (call["tool"].as_str(), call["session"].as_str()),
        ("clock_now", session.as_str())
    );
    // The stream's line is written when it ends: after the call's, open for the whole session.
    let stream = lines
        .iter()
        .position(|l| l["method"] == "GET")
        .unwrap_or_else(|| panic!("{lines:?}"));
    let called = lines
        .iter()
        .position(|l| l["method"] == "tools/call")
        .unwrap();
    assert!(stream > called, "{lines:?}");
    let open_ms: f64 = lines[stream]["duration_ms"].parse().unwrap();
    assert!(open_ms >= 400.0, "{:?}", lines[stream]);
    assert_eq!(lines[stream]["session"], session);
    assert_eq!(lines[stream]["principal"], "ada");
    let end = lines.iter().find(|l| l["method"] == "DELETE").unwrap();
    assert_eq!(
        (end["session"].as_str(), end["status"].as_str()),
        (session.as_str(), "200")
    );
}
