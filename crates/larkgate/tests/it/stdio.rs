//! `larkgate stdio` as a desktop client starts it: a child process speaking MCP on its pipes,
//! authenticated by `LARKGATE_TOKEN` or `--token-file`.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::{fails, ok};

/// Admins call everything; readers read the key-value store and the clock.
const POLICY: &str = "[policy.roles.admin]\ncall = [\"*\"]\n[policy.roles.reader]\ncall = [\"kv_get\", \"clock_now\"]\n";

fn command(dir: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
    command.current_dir(dir).arg("stdio");
    command
}

#[test]
fn a_desktop_client_lists_and_calls_as_the_token_s_principal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "desk", "--roles", "reader,author"]);
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    std::fs::write(d.join("token"), format!("{token}\n")).unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for from_file in [false, true] {
            let mut child = command(d);
            if from_file {
                child.args(["--token-file", "token"]);
            } else {
                child.env("LARKGATE_TOKEN", &token);
            }
            let client = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
            let tools = client.list_all_tools().await.unwrap();
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            assert!(names.contains(&"kv_get"), "{names:?}");
            assert!(!names.contains(&"kv_set"), "not the reader's: {names:?}");
            let now = client
                .call_tool(CallToolRequestParams::new("clock_now"))
                .await
                .unwrap();
            assert!(now.structured_content.unwrap()["unix_ms"].as_i64().unwrap() > 0);
            let refused = client
                .call_tool(CallToolRequestParams::new("kv_set"))
                .await
                .unwrap();
            assert_eq!(refused.is_error, Some(true));
            // Code mode over stdio: a draft runs in a worker, as the token's principal.
            let source = "def main():\n    return clock_now()['unix_ms'] > 0\n";
            let ran = client
                .call_tool(
                    CallToolRequestParams::new("script_run_draft").with_arguments(
                        serde_json::json!({"source": source})
                            .as_object()
                            .unwrap()
                            .clone(),
                    ),
                )
                .await
                .unwrap();
            assert_eq!(
                ran.structured_content.as_ref().unwrap()["result"],
                true,
                "{ran:?}"
            );
            client.cancel().await.unwrap();
        }
    });
    let tail = ok(d, &["audit", "tail", "--principal", "desk"]);
    assert!(tail.contains("clock_now -> ok"), "{tail}");
    assert!(tail.contains("script_run_draft -> ok"), "{tail}");

    // Without a valid token there is no session.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .arg("stdio")
        .env("LARKGATE_TOKEN", "lgt_nope")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("the token is not valid"));
    let missing = fails(d, &["stdio"]);
    assert!(missing.contains("LARKGATE_TOKEN"), "{missing}");
}

/// `larkgate stdio` with `token` in the environment, its standard input closed; its stderr.
fn stdio_refused(d: &std::path::Path, token: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .arg("stdio")
        .env("LARKGATE_TOKEN", token)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn beside_a_running_serve_a_desktop_client_is_relayed_to_it_and_only_over_loopback() {
    use crate::serve::Server;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    let server = Server::start(d);
    // The server announces where loopback reaches it.
    let announced = d.join("larkgate-data").join("serve.url");
    assert_eq!(
        std::fs::read_to_string(&announced).unwrap().trim(),
        server.url
    );
    ok(d, &["principal", "add", "desk", "--roles", "reader"]);
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut child = command(d);
        child.env("LARKGATE_TOKEN", &token);
        let (transport, stderr) = TokioChildProcess::builder(child)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let client = ().serve(transport).await.unwrap();
        // It says which configuration it read, then that it relays.
        let mut stderr = tokio::io::BufReader::new(stderr.unwrap());
        let mut said = String::new();
        while !said.contains("relaying") {
            let read = tokio::io::AsyncBufReadExt::read_line(&mut stderr, &mut said)
                .await
                .unwrap();
            assert!(read > 0, "{said}");
        }
        assert!(
            said.starts_with("larkgate: configuration read from ./larkgate-data/larkgate.toml\n"),
            "{said}"
        );
        assert!(
            said.contains("relaying this stdio session as desk"),
            "{said}"
        );
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(names.contains(&"kv_get"), "{names:?}");
        assert!(!names.contains(&"kv_set"), "not the reader's: {names:?}");
        let now = client
            .call_tool(CallToolRequestParams::new("clock_now"))
            .await
            .unwrap();
        assert!(now.structured_content.unwrap()["unix_ms"].as_i64().unwrap() > 0);
        let refused = client
            .call_tool(
                CallToolRequestParams::new("kv_set").with_arguments(
                    serde_json::json!({"key": "k", "value": "v"})
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
            )
            .await
            .unwrap();
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(
            refused.meta.clone().expect("an envelope in _meta").0["larkgate/envelope"].clone()["category"],
            "access",
            "the server's own envelope, relayed"
        );
        // The token revoked: the server refuses it, and the relay says so (as a session
        // without a server would), not that the server is down; nothing is listed.
        ok(d, &["token", "revoke", &token[4..16]]);
        let revoked = client
            .call_tool(CallToolRequestParams::new("clock_now"))
            .await
            .unwrap();
        assert_eq!(
            refusal_code(&revoked).as_deref(),
            Some("unauthenticated"),
            "{revoked:?}"
        );
        assert!(client.list_all_tools().await.unwrap().is_empty());
        client.cancel().await.unwrap();
    });
    // The calls crossed the server's pipeline: its chain has them, as desk's (waiting for the
    // last one, the refused `kv_set`: the server flushes every 50 ms).
    let mut tail = String::new();
    for _ in 0..100 {
        tail = ok(d, &["audit", "tail", "--principal", "desk"]);
        if tail.contains("kv_set") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(tail.contains("clock_now -> ok"), "{tail}");
    assert!(tail.contains("kv_set"), "{tail}");

    // The token is checked before anything is sent: the revoked one, and one never made.
    assert!(stdio_refused(d, &token).contains("the token is not valid"));
    assert!(stdio_refused(d, "lgt_nope").contains("the token is not valid"));
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    // The announcement decides where the token goes: only to a loopback IP over http.
    let original = std::fs::read_to_string(&announced).unwrap();
    for hostile in [
        "http://evil.example/mcp",
        "http://10.0.0.1:8940/mcp",
        "https://127.0.0.1:1/mcp",
        "http://localhost:1/mcp",
    ] {
        std::fs::write(&announced, hostile).unwrap();
        let refused = stdio_refused(d, &token);
        assert!(
            refused.contains("refusing to send the token there"),
            "{hostile}: {refused}"
        );
    }
    std::fs::remove_file(&announced).unwrap();
    let refused = stdio_refused(d, &token);
    assert!(
        refused.contains("no running `larkgate serve` announced"),
        "{refused}"
    );
    // A loopback address where nothing listens (a serve that crashed): said so.
    std::fs::write(&announced, "http://127.0.0.1:1/mcp\n").unwrap();
    let refused = stdio_refused(d, &token);
    assert!(refused.contains("cannot be reached"), "{refused}");

    // A server removes its own announcement when it stops.
    std::fs::write(&announced, &original).unwrap();
    assert!(server.stop().success());
    assert!(!announced.exists());
}

/// The refusal code of a call's result, or `None` when it succeeded.
/// A desktop client's gated call through the relay waits for its approver as an HTTP client's
/// does: the relay (a 2026-07-28 client of `serve`) sends each "still waiting" round again,
/// and the call runs once an operator approves it with `larkgate approvals approve` beside the
/// server (a decision `serve` finds by reading the store). A call the desktop client cancels is
/// cancelled at the server too, and its request withdrawn.
#[test]
fn a_relayed_desktop_call_waits_for_its_approver_and_a_cancelled_one_withdraws_its_request() {
    use crate::serve::Server;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let policy = "[policy.roles.writer]\ncall = [\"kv_*\"]\n[policy.approvals]\nrequire = [\
                  { tool = \"kv_delete\", wait_seconds = 30 }, \
                  { tool = \"kv_set\", wait_seconds = 600 }]\n";
    std::fs::write(crate::config_path(d), policy).unwrap();
    let server = Server::start(d);
    ok(d, &["principal", "add", "desk", "--roles", "writer"]);
    ok(d, &["principal", "add", "alice", "--roles", "approver"]);
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut child = command(d);
        child.env("LARKGATE_TOKEN", &token);
        let client = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
        let peer = client.peer().clone();
        let held = tokio::spawn(async move {
            let arguments = serde_json::json!({"key": "k"}).as_object().unwrap().clone();
            peer.call_tool(CallToolRequestParams::new("kv_delete").with_arguments(arguments))
                .await
        });
        // A round (3 s, a tenth of the wait) ends and the relay asks again: the server's chain
        // records the round's answer. Then the operator approves.
        let dir = d.to_owned();
        let id = tokio::task::spawn_blocking(move || {
            for _ in 0..600 {
                let tail = ok(&dir, &["audit", "tail", "--principal", "desk"]);
                if tail.contains("kv_delete -> approval_required") {
                    let listed = ok(&dir, &["approvals", "list", "--json"]);
                    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
                    return listed["approvals"][0]["id"].as_str().unwrap().to_owned();
                }
                // A readiness poll: the round ends in the server process and is seen only in
                // its store (nothing else tells this test); bounded, never waited out.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            panic!("no round of the held call ended");
        })
        .await
        .unwrap();
        ok(d, &["--as", "alice", "approvals", "approve", &id]);
        let answer = held.await.unwrap().unwrap();
        assert_eq!(refusal_code(&answer), None, "{answer:?}");
        // The desktop client gives up on a held call: the relay cancels it at the server, and
        // its request is withdrawn. (Its rounds are a minute long: the cancellation reaches a
        // round in flight.)
        let arguments = serde_json::json!({"key": "k2", "value": "v"})
            .as_object()
            .unwrap()
            .clone();
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
                CallToolRequestParams::new("kv_set").with_arguments(arguments),
            ));
        let handle = client
            .peer()
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .unwrap();
        let listed = |status: &'static str| {
            let dir = d.to_owned();
            tokio::task::spawn_blocking(move || {
                for _ in 0..600 {
                    let listed = ok(&dir, &["approvals", "list", "--status", status, "--json"]);
                    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
                    let found = listed["approvals"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|a| a["tool"] == "kv_set");
                    if let Some(found) = found {
                        return found["id"].as_str().unwrap().to_owned();
                    }
                    // A readiness poll on the server's store, as above.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                panic!("no {status} request for kv_set");
            })
        };
        let pending = listed("pending").await.unwrap();
        handle
            .cancel(Some("the user gave up".to_owned()))
            .await
            .unwrap();
        assert_eq!(listed("withdrawn").await.unwrap(), pending);
        client.cancel().await.unwrap();
    });
    let listed = ok(d, &["approvals", "list", "--status", "used", "--json"]);
    assert!(listed.contains("\"kv_delete\""), "{listed}");
    drop(server);
}

fn refusal_code(result: &rmcp::model::CallToolResult) -> Option<String> {
    (result.is_error == Some(true)).then(|| {
        result
            .meta
            .as_ref()
            .and_then(|m| m.0.get("larkgate/envelope"))
            .and_then(|e| e["code"].as_str())
            .unwrap_or("?")
            .to_owned()
    })
}

#[test]
fn a_running_session_sees_role_changes_revocation_and_removal_at_its_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "desk", "--roles", "reader"]);
    ok(d, &["principal", "add", "temp", "--roles", "reader"]);
    let desk = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    let temp = ok(d, &["token", "create", "--principal", "temp"])
        .trim()
        .to_owned();
    let set = |key: &str| {
        CallToolRequestParams::new("kv_set").with_arguments(
            serde_json::json!({"key": key, "value": "v"})
                .as_object()
                .unwrap()
                .clone(),
        )
    };

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut child = command(d);
        child.env("LARKGATE_TOKEN", &desk);
        let session = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
        let clock = || CallToolRequestParams::new("clock_now");

        // A reader may not write...
        let refused = session.call_tool(set("a")).await.unwrap();
        assert_eq!(refusal_code(&refused).as_deref(), Some("not_found"));
        // ...until an admin makes it one, beside the running session: the next call writes.
        ok(d, &["principal", "set-roles", "desk", "--roles", "admin"]);
        let written = session.call_tool(set("a")).await.unwrap();
        assert_eq!(refusal_code(&written), None, "{written:?}");
        let names = session.list_all_tools().await.unwrap();
        assert!(names.iter().any(|t| t.name == "kv_set"));
        // Back to reader: refused again.
        ok(d, &["principal", "set-roles", "desk", "--roles", "reader"]);
        let refused = session.call_tool(set("b")).await.unwrap();
        assert_eq!(refusal_code(&refused).as_deref(), Some("not_found"));

        // The token revoked: the very next call is unauthenticated, and nothing is listed.
        assert_eq!(
            refusal_code(&session.call_tool(clock()).await.unwrap()),
            None
        );
        ok(d, &["token", "revoke", &desk[4..16]]);
        let revoked = session.call_tool(clock()).await.unwrap();
        assert_eq!(refusal_code(&revoked).as_deref(), Some("unauthenticated"));
        assert!(session.list_all_tools().await.unwrap().is_empty());

        session.cancel().await.unwrap();

        // The principal removed: its session is unauthenticated from the next call. (One
        // stdio session at a time owns a data directory; this one opens after the first.)
        let mut child = command(d);
        child.env("LARKGATE_TOKEN", &temp);
        let other = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
        assert_eq!(refusal_code(&other.call_tool(clock()).await.unwrap()), None);
        ok(d, &["principal", "remove", "temp"]);
        let removed = other.call_tool(clock()).await.unwrap();
        assert_eq!(refusal_code(&removed).as_deref(), Some("unauthenticated"));
        other.cancel().await.unwrap();
    });
}

/// The README's desktop configuration: `larkgate --data-dir DIR stdio`, started by a client
/// from a working directory of its own, runs under `DIR/larkgate.toml`: the gated tool asks
/// for an approval. So do the operator's commands with `LARKGATE_DATA_DIR`.
#[test]
fn started_from_elsewhere_the_data_directorys_policy_still_gates_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(
        data.join("larkgate.toml"),
        format!("{POLICY}[policy.approvals]\nrequire = [\"kv_delete\"]\n"),
    )
    .unwrap();
    let data_arg = data.to_str().unwrap();
    ok(
        &elsewhere,
        &[
            "--data-dir",
            data_arg,
            "principal",
            "add",
            "desk",
            "--roles",
            "admin",
        ],
    );
    let token = ok(
        &elsewhere,
        &[
            "--data-dir",
            data_arg,
            "token",
            "create",
            "--principal",
            "desk",
        ],
    )
    .trim()
    .to_owned();
    // With the variable instead of the flag, from yet another directory: the same policy.
    let by_env = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir.path())
        .env("LARKGATE_DATA_DIR", &data)
        .args(["--as", "desk", "call", "kv_delete", "--arg", "key=k"])
        .output()
        .unwrap();
    let said = crate::stderr(&by_env);
    assert!(!by_env.status.success(), "{said}");
    assert!(said.contains("approval_required"), "{said}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
        child
            .current_dir(&elsewhere)
            .args(["--data-dir", data_arg, "stdio"])
            .env("LARKGATE_TOKEN", &token);
        let (transport, stderr) = TokioChildProcess::builder(child)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let client = ().serve(transport).await.unwrap();
        let mut said = String::new();
        tokio::io::AsyncBufReadExt::read_line(
            &mut tokio::io::BufReader::new(stderr.unwrap()),
            &mut said,
        )
        .await
        .unwrap();
        let expected = format!(
            "larkgate: configuration read from {}",
            data.join("larkgate.toml").display()
        );
        assert_eq!(said.trim(), expected);
        let gated = client
            .call_tool(
                CallToolRequestParams::new("kv_delete")
                    .with_arguments(serde_json::json!({"key": "k"}).as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_eq!(refusal_code(&gated).as_deref(), Some("approval_required"));
        client.cancel().await.unwrap();
    });
    // Without a file, it says it read none.
    std::fs::remove_file(data.join("larkgate.toml")).unwrap();
    let check = ok(&elsewhere, &["--data-dir", data_arg, "check"]);
    assert!(check.contains("no configuration file"), "{check}");
}

/// The JSON object that follows `heading` in `text` (what the first start or `client-config`
/// printed under it).
fn json_after(text: &str, heading: &str) -> serde_json::Value {
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in {text}"));
    let rest = &text[at..];
    let start = rest.find('{').unwrap();
    let mut stream = serde_json::Deserializer::from_str(&rest[start..]).into_iter();
    stream.next().unwrap().unwrap()
}

/// The first start prints the console's URL and both client configurations; the stdio one,
/// started as a desktop client starts it (its command, arguments and environment, from a
/// working directory of the client's), reaches this data directory while `serve` runs and
/// after it stops. `client-config` prints them again; a `stdio` pointed at no data directory
/// says which one it looked for and creates nothing.
#[test]
fn the_first_start_prints_both_client_configurations_and_the_stdio_one_works_from_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    let server = crate::serve::Server::start(d);
    let printed = server.first_start.clone();
    let console = format!("{}/admin", server.url.trim_end_matches("/mcp"));
    assert!(
        printed.contains(&format!("The admin console: {console}")),
        "{printed}"
    );
    let http = json_after(&printed, "connects to a URL");
    assert_eq!(http["mcpServers"]["larkgate"]["url"], server.url.as_str());
    let desktop = json_after(&printed, "starts its servers as programs");
    let entry = &desktop["mcpServers"]["larkgate"];
    let data_dir = d.join("larkgate-data").canonicalize().unwrap();
    assert_eq!(
        entry["args"],
        serde_json::json!(["--data-dir", data_dir.to_str().unwrap(), "stdio"])
    );

    // Started as the client would, from somewhere else: relayed to serve, then on its own.
    let elsewhere = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let start = || {
        let mut child = tokio::process::Command::new(entry["command"].as_str().unwrap());
        child.current_dir(elsewhere.path());
        for arg in entry["args"].as_array().unwrap() {
            child.arg(arg.as_str().unwrap());
        }
        for (name, value) in entry["env"].as_object().unwrap() {
            child.env(name, value.as_str().unwrap());
        }
        child
    };
    let call_clock = |child: tokio::process::Command| {
        runtime.block_on(async {
            let client = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
            let now = client
                .call_tool(CallToolRequestParams::new("clock_now"))
                .await
                .unwrap();
            assert_ne!(now.is_error, Some(true), "{now:?}");
            client.cancel().await.unwrap();
        })
    };
    call_clock(start());
    assert!(server.stop().success());
    call_clock(start());
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none(),
        "stdio created something in the client's working directory"
    );

    // Again, any time: with a token given, or a placeholder.
    let again = ok(d, &["client-config", "--stdio"]);
    let entry: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        entry["mcpServers"]["larkgate"]["env"]["LARKGATE_TOKEN"],
        "<TOKEN>"
    );
    let token = crate::serve::token_in(&printed);
    std::fs::write(d.join("token"), &token).unwrap();
    let http = ok(d, &["client-config", "--http", "--token-file", "token"]);
    assert!(http.contains(&format!("Bearer {token}")), "{http}");

    // A desktop client configured without --data-dir: told where stdio looked, nothing made.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(elsewhere.path())
        .env("LARKGATE_TOKEN", &token)
        .env_remove("LARKGATE_DATA_DIR")
        .arg("stdio")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8(refused.stderr).unwrap();
    assert!(
        said.contains("there is no data directory at")
            && said.contains("larkgate-data")
            && said.contains("--data-dir"),
        "{said}"
    );
    // Said as a person would write it: the directory as a clean absolute path, no gaps.
    let looked = elsewhere
        .path()
        .canonicalize()
        .unwrap()
        .join("larkgate-data");
    assert!(
        said.contains(&format!("at {} (", looked.display())),
        "{said}"
    );
    assert!(!said.contains("  "), "{said:?}");
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none(),
        "stdio created a data directory"
    );
}

/// A desktop session's `larkgate stdio` reloads its configuration as `serve` does (SIGHUP,
/// which `larkgate reload` sends to whichever process holds the data directory): the session
/// goes on, and its next call is decided by the new policy.
#[test]
fn a_reload_reaches_a_running_stdio_session_at_its_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "desk", "--roles", "reader"]);
    let desk = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    let set = CallToolRequestParams::new("kv_set").with_arguments(
        serde_json::json!({"key": "k", "value": "v"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut child = command(d);
        child.env("LARKGATE_TOKEN", &desk);
        let session = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
        let refused = session.call_tool(set.clone()).await.unwrap();
        assert_eq!(refusal_code(&refused).as_deref(), Some("not_found"));

        std::fs::write(
            crate::config_path(d),
            POLICY.replace(
                "\"kv_get\", \"clock_now\"",
                "\"kv_get\", \"clock_now\", \"kv_set\"",
            ),
        )
        .unwrap();
        let said = ok(d, &["reload"]);
        assert!(said.contains("[policy] changed"), "{said}");
        let written = session.call_tool(set.clone()).await.unwrap();
        assert_eq!(refusal_code(&written), None, "{written:?}");
        session.cancel().await.unwrap();
    });
}
