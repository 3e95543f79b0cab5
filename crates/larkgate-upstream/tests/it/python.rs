//! The client against a server built with the official Python SDK, in SSE and JSON response
//! modes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use larkgate_upstream::client::{
    Endpoint, Revisions, UpstreamClient, UpstreamError, UpstreamLimits,
};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};
use serde_json::json;

use crate::peer::{Peer, shared_weather, weather};

fn loopback() -> Arc<UrlGuard> {
    Arc::new(UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]))
}

async fn connect(peer: &Peer, limits: UpstreamLimits) -> UpstreamClient {
    connect_with(peer, limits, Revisions::Latest).await
}

async fn connect_with(peer: &Peer, limits: UpstreamLimits, revisions: Revisions) -> UpstreamClient {
    let endpoint = Endpoint {
        url: peer.url.clone(),
        revisions,
        headers: BTreeMap::new(),
        limits,
    };
    UpstreamClient::connect(&endpoint, loopback(), Arc::new(SystemResolver))
        .await
        .expect("connects")
}

fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().unwrap().clone()
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn lists_and_calls(mode: &[&str], revisions: Revisions, expected: &str) {
    let peer = shared_weather(mode);
    let client = connect_with(&peer, UpstreamLimits::default(), revisions).await;
    assert_eq!(
        client.protocol_version().map(|v| v.to_string()).as_deref(),
        Some(expected)
    );
    if revisions == Revisions::Legacy {
        assert_eq!(client.server_info().unwrap().name, "weather-peer");
    }
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in ["forecast", "explode", "slow", "huge", "progress", "forged"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let forecast = tools.iter().find(|t| t.name == "forecast").unwrap();
    assert_eq!(
        forecast.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    assert!(
        forecast.output_schema.is_some(),
        "structured output is kept"
    );

    let result = client
        .call_tool("forecast", args(json!({"city": "Oslo", "days": 3})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content.unwrap()["summary"],
        "sunny in Oslo for 3 day(s)"
    );

    // The server's own failure is a result with isError, not a transport error.
    let failed = client
        .call_tool("explode", args(json!({"reason": "on purpose"})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    assert!(
        text_of(&failed).contains("exploded: on purpose"),
        "{failed:?}"
    );

    // Many calls in flight on one client.
    let calls = (0..16).map(|i| {
        client.call_tool(
            "forecast",
            args(json!({"city": format!("c{i}"), "days": i})),
        )
    });
    for (i, result) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let content = result.unwrap().structured_content.unwrap();
        assert_eq!(content["city"], format!("c{i}"));
    }
    client.ping().await.unwrap();
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_calls_on_2026_07_28_with_sse_responses() {
    lists_and_calls(&[], Revisions::Latest, "2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_calls_on_2026_07_28_with_json_responses() {
    lists_and_calls(&["--json"], Revisions::Latest, "2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_calls_on_2025_11_25_with_sse_responses() {
    lists_and_calls(&[], Revisions::Legacy, "2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_calls_on_2025_11_25_with_json_responses() {
    lists_and_calls(&["--json"], Revisions::Legacy, "2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_times_out_and_the_client_keeps_working() {
    let peer = weather(&[]);
    let limits = UpstreamLimits {
        call_timeout: Duration::from_millis(500),
        ..UpstreamLimits::default()
    };
    let client = connect(&peer, limits).await;
    let started = std::time::Instant::now();
    let error = client
        .call_tool("slow", args(json!({"seconds": 30})))
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Timeout(_)), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The call was cancelled at the server, not abandoned.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let count = client
            .call_tool("cancelled", serde_json::Map::new())
            .await
            .unwrap();
        if text_of(&count) == "1" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never saw a cancellation"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fine = client
        .call_tool("slow", args(json!({"seconds": 0})))
        .await
        .unwrap();
    assert_eq!(text_of(&fine), "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_resets_the_round_trip_timeout() {
    let peer = weather(&[]);
    let limits = UpstreamLimits {
        call_timeout: Duration::from_millis(700),
        ..UpstreamLimits::default()
    };
    let client = connect(&peer, limits).await;
    // Five steps 300 ms apart: 1.5 s in all, never 700 ms without progress.
    let result = client
        .call_tool("progress", args(json!({"steps": 5, "delay": 0.3})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "5 steps");
    // Without progress, the same total time is a timeout.
    let error = client
        .call_tool("slow", args(json!({"seconds": 1.5})))
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Timeout(_)), "{error}");
}

async fn a_huge_result_is_refused(mode: &[&str]) {
    let peer = shared_weather(mode);
    let limits = UpstreamLimits {
        max_response_bytes: 64 * 1024,
        ..UpstreamLimits::default()
    };
    let client = connect(&peer, limits).await;
    let error = client
        .call_tool("huge", args(json!({"size": 1_000_000})))
        .await
        .unwrap_err();
    assert!(
        matches!(error, UpstreamError::TooLarge { limit: 65536 }),
        "{mode:?}: {error}"
    );
    // Under the cap is fine, and the client still works.
    let small = client
        .call_tool("huge", args(json!({"size": 1000})))
        .await
        .unwrap();
    assert_eq!(text_of(&small).len(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_sse_result_is_refused_by_the_byte_limit() {
    a_huge_result_is_refused(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_json_result_is_refused_by_the_byte_limit() {
    a_huge_result_is_refused(&["--json"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_guard_refuses_a_loopback_upstream_before_connecting() {
    let peer = shared_weather(&[]);
    let endpoint = Endpoint {
        url: peer.url.clone(),
        revisions: Revisions::Latest,
        headers: BTreeMap::new(),
        limits: UpstreamLimits::default(),
    };
    let error = UpstreamClient::connect(
        &endpoint,
        Arc::new(UrlGuard::strict()),
        Arc::new(SystemResolver),
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("not a public address"),
        "{error}"
    );
}

/// Prompts, resources and resource templates of the SDK server, listed and read as the server
/// gave them, in both revisions; their listings are capped like a tool listing.
async fn lists_and_reads_prompts_and_resources(revisions: Revisions) {
    let peer = shared_weather(&[]);
    let client = connect_with(&peer, UpstreamLimits::default(), revisions).await;

    let mut prompts: Vec<String> = client
        .list_prompts()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    prompts.sort();
    assert_eq!(prompts, ["briefing", "haiku"]);
    let briefing = client
        .get_prompt("briefing", Some(args(json!({"city": "Oslo"}))))
        .await
        .unwrap();
    let message = serde_json::to_value(&briefing.messages[0]).unwrap();
    assert_eq!(message["role"], "user", "{message}");
    assert_eq!(
        message["content"]["text"], "Give a short weather briefing for Oslo.",
        "{message}"
    );
    // A missing argument is the server's own error, in its words.
    let missing = client.get_prompt("briefing", None).await.unwrap_err();
    assert!(matches!(missing, UpstreamError::Protocol(_)), "{missing:?}");

    let resources = client.list_resources().await.unwrap();
    assert_eq!(resources.len(), 1, "{resources:?}");
    assert_eq!(resources[0].uri, "weather://stations");
    let read = client.read_resource("weather://stations").await.unwrap();
    let contents = serde_json::to_value(&read.contents).unwrap();
    assert_eq!(contents[0]["text"], "Oslo, Lima, Perth", "{contents}");
    assert_eq!(contents[0]["mimeType"], "text/plain", "{contents}");

    let templates = client.list_resource_templates().await.unwrap();
    assert_eq!(templates.len(), 1, "{templates:?}");
    assert_eq!(templates[0].uri_template, "weather://city/{name}");
    let read = client.read_resource("weather://city/Lima").await.unwrap();
    let contents = serde_json::to_value(&read.contents).unwrap();
    assert_eq!(contents[0]["text"], "sunny in Lima", "{contents}");
    client.close().await;

    // The listing cap of tools (max_tools) holds for prompts too.
    let capped = UpstreamLimits {
        max_tools: 1,
        ..UpstreamLimits::default()
    };
    let client = connect_with(&peer, capped, revisions).await;
    assert_eq!(client.list_prompts().await.unwrap().len(), 1);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_reads_prompts_and_resources_on_2026_07_28() {
    lists_and_reads_prompts_and_resources(Revisions::Latest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_reads_prompts_and_resources_on_2025_11_25() {
    lists_and_reads_prompts_and_resources(Revisions::Legacy).await;
}

/// Polls `what` (twice a tick of 50 ms, at most 20 s) until it answers `wanted`; its last
/// answer.
async fn until<F, Fut>(wanted: usize, what: F) -> usize
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let mut seen = what().await;
    for _ in 0..400 {
        if seen == wanted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = what().await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_subscription_is_held_once_at_the_server_and_ended_by_its_last_holder() {
    use larkgate_upstream::watches::Watches;
    let peer = weather(&[]);
    let first = Arc::new(connect(&peer, UpstreamLimits::default()).await);
    assert!(first.serves_subscriptions());
    let listeners = |client: &Arc<UpstreamClient>| {
        let client = Arc::clone(client);
        async move {
            let answer = client
                .call_tool("listeners", args(json!({})))
                .await
                .unwrap();
            text_of(&answer).parse::<usize>().unwrap()
        }
    };
    // Each connection keeps a stream of its own for list changes, opened as it connects.
    let per_connection = until(1, || listeners(&first)).await;
    assert_eq!(per_connection, 1);
    let watches = Arc::new(Watches::default());
    let stations = "weather://stations";
    let (mut heard, held) = watches.watch(&first, stations).await.unwrap();
    let (mut also, also_held) = watches.watch(&first, stations).await.unwrap();
    assert_eq!(watches.holders(stations).await, 2);
    assert_eq!(
        listeners(&first).await,
        per_connection + 1,
        "one stream for both holders"
    );
    let touch = |client: &Arc<UpstreamClient>| {
        let client = Arc::clone(client);
        async move {
            let touched = json!({"uris": ["weather://city/Oslo", "weather://stations"]});
            let answer = client.call_tool("touch", args(touched)).await.unwrap();
            assert_eq!(text_of(&answer), "touched 2");
        }
    };
    touch(&first).await;
    // The server tells only of what was subscribed.
    assert_eq!(heard.recv().await.unwrap(), stations);
    assert_eq!(also.recv().await.unwrap(), stations);

    // One holder lets go: the other still holds the one subscription.
    drop(held);
    assert_eq!(until(1, || watches.holders(stations)).await, 1);
    assert_eq!(listeners(&first).await, per_connection + 1);

    // The upstream is connected again: what is held is subscribed at the new connection, and
    // its holders are told it may have changed meanwhile.
    let second = Arc::new(connect(&peer, UpstreamLimits::default()).await);
    watches.attach(&second);
    assert_eq!(also.recv().await.unwrap(), stations);
    let Ok(first) = Arc::try_unwrap(first) else {
        panic!("nothing but the test holds the first connection");
    };
    first.close().await;
    assert_eq!(
        until(per_connection + 1, || listeners(&second)).await,
        per_connection + 1,
        "the subscription moved to the new connection"
    );
    touch(&second).await;
    assert_eq!(also.recv().await.unwrap(), stations);

    // The last holder lets go: the server's stream ends.
    drop(also_held);
    assert_eq!(
        until(per_connection, || listeners(&second)).await,
        per_connection
    );
    assert_eq!(watches.holders(stations).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_so_many_resources_are_subscribed_at_one_upstream() {
    use larkgate_upstream::watches::{MAX_WATCHED, Watches};
    let peer = weather(&[]);
    let client = Arc::new(connect(&peer, UpstreamLimits::default()).await);
    let watches = Arc::new(Watches::default());
    let mut held = Vec::new();
    for n in 0..MAX_WATCHED {
        let uri = format!("weather://city/C{n}");
        held.push(watches.watch(&client, &uri).await.unwrap());
    }
    // One more URI is refused, saying why; one already held is held again.
    let refused = watches
        .watch(&client, "weather://city/more")
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("larkgate holds subscriptions to 256 of this upstream's resources"),
        "{refused}"
    );
    held.push(watches.watch(&client, "weather://city/C0").await.unwrap());
    assert_eq!(watches.holders("weather://city/C0").await, 2);
    // Let go of one: there is room again.
    let one = held.remove(1);
    drop(one);
    assert_eq!(until(0, || watches.holders("weather://city/C1")).await, 0);
    assert!(watches.watch(&client, "weather://city/more").await.is_ok());
}
