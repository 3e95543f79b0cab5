//! Rate limits shared through a real Redis (`LARKGATE_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379`), as replicas share them: several limiters, each with its own
//! connection, one budget. Each test keeps its keys under a prefix of its own and deletes them.

use std::time::Duration;

use larkgate_platform::policy::{Pattern, RateLimitRule, RateScope, TargetKind};
use larkgate_platform::ratelimit::shared::{SharedLimiter, SharedSettings, WhenUnreachable};
use larkgate_platform::ratelimit::{Counted, Limited, RateLimiter, Refused, TokioClock};

fn redis_url() -> String {
    std::env::var("LARKGATE_TEST_REDIS_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// A connection to the test Redis, or a failure that says how to start one.
async fn redis() -> redis::aio::MultiplexedConnection {
    let url = redis_url();
    let connect = async {
        redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    match tokio::time::timeout(Duration::from_secs(3), connect).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => panic!("{}", unreachable(&url, &error)),
        Err(_) => panic!("{}", unreachable(&url, &"no answer within 3 s")),
    }
}

fn unreachable(url: &str, error: &dyn std::fmt::Display) -> String {
    format!(
        "these tests need Redis at {url} (or where LARKGATE_TEST_REDIS_URL points), which cannot \
         be reached: {error}. Start one, for example `docker run -d -p 6379:6379 redis:7`, or on \
         Debian `apt-get install redis-server`"
    )
}

/// A key prefix of this test's own; its keys are deleted when it is dropped.
struct Prefix(String);

impl Prefix {
    fn new() -> Prefix {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).unwrap();
        Prefix(format!("lgtest:{}:", hex::encode(random)))
    }

    async fn keys(&self) -> Vec<String> {
        let mut connection = redis().await;
        redis::cmd("KEYS")
            .arg(format!("{}*", self.0))
            .query_async(&mut connection)
            .await
            .unwrap()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let pattern = format!("{}*", self.0);
        let _ = std::thread::spawn(move || {
            let client = redis::Client::open(redis_url()).ok()?;
            let mut connection = client.get_connection().ok()?;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query(&mut connection)
                .ok()?;
            if !keys.is_empty() {
                let _: () = redis::cmd("DEL").arg(keys).query(&mut connection).ok()?;
            }
            Some(())
        })
        .join();
    }
}

fn rule(per: RateScope, tools: &[&str], calls: u32, secs: u64, burst: u32) -> RateLimitRule {
    RateLimitRule {
        per,
        tools: Some(tools.iter().map(|t| Pattern::new(t).unwrap()).collect()),
        resources: None,
        prompts: None,
        calls,
        period_seconds: secs,
        burst: Some(burst),
        when: None,
    }
}

fn limiter(
    rules: &[RateLimitRule],
    url: &str,
    prefix: &Prefix,
    when: WhenUnreachable,
) -> SharedLimiter {
    let mut settings = SharedSettings::new(url).unwrap();
    settings.prefix = prefix.0.clone();
    settings.when_unreachable = when;
    settings.timeout = Duration::from_millis(500);
    let local = RateLimiter::new(rules, Box::new(TokioClock::default()), 1_000);
    SharedLimiter::new(rules, local, settings)
}

async fn call(limiter: &SharedLimiter, principal: &str, tool: &str) -> Result<(), Refused> {
    limiter
        .check_target(Counted {
            principal,
            kind: TargetKind::Tool,
            name: tool,
            key: tool,
            facts: None,
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_admit_exactly_the_burst_between_them() {
    redis().await;
    let prefix = Prefix::new();
    let rules = [rule(RateScope::Principal, &["*"], 100, 3600, 100)];
    let replicas: Vec<std::sync::Arc<SharedLimiter>> = (0..3)
        .map(|_| {
            std::sync::Arc::new(limiter(
                &rules,
                &redis_url(),
                &prefix,
                WhenUnreachable::FailClosed,
            ))
        })
        .collect();
    let mut calls = Vec::new();
    for i in 0..300 {
        let replica = replicas[i % 3].clone();
        calls.push(tokio::spawn(async move {
            call(&replica, "ada", "kv_set").await
        }));
    }
    let mut admitted = 0;
    for handle in calls {
        match handle.await.unwrap() {
            Ok(()) => admitted += 1,
            Err(Refused::Budget(Limited { retry_after })) => {
                // One call per 36 s replenishes.
                assert!(
                    retry_after > Duration::from_secs(30) && retry_after <= Duration::from_secs(36),
                    "{retry_after:?}"
                );
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted, 100);
    // Another principal has a budget of its own.
    assert_eq!(call(&replicas[2], "bo", "kv_set").await, Ok(()));
    // Redis holds one key per budget, under the prefix, expiring once replenished.
    let keys = prefix.keys().await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let mut connection = redis().await;
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= 3_600_001, "{key}: {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_replenish_on_redis_clock_and_a_refusal_charges_no_other_rule() {
    redis().await;
    let prefix = Prefix::new();
    let rules = [
        rule(RateScope::PrincipalTool, &["kv_set"], 1, 3600, 1),
        rule(RateScope::Principal, &["*"], 10, 1, 2),
    ];
    let a = limiter(&rules, &redis_url(), &prefix, WhenUnreachable::FailClosed);
    let b = limiter(&rules, &redis_url(), &prefix, WhenUnreachable::FailClosed);
    assert_eq!(call(&a, "ada", "kv_set").await, Ok(()));
    // kv_set's own budget is spent, on every replica; the refusal costs the principal-wide
    // budget nothing.
    assert!(matches!(
        call(&b, "ada", "kv_set").await,
        Err(Refused::Budget(_))
    ));
    assert_eq!(call(&b, "ada", "kv_get").await, Ok(()));
    let Err(Refused::Budget(limited)) = call(&a, "ada", "kv_get").await else {
        panic!("the burst of 2 is spent");
    };
    assert!(
        limited.retry_after <= Duration::from_millis(100),
        "{limited:?}"
    );
    tokio::time::sleep(limited.retry_after + Duration::from_millis(20)).await;
    assert_eq!(call(&b, "ada", "kv_get").await, Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_refuses_or_falls_back_as_configured_and_is_counted() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("redis://127.0.0.1:{port}");
    let prefix = Prefix::new();
    let rules = [rule(RateScope::Principal, &["*"], 2, 3600, 2)];

    let closed = limiter(&rules, &nowhere, &prefix, WhenUnreachable::FailClosed);
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let refused = call(&closed, "ada", "kv_get").await.unwrap_err();
        assert!(matches!(refused, Refused::Unreachable(_)), "{refused:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(closed.unreachable().get(), 3);

    // The local fallback admits against this process's own budget.
    let local = limiter(&rules, &nowhere, &prefix, WhenUnreachable::Local);
    assert_eq!(call(&local, "ada", "kv_get").await, Ok(()));
    assert_eq!(call(&local, "ada", "kv_get").await, Ok(()));
    assert!(matches!(
        call(&local, "ada", "kv_get").await,
        Err(Refused::Budget(_))
    ));
    assert_eq!(local.unreachable().get(), 3);

    // A tool no rule counts needs no Redis at all.
    let unrelated = [rule(RateScope::Principal, &["kv_*"], 2, 3600, 2)];
    let quiet = limiter(&unrelated, &nowhere, &prefix, WhenUnreachable::FailClosed);
    assert_eq!(call(&quiet, "ada", "clock_now").await, Ok(()));
    assert_eq!(quiet.unreachable().get(), 0);
}

#[test]
fn a_url_that_is_not_redis_is_refused_without_repeating_it() {
    for url in [
        "http://127.0.0.1:6379",
        "redis//:hunter2@host",
        "postgres://x@y/z",
    ] {
        let error = SharedSettings::new(url).unwrap_err();
        assert!(error.contains("Redis URL"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
