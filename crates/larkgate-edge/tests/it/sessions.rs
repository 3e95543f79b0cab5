//! 2025-11-25 sessions: capped per principal and in total, refused in JSON-RPC with what to
//! do, and pruned from the registry when a client closes one or it idles out.

use std::time::Duration;

use crate::harness::{Edge, INITIALIZE};

// On tokio's paused clock: the idle timeout passes when the test moves time, not by waiting
// for it (the sockets are real; time moves only while every task waits).
#[tokio::test(start_paused = true)]
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
    // Not before the idle timeout...
    tokio::time::sleep(Duration::from_millis(1400)).await;
    assert_eq!(edge.sessions.len(), 3, "closed before their idle time");
    // ...but after it, idle sessions expire, and the registry follows (rmcp's timer, then its
    // close, which a few more ticks of the clock let through).
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..100 {
        if edge.sessions.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        edge.sessions.is_empty(),
        "idle sessions were not closed: {} open",
        edge.sessions.len()
    );
    let _again = session(&open(&admin).await);
    let _and = session(&open(&admin).await);
    edge.stop().await;
}
