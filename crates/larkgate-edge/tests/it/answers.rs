//! Every answer of `/mcp` is JSON-RPC a client can read: a request whose id the MCP service
//! could not answer is an invalid request with `"id": null`, and what the transport refuses
//! before any method runs (a session it does not know, a header it needs) comes with its own
//! status as a JSON-RPC error in `application/json`, not as plain text.

use crate::harness::{Edge, INITIALIZE};

/// The parts of an answer a client reads: status, content type, body as JSON.
async fn read(response: reqwest::Response) -> (u16, String, serde_json::Value) {
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("a {status} answer that is not JSON: {text:?}"));
    (status, kind, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_the_service_cannot_answer_are_invalid_requests_in_json_rpc() {
    let edge = Edge::start("").await;
    let admin = edge.token("admin").await;
    let list = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        )
    };
    let latest = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    for id in [
        "1.5",
        "18446744073709551616",
        "1e999",
        "-9223372036854775809",
    ] {
        let (status, kind, body) = read(edge.post(&admin, &latest, &list(id)).await).await;
        assert_eq!(status, 400, "{id}: {body}");
        assert_eq!(kind, "application/json", "{id}");
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], serde_json::Value::Null, "{id}: {body}");
        assert_eq!(body["error"]["code"], -32600, "{id}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"id\" must be a string or an integer"),
            "{body}"
        );
    }
    // Integers in every form rmcp reads, and strings, are answered as usual.
    for id in ["7", "\"seven\"", "1e2", "-9223372036854775808"] {
        let response = edge.post(&admin, &latest, &list(id)).await;
        assert_eq!(response.status(), 200, "{id}");
    }
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_transport_refuses_is_answered_in_json_rpc_with_its_status() {
    let edge = Edge::start("").await;
    let admin = edge.token("admin").await;
    let legacy = ("mcp-protocol-version", "2025-11-25");
    let http = reqwest::Client::new();
    // A session the server does not know, for a request and for the event stream. (A DELETE
    // of one is answered 200 with no body: it is gone either way.)
    let unknown = [("mcp-session-id", "no-such-session"), legacy];
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let mut answers = vec![read(edge.post(&admin, &unknown, list).await).await];
    let mut stream = http
        .get(&edge.url)
        .bearer_auth(&admin)
        .header("accept", "text/event-stream");
    for (name, value) in unknown {
        stream = stream.header(name, value);
    }
    answers.push(read(stream.send().await.unwrap()).await);
    for (status, kind, body) in answers {
        assert_eq!(status, 404, "{body}");
        assert_eq!(kind, "application/json");
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    }
    // A 2025-11-25 request without the session initialize opened.
    let (status, kind, body) = read(edge.post(&admin, &[legacy], list).await).await;
    assert!((400..500).contains(&status), "{status}: {body}");
    assert_eq!(kind, "application/json");
    assert_eq!(body["jsonrpc"], "2.0");
    // The server keeps serving.
    let opened = edge.post(&admin, &[legacy], INITIALIZE).await;
    assert_eq!(opened.status(), 200);
    edge.stop().await;
}
