//! `tools/call` from an in-memory session through the platform to a Rust upstream on loopback
//! (rmcp's Streamable HTTP server on axum, one no-op tool), against the same upstream client
//! calling that upstream directly, in one run. Prints the added median latency against the
//! bare in-memory session round trip (an rmcp server answering the same no-op tool in
//! memory, no pipeline), and calls per second with 32 concurrent callers, as ratios.
//!
//! Target: the added median is at most 3× the bare in-memory session round trip.
//!
//! Runs as plain timed loops (medians of many calls), like the script benchmarks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_binding::{Limits, Map};
use larkgate_caller::Caller;
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::{Platform, RunContext};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore};
use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::config::UpstreamConfig;
use larkgate_upstream::federation::Federation;
use larkgate_upstream::tools::Approval;
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

const CALLS: usize = 3000;
const CONCURRENT: usize = 32;
const PER_CALLER: usize = 150;

/// One no-op tool.
#[derive(Clone, Debug)]
struct Noop;

impl ServerHandler for Noop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({"type": "object"});
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = Some(true);
        let tool = Tool::new(
            "noop",
            "Does nothing.",
            Arc::new(schema.as_object().unwrap().clone()),
        )
        .with_annotations(annotations);
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(serde_json::json!({"ok": true})).into())
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn upstream() -> String {
    let mut config = StreamableHttpServerConfig::default();
    config.json_response = true;
    let service = StreamableHttpService::new(
        || Ok(Noop),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async_main());
}

async fn async_main() {
    let url = upstream().await;
    let guard = Arc::new(UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]));
    let endpoint = Endpoint {
        url: url.clone(),
        revisions: Revisions::Latest,
        headers: BTreeMap::new(),
        limits: UpstreamLimits::default(),
    };
    let direct = Arc::new(
        UpstreamClient::connect(&endpoint, guard, Arc::new(SystemResolver))
            .await
            .unwrap(),
    );

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
        .await
        .unwrap();
    let platform = Platform::builder(store, audit).unwrap().build();
    let config = UpstreamConfig {
        alias: "up".into(),
        url: Some(url),
        headers: BTreeMap::new(),
        allow: vec!["127.0.0.1".into()],
        approval: Approval::Never,
        revisions: Revisions::Latest,
        limits: Default::default(),
        ..UpstreamConfig::default()
    };
    let _federation = Federation::start(&platform, vec![config], Arc::new(SystemResolver), None)
        .await
        .unwrap();
    let run = || {
        RunContext::direct(Principal {
            id: "bench".into(),
            kind: PrincipalKind::Service,
            roles: vec!["admin".into()],
            issuer: IssuerBinding::Local,
        })
    };
    let (through, _teardown) =
        larkgate_session::connect(&platform, run(), "bench", Limits::default())
            .await
            .unwrap();
    let (bare, _bare_server) = larkgate_session::serve_in_memory(Noop).await.unwrap();

    // Warm up all three paths.
    for _ in 0..200 {
        direct.call_tool("noop", Default::default()).await.unwrap();
        through.call_tool("up__noop", Map::new()).await.unwrap();
        bare.peer()
            .call_tool(CallToolRequestParams::new("noop"))
            .await
            .unwrap();
    }
    // Interleaved, so the three figures share the machine's state.
    let (mut d, mut t, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CALLS {
        let s = Instant::now();
        direct.call_tool("noop", Default::default()).await.unwrap();
        d.push(s.elapsed());
        let s = Instant::now();
        through.call_tool("up__noop", Map::new()).await.unwrap();
        t.push(s.elapsed());
        let s = Instant::now();
        bare.peer()
            .call_tool(CallToolRequestParams::new("noop"))
            .await
            .unwrap();
        b.push(s.elapsed());
    }
    let (d, t, b) = (median(d), median(t), median(b));
    let added = t.saturating_sub(d);
    println!("tools/call to a Rust upstream on loopback, median of {CALLS} interleaved calls:");
    println!("   direct (upstream client → upstream):           {d:>10.2?}");
    println!("   through larkgate (session → platform → upstream): {t:>10.2?}");
    println!("   bare in-memory session round trip:              {b:>10.2?}");
    println!(
        "   larkgate adds {added:.2?} = {:.2}x the bare session round trip (target: at most 3x)",
        added.as_secs_f64() / b.as_secs_f64()
    );

    // Throughput with 32 concurrent callers.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENT {
        let direct = Arc::clone(&direct);
        tasks.push(tokio::spawn(async move {
            for _ in 0..PER_CALLER {
                direct.call_tool("noop", Default::default()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let direct_rate = (CONCURRENT * PER_CALLER) as f64 / started.elapsed().as_secs_f64();
    let mut sessions = Vec::new();
    for _ in 0..CONCURRENT {
        sessions.push(
            larkgate_session::connect(&platform, run(), "bench", Limits::default())
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (caller, _) in &sessions {
        let caller = caller.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..PER_CALLER {
                caller.call_tool("up__noop", Map::new()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let through_rate = (CONCURRENT * PER_CALLER) as f64 / started.elapsed().as_secs_f64();
    println!("{CONCURRENT} concurrent callers × {PER_CALLER} calls:");
    println!("   direct:           {direct_rate:>10.0} calls/s");
    println!(
        "   through larkgate: {through_rate:>10.0} calls/s  ({:.2}x of direct)",
        through_rate / direct_rate
    );
    for (_, teardown) in sessions {
        teardown.close().await;
    }
}
