//! Traces as a collector receives them: `larkgate serve` exporting over OTLP/HTTP to a real
//! receiver process that decodes with OpenTelemetry's official protobuf package, a client's
//! `traceparent` (header or `_meta`) as the parent, spans through the pipeline, a script run
//! and its host calls, and the context passed on to an upstream built with the Python SDK.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A Python process of the tests' peers: the port it printed, and its later lines.
pub(crate) struct Peer {
    child: Child,
    pub(crate) port: u16,
    lines: Receiver<String>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn peer(script: &str) -> Peer {
    peer_with(script, &[])
}

/// [`peer`], given these arguments.
pub(crate) fn peer_with(script: &str, args: &[&std::ffi::OsStr]) -> Peer {
    let mut child = Command::new(crate::python())
        .arg(
            crate::root()
                .join("crates/larkgate/tests/peers")
                .join(script),
        )
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    stdout.read_line(&mut port).unwrap();
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    Peer {
        port: port
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{script} printed {port:?}")),
        child,
        lines,
    }
}

impl Peer {
    /// The next line it prints (within 30 s).
    pub(crate) fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the peer printed no further line within 30 s")
    }

    /// A line it printed and nobody has read yet, without waiting.
    pub(crate) fn printed(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

/// One exported span, as the receiver decoded it.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    pub(crate) name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    kind: i64,
    service: String,
    attributes: Value,
}

/// Spans received until `done` holds of all of them (or 30 s pass).
pub(crate) fn spans_until(receiver: &Peer, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut spans = Vec::new();
    while !done(&spans) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = receiver.lines.recv_timeout(left) else {
            panic!("the collector did not receive the spans expected; it got {spans:#?}");
        };
        let span: Value = serde_json::from_str(&line).unwrap();
        spans.push(Span {
            name: span["name"].as_str().unwrap().to_owned(),
            trace_id: span["trace_id"].as_str().unwrap().to_owned(),
            span_id: span["span_id"].as_str().unwrap().to_owned(),
            parent: span["parent_span_id"].as_str().unwrap().to_owned(),
            kind: span["kind"].as_i64().unwrap(),
            service: span["service"].as_str().unwrap_or_default().to_owned(),
            attributes: span["attributes"].clone(),
        });
    }
    spans
}

/// A `tools/call` in the 2026-07-28 revision, with a `traceparent` header and/or one in
/// `_meta`; answers the JSON-RPC answer.
pub(crate) fn call(
    url: &str,
    token: &str,
    header: Option<&str>,
    meta: Option<&str>,
    tool: &str,
    arguments: Value,
) -> Value {
    let mut meta_object = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let Some(meta) = meta {
        meta_object["traceparent"] = json!(meta);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta_object},
    });
    let mut request = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .json(&body);
    // A name that is no header text cannot be sent in `Mcp-Name`.
    if let Ok(name) = reqwest::header::HeaderValue::from_str(tool) {
        request = request.header("mcp-name", name);
    }
    if let Some(header) = header {
        request = request.header("traceparent", header);
    }
    request.send().unwrap().json().unwrap()
}

/// The client's span ids, as a client that traces its own calls would send them.
const CLIENT_SPAN: &str = "b7ad6b7169203331";

fn traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{CLIENT_SPAN}-01")
}

fn named<'a>(spans: &'a [Span], trace_id: &str, name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.trace_id == trace_id && s.name == name)
        .unwrap_or_else(|| panic!("no span {name:?} in trace {trace_id}: {spans:#?}"))
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a str> {
    spans
        .iter()
        .filter(|s| s.trace_id == parent.trace_id && s.parent == parent.span_id)
        .map(|s| s.name.as_str())
        .collect()
}

/// The pipeline's steps, each a child of the call's span, in the order they run.
const STEPS: [&str; 8] = [
    "authenticate",
    "authorize",
    "arguments",
    "conditions",
    "write barrier",
    "rate limit",
    "approval gate",
    "journal",
];

#[test]
fn a_call_is_traced_from_the_clients_context_through_the_pipeline_a_script_and_an_upstream() {
    let collector = peer("otlp_receiver.py");
    let upstream = peer("trace_peer.py");
    let config = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nservice_name = \"gateway-under-test\"\n\n\
         [[upstreams]]\nalias = \"tracer\"\nurl = \"http://127.0.0.1:{}/mcp\"\nallow = [\"127.0.0.1\"]\napproval = \"never\"\n",
        collector.port, upstream.port
    );
    let (_dir, server, token) = crate::serve::admin_gateway(&config);
    let url = server.url.clone();

    // A. The `traceparent` header: the call's span is a child of the client's, and every
    // step of the pipeline a child of the call's.
    let header_trace = "0af7651916cd43dd8448eb211c80319c";
    let answer = call(
        &url,
        &token,
        Some(&traceparent(header_trace)),
        None,
        "kv_set",
        json!({"key": "k", "value": "v"}),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    // B. `_meta.traceparent`, for an upstream's tool: the upstream is told larkgate's span.
    let meta_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let answer = call(
        &url,
        &token,
        None,
        Some(&traceparent(meta_trace)),
        "tracer__seen",
        json!({}),
    );
    // The peer's dict is text content, which larkgate passes on as it came.
    let seen = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    let seen: Value = serde_json::from_str(seen).unwrap();

    // C. A draft run and its host call.
    let script_trace = "5c1e0e8b0a2d4f6a9b3c7d8e9f0a1b2c";
    let source = "def main():\n    return kv_get(key = \"k\")\n";
    let answer = call(
        &url,
        &token,
        Some(&traceparent(script_trace)),
        None,
        "script_run_draft",
        json!({"source": source}),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    // D. A caller without a valid token cannot place its request in a trace of its choosing.
    let refused_trace = "6d2f1f9c1b3e5a7bac4d8e9fa01b2c3d";
    let refused = call(
        &url,
        "lgt_not-a-token",
        Some(&traceparent(refused_trace)),
        None,
        "kv_get",
        json!({"key": "k"}),
    );
    assert_eq!(refused["error"]["code"], -32001, "{refused}");

    let spans = spans_until(&collector, |spans| {
        let has =
            |trace: &str, name: &str| spans.iter().any(|s| s.trace_id == trace && s.name == name);
        has(header_trace, "tools/call kv_set")
            && has(header_trace, "dispatch kv_set")
            && has(meta_trace, "tools/call tracer__seen")
            && has(meta_trace, "tools/call seen")
            && has(script_trace, "tools/call script_run_draft")
            && has(script_trace, "tools/call kv_get")
            && has(script_trace, "dispatch kv_get")
            && spans
                .iter()
                .any(|s| s.attributes["larkgate.outcome"] == "unauthenticated")
    });

    // A: parent/child links and what the call's span says.
    let request = named(&spans, header_trace, "tools/call kv_set");
    assert_eq!(request.parent, CLIENT_SPAN, "{request:?}");
    assert_eq!(request.kind, 2, "a server span: {request:?}");
    assert_eq!(request.service, "gateway-under-test");
    assert_eq!(request.attributes["mcp.method.name"], "tools/call");
    assert_eq!(request.attributes["gen_ai.tool.name"], "kv_set");
    assert_eq!(request.attributes["enduser.id"], "ada");
    assert_eq!(request.attributes["larkgate.outcome"], "ok");
    assert_eq!(request.attributes["http.response.status_code"], 200);
    assert_eq!(children(&spans, request), STEPS, "{spans:#?}");
    let journal = named(&spans, header_trace, "journal");
    assert_eq!(children(&spans, journal), ["dispatch kv_set"]);
    // No argument value, no token, in any span.
    let text = format!("{spans:?}");
    assert!(!text.contains(&token) && !text.contains("\"v\""), "{text}");

    // B: the `_meta` context is the parent; the upstream call is a client span under the
    // dispatch, and the upstream was told that span, in the header and in `_meta`.
    let request = named(&spans, meta_trace, "tools/call tracer__seen");
    assert_eq!(request.parent, CLIENT_SPAN, "{request:?}");
    let dispatch = named(&spans, meta_trace, "dispatch tracer__seen");
    let upstream_call = named(&spans, meta_trace, "tools/call seen");
    assert_eq!(upstream_call.parent, dispatch.span_id);
    assert_eq!(upstream_call.kind, 3, "a client span: {upstream_call:?}");
    assert_eq!(upstream_call.attributes["larkgate.upstream"], "tracer");
    let told = format!("00-{meta_trace}-{}-01", upstream_call.span_id);
    assert_eq!(seen["header"], told.as_str(), "{seen}");
    assert_eq!(seen["meta"], told.as_str(), "{seen}");

    // C: call → journal → dispatch → run → host call → the host call's own request through
    // the pipeline, all one trace.
    let request = named(&spans, script_trace, "tools/call script_run_draft");
    assert_eq!(request.parent, CLIENT_SPAN);
    let dispatch = named(&spans, script_trace, "dispatch script_run_draft");
    let run = spans
        .iter()
        .find(|s| s.trace_id == script_trace && s.name.starts_with("run "))
        .unwrap_or_else(|| panic!("no run span: {spans:#?}"));
    assert_eq!(run.parent, dispatch.span_id, "{run:?}");
    assert_eq!(run.attributes["larkgate.run.kind"], "draft");
    assert!(run.attributes["larkgate.run.id"].is_string(), "{run:?}");
    let host_call = named(&spans, script_trace, "host call kv_get");
    assert_eq!(host_call.parent, run.span_id);
    let inner = named(&spans, script_trace, "tools/call kv_get");
    assert_eq!(inner.parent, host_call.span_id);
    assert_eq!(children(&spans, inner), STEPS);

    // D: the refused request has a span of its own, in a trace larkgate started.
    let refused_span = spans
        .iter()
        .find(|s| s.attributes["larkgate.outcome"] == "unauthenticated")
        .unwrap();
    assert_ne!(refused_span.trace_id, refused_trace);
    assert!(refused_span.parent.is_empty(), "{refused_span:?}");
    assert!(spans.iter().all(|s| s.trace_id != refused_trace));

    // Every span is larkgate's own: none of the libraries' spans is exported.
    let names: HashMap<&str, usize> = spans.iter().fold(HashMap::new(), |mut m, s| {
        *m.entry(s.name.as_str()).or_default() += 1;
        m
    });
    assert!(
        names
            .keys()
            .all(|n| !n.contains("serve_inner") && !n.starts_with("rmcp")),
        "{names:?}"
    );
    drop(server);
}

#[test]
fn a_collector_that_never_answers_delays_no_call_and_its_failure_is_logged() {
    // Accepts connections and never answers a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let config = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nexport_timeout_ms = 1000\nmax_queued_spans = 64\n"
    );
    let (_dir, server, token) = crate::serve::admin_gateway(&config);
    // Far more spans than the queue holds, while the exporter waits on the collector: each
    // call is answered (within the client's 20 s timeout, which calls that waited on
    // one-second exports would exceed many times over).
    for i in 0..200 {
        let answer = call(&server.url, &token, None, None, "clock_now", json!({}));
        assert_eq!(answer["result"]["isError"], false, "call {i}: {answer}");
    }
    loop {
        let line = server.next_stderr_line();
        if line.contains("traces could not be sent to the collector; calls are not affected") {
            assert!(line.contains("lost_spans="), "{line}");
            break;
        }
    }
}

#[test]
fn the_sample_ratio_decides_for_traces_started_here_and_a_clients_sampled_flag_is_followed() {
    let collector = peer("otlp_receiver.py");
    let config = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nsample_ratio = 0.0\n",
        collector.port
    );
    let (_dir, server, token) = crate::serve::admin_gateway(&config);
    let not_sampled = "7e3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c";
    let sampled = "8f4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d";
    // Started here, with a ratio of 0: not recorded. The client's "not sampled": not
    // recorded either. The client's "sampled": recorded whatever the ratio.
    let clock = |header: Option<&str>| {
        let answer = call(&server.url, &token, header, None, "clock_now", json!({}));
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    };
    clock(None);
    clock(Some(&format!("00-{not_sampled}-{CLIENT_SPAN}-00")));
    clock(Some(&traceparent(sampled)));
    // Spans are exported in the order they end, so once the sampled call's are in, any of
    // the earlier calls' would be too.
    let spans = spans_until(&collector, |spans| {
        spans
            .iter()
            .any(|s| s.trace_id == sampled && s.name == "tools/call clock_now")
    });
    assert!(spans.iter().all(|s| s.trace_id == sampled), "{spans:#?}");
    let request = named(&spans, sampled, "tools/call clock_now");
    assert_eq!(children(&spans, request), STEPS);
}

/// Proxy variables in the environment reach none of larkgate's own requests: spans go to the
/// configured collector, a call to an HTTP upstream goes to the upstream, and `larkgate
/// client` goes to the running serve (with its token), not to the proxy the variables name.
#[test]
fn proxy_variables_in_the_environment_carry_no_span_no_upstream_call_and_no_token() {
    let collector = peer("otlp_receiver.py");
    let upstream = peer("trace_peer.py");
    let proxy = crate::Proxy::start();
    let config = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n\n\
         [[upstreams]]\nalias = \"tracer\"\nurl = \"http://127.0.0.1:{}/mcp\"\nallow = [\"127.0.0.1\"]\napproval = \"never\"\n",
        collector.port, upstream.port
    );
    let (dir, server, token) = crate::serve::admin_gateway_with_env(&config, &proxy.env());
    let answer = call(&server.url, &token, None, None, "tracer__seen", json!({}));
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    spans_until(&collector, |spans| {
        spans.iter().any(|s| s.name == "tools/call tracer__seen")
    });

    let listed = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir.path())
        .args(["client", "list"])
        .env("LARKGATE_TOKEN", &token)
        .envs(proxy.env())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", crate::stderr(&listed));
    assert!(crate::stdout(&listed).contains("tracer__seen"));
    assert_eq!(proxy.connections(), 0, "a request went to the proxy");
    assert!(server.stop().success());
}
