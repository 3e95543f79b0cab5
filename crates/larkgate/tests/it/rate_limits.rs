//! Rate limits shared through Redis by several `larkgate serve` processes
//! (`LARKGATE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`): a limit holds in total,
//! whichever process a call reaches; with Redis unreachable, calls are refused and counted.

use larkgate_upstream::client::Revisions;

use crate::serve::{admin_gateway, client};

/// Where the tests' Redis is (`LARKGATE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).
pub(crate) fn redis_url() -> String {
    std::env::var("LARKGATE_TEST_REDIS_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix of this test's own; its keys are deleted when it is dropped.
struct Prefix(String);

impl Prefix {
    fn new() -> Prefix {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Prefix(format!("lgtest:{}{nanos}:", std::process::id()))
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(redis_url()) else {
            return;
        };
        let Ok(mut connection) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.0))
            .query(&mut connection)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut connection);
        }
    }
}

const POLICY: &str = "[policy.roles.admin]\ncall = [\"*\"]\n\
    [[policy.rate_limits]]\nper = \"principal_tool\"\ntools = [\"kv_set\"]\ncalls = 10\n\
    period_seconds = 3600\nburst = 10\n";

/// Calls `kv_set` through `url`; answers the envelope's code (`"ok"` when admitted).
async fn kv_set(url: &str, token: &str, i: usize) -> String {
    let c = client(url, token, Revisions::Latest).await.unwrap();
    let arguments = serde_json::json!({"key": format!("k{i}"), "value": "v"});
    let result = c
        .call_tool("kv_set", arguments.as_object().unwrap().clone())
        .await
        .unwrap();
    c.close().await;
    if result.is_error != Some(true) {
        return "ok".to_owned();
    }
    let envelope = result.meta.expect("an envelope").0["larkgate/envelope"].clone();
    format!(
        "{} {}",
        envelope["code"].as_str().unwrap(),
        envelope["message"].as_str().unwrap_or_default()
    )
}

#[test]
fn two_gateways_sharing_redis_admit_the_limit_once_between_them() {
    {
        let client = redis::Client::open(redis_url()).unwrap();
        assert!(
            client.get_connection().is_ok(),
            "these tests need Redis at {} (or where LARKGATE_TEST_REDIS_URL points): start one, \
             for example `docker run -d -p 6379:6379 redis:7`",
            redis_url()
        );
    }
    let prefix = Prefix::new();
    let config = format!(
        "{POLICY}[ratelimit]\nredis = {:?}\nprefix = {:?}\n",
        redis_url(),
        prefix.0
    );
    // Two gateways, each with its own data directory and principal `ada`: only the budgets
    // are shared.
    let (_one, first, token_one) = admin_gateway(&config);
    let (_two, second, token_two) = admin_gateway(&config);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let codes: Vec<String> = runtime.block_on(async {
        let mut codes = Vec::new();
        for i in 0..30 {
            let (url, token) = if i % 2 == 0 {
                (&first.url, &token_one)
            } else {
                (&second.url, &token_two)
            };
            codes.push(kv_set(url, token, i).await);
        }
        codes
    });
    assert_eq!(codes.iter().filter(|c| *c == "ok").count(), 10, "{codes:?}");
    assert!(
        codes
            .iter()
            .filter(|c| *c != "ok")
            .all(|c| c.starts_with("rate_limited ada is calling kv_set too often")),
        "{codes:?}"
    );
    let metrics = reqwest::blocking::get(format!("{}/metrics", first.ops))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("larkgate_ratelimit_unreachable_total 0"),
        "{metrics}"
    );
}

#[test]
fn with_redis_unreachable_calls_are_refused_saying_why_and_counted() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config =
        format!("{POLICY}[ratelimit]\nredis = \"redis://127.0.0.1:{port}\"\ntimeout_ms = 300\n");
    let (_dir, server, token) = admin_gateway(&config);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (refused, other) = runtime.block_on(async {
        let refused = kv_set(&server.url, &token, 0).await;
        // A tool no rule counts does not need Redis.
        let c = client(&server.url, &token, Revisions::Latest)
            .await
            .unwrap();
        let other = c
            .call_tool("clock_now", serde_json::Map::new())
            .await
            .unwrap();
        c.close().await;
        (refused, other)
    });
    assert!(
        refused.starts_with("rate_limited the shared rate limits could not be checked"),
        "{refused}"
    );
    assert!(!refused.contains(&port.to_string()), "{refused}");
    assert_ne!(other.is_error, Some(true), "{other:?}");
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.ops))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("larkgate_ratelimit_unreachable_total 1"),
        "{metrics}"
    );
}
