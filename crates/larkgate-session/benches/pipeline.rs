//! Per-call cost of `clock_now` through an in-memory session with the full pipeline and
//! durable audit, against (a) the handler called directly and (b) the bare session round trip
//! with the pipeline off (a server that calls the same handler without any step), all in one
//! run. Prints medians, p99s and ratios.
//!
//! Target: the full pipeline within 2× of the bare session round trip.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use larkgate_binding::{Limits, Map};
use larkgate_caller::Caller;
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::registry::RegisteredTool;
use larkgate_platform::{CallContext, Platform, PlatformServer, RunContext, SessionIdentity};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

/// The pipeline off: a server that hands every call straight to the handler.
#[derive(Clone)]
struct BareServer {
    tool: Arc<RegisteredTool>,
    context: CallContext,
}

impl ServerHandler for BareServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let map = self
            .tool
            .handler
            .call(&self.context, Map::new())
            .await
            .unwrap();
        let json = serde_json::Value::Object(larkgate_binding::map_to_json(&map));
        Ok(CallToolResult::structured(json).into())
    }
}

fn admin() -> Principal {
    Principal {
        id: "bench".into(),
        kind: PrincipalKind::Service,
        roles: vec!["admin".into()],
        issuer: IssuerBinding::Local,
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    platform: Platform,
    /// The same platform with audit records discarded: attributes the audit's share.
    unaudited: Platform,
}

/// Discards every record (never in production: the pipeline would run unaudited).
#[derive(Debug)]
struct Discard;

impl larkgate_platform::audit::AuditSink for Discard {
    fn append(
        &self,
        _: larkgate_platform::audit::AuditEntry,
    ) -> Result<u64, larkgate_platform::audit::AuditError> {
        Ok(0)
    }
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
        .await
        .unwrap();
    let platform = Platform::builder(store.clone(), audit).unwrap().build();
    let unaudited = Platform::builder(store, Arc::new(Discard)).unwrap().build();
    Setup {
        _dir: dir,
        platform,
        unaudited,
    }
}

fn identity() -> Arc<SessionIdentity> {
    Arc::new(SessionIdentity {
        run: RunContext::direct(admin()),
        label: "bench".into(),
        server: None,
    })
}

/// Median and 99th percentile of per-call times.
fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (p(0.5), p(0.99))
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let setup = runtime.block_on(setup());
    let platform = setup.platform.clone();
    let tool = Arc::clone(platform.registry().get("clock_now").unwrap());
    let context = CallContext {
        identity: identity(),
        services: Arc::clone(platform.services()),
        conversation: larkgate_platform::Conversation::none(),
    };
    // Both sessions are driven by the same raw rmcp client, so the difference between them
    // is the server side: the pipeline and its audit records.
    let (full, _full_server_task) = runtime
        .block_on(larkgate_session::serve_in_memory(PlatformServer::new(
            platform.clone(),
            Some(identity()),
        )))
        .unwrap();
    let (unaudited, _unaudited_server_task) = runtime
        .block_on(larkgate_session::serve_in_memory(PlatformServer::new(
            setup.unaudited.clone(),
            Some(identity()),
        )))
        .unwrap();
    let (session, session_teardown) = runtime.block_on(async {
        larkgate_session::connect(
            &platform,
            identity().run.clone(),
            "bench",
            Limits::default(),
        )
        .await
        .unwrap()
    });
    let bare_server = BareServer {
        tool: Arc::clone(&tool),
        context: context.clone(),
    };
    let (bare_client, _bare_server_task) = runtime
        .block_on(larkgate_session::serve_in_memory(bare_server))
        .unwrap();

    let mut group = c.benchmark_group("clock_now_per_call");
    group.bench_function("direct handler", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(tool.handler.call(&context, Map::new()).await.unwrap()) })
    });
    group.bench_function("bare session (pipeline off)", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(
                bare_client
                    .call_tool(CallToolRequestParams::new("clock_now"))
                    .await
                    .unwrap(),
            )
        })
    });
    group.bench_function("full pipeline + durable audit", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(
                full.call_tool(CallToolRequestParams::new("clock_now"))
                    .await
                    .unwrap(),
            )
        })
    });
    group.bench_function("pipeline, audit discarded", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(
                unaudited
                    .call_tool(CallToolRequestParams::new("clock_now"))
                    .await
                    .unwrap(),
            )
        })
    });
    group.bench_function("SessionCaller (full pipeline, results as Map)", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(session.call_tool("clock_now", Map::new()).await.unwrap()) })
    });
    group.finish();

    // Medians and p99s from interleaved batches, so all three see the same conditions.
    let (mut direct, mut bare, mut piped, mut no_audit) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        for _ in 0..200 {
            for _ in 0..50 {
                let t = Instant::now();
                black_box(tool.handler.call(&context, Map::new()).await.unwrap());
                direct.push(t.elapsed());
            }
            for _ in 0..50 {
                let t = Instant::now();
                black_box(
                    bare_client
                        .call_tool(CallToolRequestParams::new("clock_now"))
                        .await
                        .unwrap(),
                );
                bare.push(t.elapsed());
            }
            for _ in 0..50 {
                let t = Instant::now();
                black_box(
                    full.call_tool(CallToolRequestParams::new("clock_now"))
                        .await
                        .unwrap(),
                );
                piped.push(t.elapsed());
            }
            for _ in 0..50 {
                let t = Instant::now();
                black_box(
                    unaudited
                        .call_tool(CallToolRequestParams::new("clock_now"))
                        .await
                        .unwrap(),
                );
                no_audit.push(t.elapsed());
            }
        }
    });
    let (d50, d99) = stats(direct);
    let (b50, b99) = stats(bare);
    let (f50, f99) = stats(piped);
    let (n50, n99) = stats(no_audit);
    println!();
    println!("clock_now, 10,000 calls of each kind, interleaved in batches of 50:");
    println!("  (a) direct handler:               p50 {d50:>9.2?}  p99 {d99:>9.2?}");
    println!("  (b) bare session, pipeline off:   p50 {b50:>9.2?}  p99 {b99:>9.2?}");
    println!("  full pipeline + durable audit:    p50 {f50:>9.2?}  p99 {f99:>9.2?}");
    println!("  pipeline, audit discarded:        p50 {n50:>9.2?}  p99 {n99:>9.2?}");
    println!(
        "  ratio full / bare session: p50 {:.2}x  p99 {:.2}x  (target: p50 at most 2x)",
        f50.as_secs_f64() / b50.as_secs_f64(),
        f99.as_secs_f64() / b99.as_secs_f64()
    );
    println!(
        "  ratio full / direct handler: p50 {:.1}x",
        f50.as_secs_f64() / d50.as_secs_f64()
    );
    println!(
        "  pipeline cost over the bare session: p50 {:.2?}",
        f50.saturating_sub(b50)
    );
    runtime.block_on(session_teardown.close());
}

criterion_group!(benches, bench);
criterion_main!(benches);
