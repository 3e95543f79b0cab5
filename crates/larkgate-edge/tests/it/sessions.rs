//! 2025-11-25 sessions: capped per principal and in total, refused in JSON-RPC with what to
//! do, and pruned from the registry when a client closes one or it idles out.

use std::time::{Duration, Instant};

use crate::harness::{Edge, INITIALIZE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_per_principal_and_in_total_and_pruned_when_closed_or_idle() {
    let edge = Edge::start(
        "max_sessions = 3\nmax_sessions_per_principal = 2\nsession_idle_timeout_ms = 1500\n",
    )
    .await;
    let (admin, bob) = (edge.token("admin").await, edge.token("bob").await);
    let open = |token: &str| {
        let (edge, token) = (&edge, token.to_owned());
        async move { edge.post(&token, &[], INITIALIZE).await }
    };
    fn session(response: &reqwest::Response) -> String {
        assert_eq!(response.status(), 200);
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    }
    async fn refused(response: reqwest::Response, says: &str) {
        assert_eq!(response.status(), 429);
        assert!(response.headers().get("mcp-session-id").is_none());
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32005, "{body}");
        assert_eq!(body["id"], 1, "the initialize request's own id: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}");
        assert_eq!(body["error"]["data"]["code"], "limit_exceeded", "{body}");
        let hint = body["error"]["data"]["hint"].as_str().unwrap();
        assert!(hint.contains("DELETE"), "{body}");
    }
    let first = session(&open(&admin).await);
    let _second = session(&open(&admin).await);
    refused(open(&admin).await, "this principal has 2").await;
    let _bobs = session(&open(&bob).await);
    refused(open(&bob).await, "the server has 3 open").await;
    assert_eq!(edge.sessions.len(), 3);
    // Closing one makes room.
    let closed = reqwest::Client::new()
        .delete(&edge.url)
        .bearer_auth(&admin)
        .header("mcp-session-id", &first)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);
    assert_eq!(edge.sessions.len(), 2);
    assert_eq!(edge.sessions.owner(&first), None);
    let third = session(&open(&admin).await);
    assert_eq!(edge.sessions.owner(&third).as_deref(), Some("admin"));
    // Idle sessions expire, and the registry follows. (Expiry is rmcp's timer, then its
    // close: waited for, up to 30 s, on a loaded machine.)
    let expired_by = Instant::now() + Duration::from_secs(30);
    while !edge.sessions.is_empty() {
        assert!(
            Instant::now() < expired_by,
            "idle sessions were not closed: {} open",
            edge.sessions.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _again = session(&open(&admin).await);
    let _and = session(&open(&admin).await);
    edge.stop().await;
}
