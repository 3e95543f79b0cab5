//! `tools/call` over Streamable HTTP on loopback: `larkgate serve` (the whole pipeline:
//! bearer token, policy, audit intent and outcome) against the official MCP Python SDK's
//! server answering the same trivial tool (`clock_now`, `benches/peers/noop_server.py`), with
//! one load generator (larkgate's own MCP client, the 2026-07-28 revision) and 1 and 32
//! concurrent clients, in one run.
//!
//! Criterion measures the time per call at each concurrency (its inverse is the throughput);
//! then a fixed pass of timed calls prints throughput, p50 and p99 for both servers and the
//! ratios. Target: at 32 clients larkgate serves at least 10× the Python SDK server's calls
//! per second.
//!
//! The Python server is measured as it ships (uvicorn, its defaults); on loopback its single
//! client round trip sits near 40 ms, the signature of Nagle's algorithm meeting delayed
//! acknowledgements, so the 1-client ratio says more about that than about Python.
//!
//! A second group measures what observing each call costs, against the same gateway without
//! its access log as the baseline: with the access log (the default), and with the access log
//! and every call traced to an OTLP/HTTP receiver (`tests/peers/otlp_receiver.py`).
//!
//! A third group measures what signing the audit chain costs (`kv_set`, checkpoints off, on,
//! and anchored to a file).
//!
//! Needs the Python SDK: run `scripts/test` once (it installs it into `.cache/py`), or point
//! `LARKGATE_TEST_PYTHON` at a Python that has `mcp` installed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};

const CONCURRENCY: [usize; 2] = [1, 32];
/// Calls per client in the fixed pass that measures percentiles.
const PASS_CALLS: usize = 4000;

/// A server process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn larkgate(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("larkgate runs");
    assert!(output.status.success(), "larkgate {args:?} failed");
    String::from_utf8(output.stdout).unwrap()
}

/// `larkgate serve` on a fresh data directory configured by `config`; its URL and a token.
fn start_larkgate(dir: &Path, config: &str) -> (Process, String, String) {
    let data = dir.join("larkgate-data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("larkgate.toml"), config).unwrap();
    larkgate(dir, &["principal", "add", "bench", "--roles", "admin"]);
    let token = larkgate(dir, &["token", "create", "--principal", "bench"])
        .trim()
        .to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir)
        // Its operational endpoints on a port of their own: several serve at once.
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "serve exited");
        if let Some(url) = line.trim().strip_prefix("larkgate: serving MCP at ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    (Process(child), url, token)
}

fn start_python() -> (Process, String) {
    let python = std::env::var_os("LARKGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/py/bin/python"));
    assert!(
        python.exists(),
        "the baseline needs the MCP Python SDK: run scripts/test once, or set LARKGATE_TEST_PYTHON"
    );
    let mut child = Command::new(python)
        .arg(root().join("crates/larkgate/benches/peers/noop_server.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (
        Process(child),
        format!("http://127.0.0.1:{}/mcp", port.trim()),
    )
}

async fn clients(url: &str, token: Option<&str>, n: usize) -> Vec<Arc<UpstreamClient>> {
    let mut headers = std::collections::BTreeMap::new();
    if let Some(token) = token {
        headers.insert("Authorization".to_owned(), format!("Bearer {token}"));
    }
    let endpoint = Endpoint {
        url: url.to_owned(),
        revisions: Revisions::Latest,
        headers,
        limits: UpstreamLimits::default(),
    };
    let guard = Arc::new(UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]));
    let mut out = Vec::new();
    for _ in 0..n {
        let client = UpstreamClient::connect(&endpoint, guard.clone(), Arc::new(SystemResolver))
            .await
            .expect("the server answers");
        // The 2026-07-28 client lists tools before it calls them, as clients do.
        client.list_tools().await.unwrap();
        out.push(Arc::new(client));
    }
    out
}

/// `per_client` calls of `clock_now` from each client at once; every call's latency.
async fn load(clients: &[Arc<UpstreamClient>], per_client: usize) -> (Duration, Vec<Duration>) {
    load_tool(clients, per_client, Tool::ClockNow).await
}

/// What the load generator calls.
#[derive(Clone, Copy)]
enum Tool {
    /// `clock_now`, no arguments: reads nothing, writes nothing.
    ClockNow,
    /// `kv_set` of a key no other call sets: one write to the store per call.
    KvSet,
}

/// Keys `kv_set` calls set, unique across every load of a run.
static KEYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`load`], calling `tool`.
async fn load_tool(
    clients: &[Arc<UpstreamClient>],
    per_client: usize,
    tool: Tool,
) -> (Duration, Vec<Duration>) {
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let client = Arc::clone(client);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let (name, arguments) = match tool {
                        Tool::ClockNow => ("clock_now", serde_json::Map::new()),
                        Tool::KvSet => {
                            let key = KEYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let mut arguments = serde_json::Map::new();
                            arguments.insert("key".into(), format!("bench-{key}").into());
                            arguments.insert("value".into(), "v".into());
                            ("kv_set", arguments)
                        }
                    };
                    let at = Instant::now();
                    let result = client.call_tool(name, arguments).await.unwrap();
                    assert_ne!(result.is_error, Some(true), "{result:?}");
                    latencies.push(at.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    (started.elapsed(), all)
}

/// Registers `name` in `group`: the time per call of `tool`, `iters` calls spread over the
/// clients of `set`.
fn time_per_call(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    set: &[Arc<UpstreamClient>],
    tool: Tool,
) {
    let n = set.len();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let per_client = (iters as usize).div_ceil(n).max(1);
            let (elapsed, latencies) = runtime.block_on(load_tool(set, per_client, tool));
            elapsed.mul_f64(iters as f64 / latencies.len() as f64)
        });
    });
}

struct Figures {
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn figures(elapsed: Duration, mut latencies: Vec<Duration>) -> Figures {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Figures {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_larkgate, larkgate_url, token) = start_larkgate(dir.path(), "");
    let (_python, python_url) = start_python();

    let mut summary = Vec::new();
    for n in CONCURRENCY {
        let ours = runtime.block_on(clients(&larkgate_url, Some(&token), n));
        let theirs = runtime.block_on(clients(&python_url, None, n));
        let mut group = c.benchmark_group(format!("tools_call_{n}_clients"));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(5));
        for (name, set) in [("python_sdk", &theirs), ("larkgate", &ours)] {
            time_per_call(&mut group, &runtime, name, set, Tool::ClockNow);
        }
        group.finish();
        let per_client = PASS_CALLS / n.min(8);
        let (e, l) = runtime.block_on(load(&theirs, per_client));
        let python = figures(e, l);
        let (e, l) = runtime.block_on(load(&ours, per_client));
        let larkgate = figures(e, l);
        summary.push((n, python, larkgate));
    }
    println!();
    println!("tools/call over Streamable HTTP on loopback (2026-07-28), same load generator:");
    for (n, python, larkgate) in &summary {
        println!(
            "  {n:>2} client(s): Python SDK {:>8.0} calls/s (p50 {:>8.2?}, p99 {:>8.2?}) | \
             larkgate {:>8.0} calls/s (p50 {:>8.2?}, p99 {:>8.2?}) | throughput ratio {:.1}x, \
             p50 ratio {:.2}x",
            python.per_second,
            python.p50,
            python.p99,
            larkgate.per_second,
            larkgate.p50,
            larkgate.p99,
            larkgate.per_second / python.per_second,
            larkgate.p50.as_secs_f64() / python.p50.as_secs_f64(),
        );
    }
    if let Some((_, python, larkgate)) = summary.iter().find(|(n, _, _)| *n == 32) {
        let ratio = larkgate.per_second / python.per_second;
        println!(
            "  target: at 32 clients, at least 10x the Python SDK server's throughput: {:.1}x ({})",
            ratio,
            if ratio >= 10.0 { "met" } else { "NOT met" }
        );
    }
}

/// An OTLP/HTTP receiver of the tests (`tests/peers/otlp_receiver.py`), printing nothing.
fn start_collector() -> (Process, u16) {
    let python = std::env::var_os("LARKGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/py/bin/python"));
    let mut child = Command::new(python)
        .arg(root().join("crates/larkgate/tests/peers/otlp_receiver.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run scripts/test once: it installs the receiver's Python packages");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    stdout.read_line(&mut port).unwrap();
    std::thread::spawn(move || for _ in stdout.lines() {});
    (Process(child), port.trim().parse().unwrap())
}

/// What the access log and traces cost: the same gateway without the access log (the
/// baseline), with it (the default, into a pipe that is read as a collector reads it), and
/// with it and every call traced to an OTLP receiver, at 32 clients.
fn observability(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_collector, port) = start_collector();
    let traced = format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n");
    let configs = [
        ("no_access_log", "[server]\naccess_log = false\n".to_owned()),
        ("access_log", String::new()),
        ("access_log_and_traces", traced),
    ];
    let n = 32;
    let mut group = c.benchmark_group(format!("observability_{n}_clients"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let mut summary = Vec::new();
    for (name, config) in &configs {
        let dir = tempfile::tempdir().unwrap();
        let (_server, url, token) = start_larkgate(dir.path(), config);
        let set = runtime.block_on(clients(&url, Some(&token), n));
        time_per_call(&mut group, &runtime, name, &set, Tool::ClockNow);
        let (e, l) = runtime.block_on(load(&set, PASS_CALLS / 8));
        summary.push((*name, figures(e, l)));
    }
    group.finish();
    let baseline = summary[0].1.per_second;
    println!();
    println!("tools/call at {n} clients, what observing each call costs:");
    for (name, figures) in &summary {
        println!(
            "  {name:<22} {:>8.0} calls/s (p50 {:>8.2?}, p99 {:>8.2?}) | {:.2}x the baseline",
            figures.per_second,
            figures.p50,
            figures.p99,
            figures.per_second / baseline,
        );
    }
}

/// What signing the audit chain costs: `kv_set` (a write and two chained records per call) at
/// 32 clients with `[audit] checkpoints = false` (the baseline), with checkpoints (the
/// default: one every 1,000 records or 60 s), and with each checkpoint also appended to an
/// anchor file. Target: checkpoints cost at most 5% of the calls per second.
fn checkpoints(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let anchors = tempfile::tempdir().unwrap();
    let anchored = format!(
        "[[audit.anchors]]\nfile = \"{}\"\n",
        anchors.path().join("anchors.jsonl").display()
    );
    let configs = [
        (
            "checkpoints_off",
            "[audit]\ncheckpoints = false\n".to_owned(),
        ),
        ("checkpoints_on", String::new()),
        ("checkpoints_anchored", anchored),
    ];
    let n = 32;
    let mut group = c.benchmark_group(format!("audit_kv_set_{n}_clients"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let mut servers = Vec::new();
    for (name, config) in &configs {
        let dir = tempfile::tempdir().unwrap();
        let (server, url, token) = start_larkgate(dir.path(), config);
        let set = runtime.block_on(clients(&url, Some(&token), n));
        servers.push((*name, dir, server, set));
    }
    for (name, _, _, set) in &servers {
        time_per_call(&mut group, &runtime, name, set, Tool::KvSet);
    }
    group.finish();
    // The fixed pass, the three alternating five times, so that drift falls on all alike.
    let mut passes: Vec<Vec<Figures>> = servers.iter().map(|_| Vec::new()).collect();
    for _ in 0..5 {
        for (i, (_, _, _, set)) in servers.iter().enumerate() {
            let (e, l) = runtime.block_on(load_tool(set, PASS_CALLS / 8, Tool::KvSet));
            passes[i].push(figures(e, l));
        }
    }
    let median = |figures: &mut Vec<Figures>| {
        figures.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
        figures.swap_remove(figures.len() / 2)
    };
    let summary: Vec<(&str, Figures)> = servers
        .iter()
        .zip(passes.iter_mut())
        .map(|((name, ..), figures)| (*name, median(figures)))
        .collect();
    let baseline = summary[0].1.per_second;
    println!();
    println!("kv_set at {n} clients, what signing the audit chain costs (median of 5 passes):");
    for (name, figures) in &summary {
        println!(
            "  {name:<22} {:>8.0} calls/s (p50 {:>8.2?}, p99 {:>8.2?}) | {:.3}x the baseline",
            figures.per_second,
            figures.p50,
            figures.p99,
            figures.per_second / baseline,
        );
    }
    let ratio = summary[1].1.per_second / baseline;
    println!(
        "  target: checkpoints cost at most 5% of the calls/s: {ratio:.3}x ({})",
        if ratio >= 0.95 { "met" } else { "NOT met" }
    );
}

criterion_group!(benches, bench, observability, checkpoints);
criterion_main!(benches);
