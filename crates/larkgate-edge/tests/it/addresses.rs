//! Host and Origin refusals in JSON-RPC, and forwarding headers from a trusted proxy, as
//! `[server]` says.

use crate::harness::{Edge, INITIALIZE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_origins_and_forwarding_headers_follow_the_server_section() {
    let edge = Edge::start(
        "public_url = \"https://mcp.example.com/mcp\"\n\
         allowed_hosts = [\"gw.internal\"]\nallowed_origins = [\"https://console.example.com\"]\n\
         trusted_proxies = [\"127.0.0.1\"]\n",
    )
    .await;
    let admin = edge.token("admin").await;
    let post = |headers: Vec<(&'static str, String)>| {
        let (edge, admin) = (&edge, &admin);
        async move {
            let mut all = vec![("mcp-protocol-version", "2025-11-25")];
            all.extend(headers.iter().map(|(n, v)| (*n, v.as_str())));
            edge.post(admin, &all, INITIALIZE).await
        }
    };
    async fn refused(response: reqwest::Response, says: &str) -> String {
        assert_eq!(response.status(), 403);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], -32003, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}");
        message.to_owned()
    }
    for host in [
        "mcp.example.com",
        "gw.internal:8940",
        "127.0.0.1",
        "localhost",
    ] {
        let response = post(vec![("host", host.to_owned())]).await;
        assert_eq!(response.status(), 200, "{host}");
    }
    let message = refused(
        post(vec![("host", "evil.example".to_owned())]).await,
        "allowed_hosts",
    )
    .await;
    assert!(message.contains("\"evil.example\""), "{message}");
    // A long hostile Host is echoed shortened.
    let long = format!("{}.example", "a".repeat(300));
    let message = refused(post(vec![("host", long)]).await, "allowed_hosts").await;
    assert!(message.len() < 400, "{message}");
    let allowed = post(vec![("origin", "https://console.example.com".to_owned())]).await;
    assert_eq!(allowed.status(), 200);
    refused(
        post(vec![("origin", "https://evil.example".to_owned())]).await,
        "allowed_origins",
    )
    .await;
    refused(
        post(vec![("origin", "null".to_owned())]).await,
        "allowed_origins",
    )
    .await;
    // From a trusted proxy (this test is on 127.0.0.1), X-Forwarded-Host is the Host checked.
    refused(
        post(vec![("x-forwarded-host", "evil.example".to_owned())]).await,
        "allowed_hosts",
    )
    .await;
    let forwarded = post(vec![
        ("host", "larkgate:8940".to_owned()),
        ("x-forwarded-host", "mcp.example.com".to_owned()),
    ])
    .await;
    assert_eq!(forwarded.status(), 200);
    edge.stop().await;
}
