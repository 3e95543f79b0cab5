//! Failed authentications are throttled per client address, and a sample of them is audited
//! without the token.

use larkgate_store::AuditQuery;

use crate::harness::{Edge, INITIALIZE};

/// An address that keeps sending tokens that are not valid is refused (429, with when to
/// retry) without a store lookup, valid tokens from it included, until its minute is over;
/// behind a trusted proxy the budget is the forwarded client's, not the proxy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_throttled_per_source_address() {
    let edge = Edge::start(
        "max_failed_authentications_per_minute = 3\ntrusted_proxies = [\"127.0.0.1\"]\n",
    )
    .await;
    let admin = edge.token("admin").await;
    let send = |token: &str, client: &str| {
        let (edge, token, client) = (&edge, token.to_owned(), client.to_owned());
        async move {
            edge.post(&token, &[("x-forwarded-for", client.as_str())], INITIALIZE)
                .await
        }
    };
    let wrong = "lgt_AAAAAAAAAAAA_AAAA";
    for _ in 0..3 {
        assert_eq!(send(wrong, "203.0.113.5").await.status(), 401);
    }
    let throttled = send(wrong, "203.0.113.5").await;
    assert_eq!(throttled.status(), 429);
    let wait: u64 = throttled.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let body: serde_json::Value = throttled.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many failed authentications from this address"),
        "{body}"
    );
    assert_eq!(body["error"]["data"]["code"], "rate_limited", "{body}");
    // Spent for that address, valid token or not; another client behind the proxy is served.
    assert_eq!(send(&admin, "203.0.113.5").await.status(), 429);
    assert_eq!(send(&admin, "203.0.113.6").await.status(), 200);
    // A sample is audited: the first failure of each address in its minute, naming the
    // address and never the token; the rest are counted in the next record.
    for _ in 0..2 {
        assert_eq!(send(wrong, "203.0.113.7").await.status(), 401);
    }
    let (store, audit) = (edge.store.clone(), edge.audit.clone());
    edge.stop().await;
    audit.flush().await.unwrap();
    let records = store
        .audit_records(AuditQuery {
            principal: Some("anonymous".to_owned()),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let details: Vec<&str> = records
        .iter()
        .filter(|r| r.code.as_deref() == Some("authentication_failed"))
        .map(|r| r.detail.as_deref().unwrap())
        .collect();
    assert_eq!(details.len(), 2, "{records:?}");
    assert!(
        details[0].contains("from 203.0.113.5 presented a token that is not valid; 0 more"),
        "{details:?}"
    );
    assert!(
        details[1].contains("from 203.0.113.7") && details[1].contains("; 2 more"),
        "{details:?}"
    );
    assert!(
        !records
            .iter()
            .any(|r| r.detail.as_deref().unwrap_or_default().contains(wrong)),
        "the token is never recorded"
    );
    let report = larkgate_platform::audit::verify(store.as_ref())
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
}
