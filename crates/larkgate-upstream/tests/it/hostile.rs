//! The client against a hostile MCP server (axum, on 127.0.0.1:0): redirects to private
//! targets and to other origins, DNS rebinding through the real HTTP client, a lying
//! `Content-Length`, an SSE stream that never ends, 100,000 tools, a repeating cursor.
//!
//! The server speaks 2025-11-25 with JSON responses; the client is configured `Legacy` so the
//! scenario starts at `initialize`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use larkgate_upstream::client::{
    Endpoint, Revisions, UpstreamClient, UpstreamError, UpstreamLimits,
};
use larkgate_upstream::{Allowed, Resolve, SystemResolver, UrlGuard};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Answers honestly.
    Plain,
    /// Every POST to /mcp is answered 307 to `Location`; /other answers honestly.
    Redirect,
    /// `tools/call` opens an SSE stream that only ever sends comments.
    EndlessSse,
    /// `tools/call` opens an SSE stream of small notifications that never ends.
    Flood,
    /// 100,000 items in every listing, in pages of 5,000.
    ManyTools,
    /// Every listing always returns the same next cursor.
    RepeatingCursor,
    /// Sessions: `initialize` opens `s<n>`; a request on any other session gets a 404.
    Sessions,
    /// Every request is answered 401 (credentials refused).
    Unauthorized,
    /// Every request is answered 403.
    Forbidden,
}

#[derive(Clone)]
struct Server {
    scenario: Scenario,
    location: Arc<Mutex<String>>,
    hits: Arc<AtomicUsize>,
    description: Arc<Mutex<String>>,
    /// For `Sessions`: the number of the one live session (0: none).
    session: Arc<AtomicUsize>,
    /// For `Sessions`: `initialize` requests and `DELETE`s seen.
    initializes: Arc<AtomicUsize>,
    deletes: Arc<AtomicUsize>,
    /// For `Sessions`: the last `initialize` request.
    initialize_body: Arc<Mutex<String>>,
}

fn rpc_result(id: &Value, result: Value) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    Response::builder()
        .header("content-type", "application/json")
        .header("mcp-session-id", "hostile-session")
        // Every request on a new connection: each one resolves the name again.
        .header("connection", "close")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn handle(
    State(server): State<Server>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response<Body> {
    server.hits.fetch_add(1, Ordering::SeqCst);
    if server.scenario == Scenario::Sessions {
        let live = format!("s{}", server.session.load(Ordering::SeqCst));
        let sent = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let initialize = body.contains("\"initialize\"");
        if initialize {
            let n = server.initializes.fetch_add(1, Ordering::SeqCst) + 1;
            *server.initialize_body.lock().unwrap() = body.clone();
            server.session.store(n, Ordering::SeqCst);
            let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "sessions", "version": "1"}
            }});
            return Response::builder()
                .header("content-type", "application/json")
                .header("mcp-session-id", format!("s{n}"))
                .body(Body::from(reply.to_string()))
                .unwrap();
        }
        if sent != live {
            return Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::empty())
                .unwrap();
        }
    }
    for (scenario, status) in [
        (Scenario::Unauthorized, StatusCode::UNAUTHORIZED),
        (Scenario::Forbidden, StatusCode::FORBIDDEN),
    ] {
        if server.scenario == scenario {
            return Response::builder()
                .status(status)
                .header("www-authenticate", "Bearer realm=\"hostile\"")
                .body(Body::from("no"))
                .unwrap();
        }
    }
    if server.scenario == Scenario::Redirect && uri.path() == "/mcp" {
        return Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header("location", server.location.lock().unwrap().clone())
            .body(Body::empty())
            .unwrap();
    }
    let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message["method"].as_str().unwrap_or_default();
    if message.get("id").is_none() {
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .header("connection", "close")
            .body(Body::empty())
            .unwrap();
    }
    match method {
        "initialize" => rpc_result(
            &id,
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "hostile", "version": "6.6.6"}
            }),
        ),
        // Every listing, with the same faults.
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            let cursor = message["params"]["cursor"]
                .as_str()
                .and_then(|c| c.parse::<usize>().ok())
                .unwrap_or(0);
            let description = server.description.lock().unwrap().clone();
            let item = |i: usize| match method {
                "tools/list" => json!({
                    "name": format!("t{i}"),
                    "description": description,
                    "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": true}
                }),
                "prompts/list" => json!({"name": format!("p{i}")}),
                "resources/list" => {
                    json!({"uri": format!("hostile://r/{i}"), "name": format!("r{i}")})
                }
                _ => {
                    json!({"uriTemplate": format!("hostile://t/{i}/{{x}}"), "name": format!("t{i}")})
                }
            };
            let key = match method {
                "tools/list" => "tools",
                "prompts/list" => "prompts",
                "resources/list" => "resources",
                _ => "resourceTemplates",
            };
            match server.scenario {
                Scenario::ManyTools => {
                    let page: Vec<Value> = (cursor..cursor + 5000).map(item).collect();
                    let next = (cursor + 5000 < 100_000).then(|| (cursor + 5000).to_string());
                    rpc_result(&id, json!({key: page, "nextCursor": next}))
                }
                Scenario::RepeatingCursor => {
                    rpc_result(&id, json!({key: [item(cursor)], "nextCursor": "7"}))
                }
                _ => rpc_result(&id, json!({key: [item(0)]})),
            }
        }
        "tools/call" if server.scenario == Scenario::EndlessSse => {
            let stream = futures::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((
                    Ok::<_, std::io::Error>(": still thinking\n\n".to_owned()),
                    (),
                ))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("mcp-session-id", "hostile-session")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        "tools/call" if server.scenario == Scenario::Flood => {
            let event = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"still going\"}}\n\n";
            let stream = futures::stream::repeat_with(move || Ok::<_, std::io::Error>(event));
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("mcp-session-id", "hostile-session")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        "tools/call" => rpc_result(
            &id,
            json!({"content": [{"type": "text", "text": "fine"}], "isError": false}),
        ),
        _ => rpc_result(&id, json!({})),
    }
}

/// Starts a hostile server; returns its address and hit counter.
async fn serve(scenario: Scenario, location: &str) -> (SocketAddr, Arc<AtomicUsize>) {
    serve_described(scenario, location, Arc::new(Mutex::new("A tool.".into()))).await
}

/// [`serve`], with the tools' description in the test's hands.
pub(crate) async fn serve_described(
    scenario: Scenario,
    location: &str,
    description: Arc<Mutex<String>>,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let server = Server {
        scenario,
        location: Arc::new(Mutex::new(location.to_owned())),
        hits: Arc::new(AtomicUsize::new(0)),
        description,
        session: Arc::new(AtomicUsize::new(0)),
        initializes: Arc::new(AtomicUsize::new(0)),
        deletes: Arc::new(AtomicUsize::new(0)),
        initialize_body: Arc::new(Mutex::new(String::new())),
    };
    let hits = server.hits.clone();
    let app = router(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hits)
}

fn router(server: Server) -> Router {
    async fn delete(State(server): State<Server>) -> StatusCode {
        server.deletes.fetch_add(1, Ordering::SeqCst);
        StatusCode::OK
    }
    Router::new()
        .route("/mcp", post(handle).delete(delete))
        .route("/other", post(handle))
        .with_state(server)
}

fn plain_server(scenario: Scenario) -> Server {
    Server {
        scenario,
        location: Arc::new(Mutex::new(String::new())),
        hits: Arc::new(AtomicUsize::new(0)),
        description: Arc::new(Mutex::new("A tool.".into())),
        session: Arc::new(AtomicUsize::new(0)),
        initializes: Arc::new(AtomicUsize::new(0)),
        deletes: Arc::new(AtomicUsize::new(0)),
        initialize_body: Arc::new(Mutex::new(String::new())),
    }
}

/// A plain server on a given listener (for a server that comes up late).
pub(crate) fn serve_on(listener: tokio::net::TcpListener) {
    let app = router(plain_server(Scenario::Plain));
    tokio::spawn(async move { axum::serve(listener, app).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_initialised_once_more_and_closed_with_delete() {
    let server = plain_server(Scenario::Sessions);
    let (session, initializes, deletes, initialize_body) = (
        server.session.clone(),
        server.initializes.clone(),
        server.deletes.clone(),
        server.initialize_body.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(server);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
        .await
        .unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 1);
    assert_eq!(initializes.load(Ordering::SeqCst), 1);
    // larkgate declares what the operator lets an upstream ask by default (elicitation, in
    // both modes), and no sampling and no roots.
    let initialize: Value = serde_json::from_str(&initialize_body.lock().unwrap()).unwrap();
    assert_eq!(
        initialize["params"]["capabilities"],
        json!({"elicitation": {"form": {}, "url": {}}}),
        "{initialize}"
    );
    assert_eq!(initialize["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(initialize["params"]["clientInfo"]["name"], "larkgate");
    // The server forgets the session: the next request gets a 404, the client initialises
    // once more and retries.
    session.store(99, Ordering::SeqCst);
    let result = client
        .call_tool("t0", serde_json::Map::new())
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(initializes.load(Ordering::SeqCst), 2);
    client.close().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while deletes.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "no DELETE on close");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn endpoint(url: String, limits: UpstreamLimits) -> Endpoint {
    Endpoint {
        url,
        revisions: Revisions::Legacy,
        headers: BTreeMap::from([("authorization".to_owned(), "Bearer secret".to_owned())]),
        limits,
    }
}

/// What `upstream add` prints and `upstream list` shows names no library, type or crate.
fn no_library_words(text: &str) {
    for word in [
        "rmcp",
        "::",
        "Transport",
        "reqwest",
        "hyper",
        "Error {",
        "Worker",
    ] {
        assert!(!text.contains(word), "{word:?} in {text:?}");
    }
}

fn loopback() -> Arc<UrlGuard> {
    Arc::new(UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]))
}

async fn connect(url: String, limits: UpstreamLimits) -> Result<UpstreamClient, UpstreamError> {
    UpstreamClient::connect(&endpoint(url, limits), loopback(), Arc::new(SystemResolver)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_private_targets_or_other_origins_are_refused() {
    // A second server on another port: another origin, although also on loopback.
    let (elsewhere, elsewhere_hits) = serve(Scenario::Plain, "").await;
    let targets = [
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://10.0.0.1/mcp".to_owned(),
        format!("http://{elsewhere}/mcp"),
        "file:///etc/passwd".to_owned(),
    ];
    for target in targets {
        let (addr, _) = serve(Scenario::Redirect, &target).await;
        let error = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
            .await
            .unwrap_err();
        assert!(
            matches!(error, UpstreamError::Unavailable(_)),
            "{target}: {error}"
        );
        no_library_words(&error.to_string());
    }
    // The other origin never saw the request, nor its Authorization header.
    assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_origin_redirect_is_followed_and_a_loop_is_bounded() {
    let (addr, _) = serve(Scenario::Redirect, "/other").await;
    let client = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
        .await
        .unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 1);

    let (addr, hits) = serve(Scenario::Redirect, "/mcp").await;
    let error = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Unavailable(_)), "{error}");
    no_library_words(&error.to_string());
    let hits = hits.load(Ordering::SeqCst);
    assert!(
        (10..=12).contains(&hits),
        "{hits} requests for one redirect loop"
    );
}

/// Answers `rebind.test` with whatever address the test set last.
struct Rebinding {
    answer: Mutex<IpAddr>,
    lookups: AtomicUsize,
}

impl Resolve for Rebinding {
    fn lookup(
        &self,
        _host: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>,
    > {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let next = *self.answer.lock().unwrap();
        Box::pin(async move { Ok(vec![next]) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_rebinds_to_a_private_address_is_refused_on_the_next_connection() {
    let (addr, hits) = serve(Scenario::Plain, "").await;
    let resolver = Arc::new(Rebinding {
        answer: Mutex::new("127.0.0.1".parse().unwrap()),
        lookups: AtomicUsize::new(0),
    });
    let url = format!("http://rebind.test:{}/mcp", addr.port());
    let client = UpstreamClient::connect(
        &endpoint(url, UpstreamLimits::default()),
        loopback(),
        resolver.clone(),
    )
    .await
    .unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 1);
    // The name now answers privately. The server closes every connection after answering,
    // so once the connections already open are used up (they go to the vetted address), the
    // next request resolves the name again — and is refused before anything is sent.
    *resolver.answer.lock().unwrap() = "10.0.0.1".parse().unwrap();
    let lookups = resolver.lookups.load(Ordering::SeqCst);
    let mut refused = None;
    for _ in 0..10 {
        let before = hits.load(Ordering::SeqCst);
        match client.call_tool("t0", serde_json::Map::new()).await {
            Ok(_) => assert_eq!(hits.load(Ordering::SeqCst), before + 1),
            Err(error) => {
                assert_eq!(
                    hits.load(Ordering::SeqCst),
                    before,
                    "nothing reached a server"
                );
                refused = Some(error);
                break;
            }
        }
    }
    let error = refused.expect("a request on a new connection is refused");
    assert!(matches!(error, UpstreamError::Unavailable(_)), "{error}");
    assert!(resolver.lookups.load(Ordering::SeqCst) > lookups);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_that_never_ends_times_out() {
    let (addr, _) = serve(Scenario::EndlessSse, "").await;
    let limits = UpstreamLimits {
        call_timeout: Duration::from_millis(600),
        ..UpstreamLimits::default()
    };
    let client = connect(format!("http://{addr}/mcp"), limits).await.unwrap();
    let started = std::time::Instant::now();
    let error = client
        .call_tool("t0", serde_json::Map::new())
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Timeout(_)), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_small_sse_events_is_stopped_by_the_whole_stream_limit() {
    let (addr, _) = serve(Scenario::Flood, "").await;
    let limits = UpstreamLimits {
        max_response_bytes: 64 * 1024,
        call_timeout: Duration::from_secs(20),
        ..UpstreamLimits::default()
    };
    let client = connect(format!("http://{addr}/mcp"), limits).await.unwrap();
    let started = std::time::Instant::now();
    let error = client
        .call_tool("t0", serde_json::Map::new())
        .await
        .unwrap_err();
    assert!(
        matches!(error, UpstreamError::TooLarge { limit: 65536 }),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped by bytes, not time"
    );
    // The connection survives: other requests work, and the next flood is refused alike.
    assert_eq!(client.list_tools().await.unwrap().len(), 1);
    let again = client
        .call_tool("t0", serde_json::Map::new())
        .await
        .unwrap_err();
    assert!(matches!(again, UpstreamError::TooLarge { .. }), "{again}");
    assert!(!client.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_tools_are_cut_to_max_tools_and_counted() {
    let (addr, _) = serve(Scenario::ManyTools, "").await;
    let limits = UpstreamLimits {
        max_response_bytes: 16 * 1024 * 1024,
        ..UpstreamLimits::default()
    };
    let client = connect(format!("http://{addr}/mcp"), limits).await.unwrap();
    let tools = client.list_tools().await.unwrap();
    assert_eq!(tools.len(), 1000);
    assert_eq!(client.dropped_tools(), 99_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_cursor_is_an_error() {
    let (addr, _) = serve(Scenario::RepeatingCursor, "").await;
    let client = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
        .await
        .unwrap();
    let error = client.list_tools().await.unwrap_err();
    assert!(error.to_string().contains("repeated the cursor"), "{error}");
    let error = client.list_prompts().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("prompts/list repeated the cursor"),
        "{error}"
    );
    let error = client.list_resources().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("resources/list repeated the cursor"),
        "{error}"
    );
    let error = client.list_resource_templates().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("resources/templates/list repeated the cursor"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_prompts_and_resources_are_capped_like_tools() {
    let (addr, _) = serve(Scenario::ManyTools, "").await;
    let client = connect(format!("http://{addr}/mcp"), UpstreamLimits::default())
        .await
        .unwrap();
    let kept = UpstreamLimits::default().max_tools;
    assert_eq!(client.list_prompts().await.unwrap().len(), kept);
    assert_eq!(client.list_resources().await.unwrap().len(), kept);
    assert_eq!(client.list_resource_templates().await.unwrap().len(), kept);
}

/// A raw HTTP server that answers every request with `head` then `body_len` bytes of `x`.
async fn raw_server(head: String, body_len: usize) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let head = head.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(head.as_bytes()).await;
                let chunk = vec![b'x'; 65536];
                let mut left = body_len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if socket.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_content_length_is_an_error_never_a_truncated_parse() {
    let limits = UpstreamLimits {
        max_response_bytes: 64 * 1024,
        ..UpstreamLimits::default()
    };
    // Declares 20 bytes, sends megabytes: the 20 bytes are not JSON-RPC.
    let short = raw_server(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n".into(),
        4 << 20,
    )
    .await;
    let error = connect(format!("http://{short}/mcp"), limits)
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Unavailable(_)), "{error}");
    // Declares a gigabyte: refused by the byte limit.
    let long = raw_server(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n"
            .into(),
        4 << 20,
    )
    .await;
    let error = connect(format!("http://{long}/mcp"), limits)
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::TooLarge { .. }), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_failure_is_told_in_plain_words() {
    let (unauthorized, _) = serve(Scenario::Unauthorized, "").await;
    let (forbidden, _) = serve(Scenario::Forbidden, "").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (url, says) in [
        (
            format!("http://{unauthorized}/mcp"),
            "the server answered 401 Unauthorized",
        ),
        (
            format!("http://{forbidden}/mcp"),
            "the server answered 403 Forbidden",
        ),
        (format!("http://{closed}/mcp"), "the connection was refused"),
    ] {
        let error = connect(url.clone(), UpstreamLimits::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{url}: {error}");
        for leak in ["rmcp", "Transport", "reqwest", "::"] {
            assert!(!error.contains(leak), "{leak} in {error}");
        }
    }
}
