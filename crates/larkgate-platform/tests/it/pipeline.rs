//! Each refusal code end to end, the order of the steps, and bad input.

use larkgate_store::{AuditStore, KvStore};
use std::sync::Arc;
use std::time::Duration;

use larkgate_binding::{Limits, Map, Value};
use larkgate_caller::Caller;
use larkgate_platform::registry::{Origin, Source, ToolAnnotations, ToolHandler, ToolSpec};
use larkgate_platform::{CallContext, CallLimits, Refusal, RunKind};

use crate::harness::{Harness, args, refusal};

#[tokio::test]
async fn a_visible_call_runs_and_returns_its_structured_result() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("wes").await;
    let set = caller
        .call_tool(
            "kv_set",
            args(&[("key", "greeting".into()), ("value", "hi".into())]),
        )
        .await
        .unwrap();
    assert_eq!(set.get("created"), Some(&Value::Bool(true)));
    let got = caller
        .call_tool("kv_get", args(&[("key", "greeting".into())]))
        .await
        .unwrap();
    assert_eq!(got.get("value"), Some(&Value::from("hi")));
    assert_eq!(got.get("found"), Some(&Value::Bool(true)));
    let now = caller.call_tool("clock_now", Map::new()).await.unwrap();
    assert!(now.get("unix_ms").and_then(Value::as_i64).unwrap() > 1_700_000_000_000);
    assert!(
        now.get("rfc3339")
            .and_then(Value::as_str)
            .unwrap()
            .ends_with('Z')
    );
}

#[tokio::test]
async fn hidden_and_nonexistent_tools_are_refused_with_the_same_text() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("wes").await;
    // wes cannot see approvals_list (a platform tool for approvers).
    let hidden = refusal(&caller, "approvals_list", Map::new()).await;
    let missing = refusal(&caller, "approvals_lisst", Map::new()).await;
    assert_eq!(hidden.code, "not_found");
    assert_eq!(missing.code, "not_found");
    let strip = |text: &str, name: &str| text.replace(name, "<tool>");
    assert_eq!(
        strip(&hidden.text, "approvals_list"),
        strip(&missing.text, "approvals_lisst")
    );
    // Nobody sees anything: a capability is as absent as a fiction.
    let (none, _t2) = h.session("nobody").await;
    let a = refusal(&none, "kv_get", args(&[("key", "k".into())])).await;
    let b = refusal(&none, "kv_gett", args(&[("key", "k".into())])).await;
    assert_eq!(strip(&a.text, "kv_get"), strip(&b.text, "kv_gett"));
}

#[tokio::test]
async fn a_visible_tool_the_policy_refuses_is_forbidden() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("vera").await;
    let refused = refusal(
        &caller,
        "kv_set",
        args(&[("key", "k".into()), ("value", "v".into())]),
    )
    .await;
    assert_eq!(refused.code, "forbidden");
    assert!(
        refused.text.contains("vera may not call kv_set"),
        "{}",
        refused.text
    );
}

#[tokio::test]
async fn forbidden_takes_precedence_over_the_rate_limit() {
    let h = Harness::with(|b| {
        b.policy(
            toml::from_str(
                r#"
                [roles.viewer]
                list = ["*"]
                [[rate_limits]]
                per = "principal"
                calls = 1
                period_seconds = 60
                "#,
            )
            .unwrap(),
        )
    })
    .await;
    let (caller, _t) = h.session("vera").await;
    for _ in 0..3 {
        let refused = refusal(&caller, "kv_get", args(&[("key", "k".into())])).await;
        assert_eq!(refused.code, "forbidden");
    }
    // The order the pipeline was assembled in, as `build()` recorded it.
    assert_eq!(
        h.platform.steps(),
        [
            "authenticate",
            "authorize",
            "arguments",
            "conditions",
            "write barrier",
            "rate limit",
            "approval gate"
        ]
    );
}

#[tokio::test]
async fn the_rate_limit_is_exact_under_a_burst_and_says_when_to_retry() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("wes").await;
    for i in 0..5 {
        assert!(
            caller.call_tool("clock_now", Map::new()).await.is_ok(),
            "call {i}"
        );
    }
    let refused = refusal(&caller, "clock_now", Map::new()).await;
    assert_eq!(refused.code, "rate_limited");
    // The next slot opens in 200 ms; retry_after_seconds rounds up to 1.
    assert_eq!(refused.retry_after, Some(Duration::from_secs(1)));
    h.clock.advance(Duration::from_millis(199));
    assert_eq!(
        refusal(&caller, "clock_now", Map::new()).await.code,
        "rate_limited"
    );
    h.clock.advance(Duration::from_millis(1));
    assert!(caller.call_tool("clock_now", Map::new()).await.is_ok());
    // Other tools are not limited by this rule.
    assert!(
        caller
            .call_tool("kv_get", args(&[("key", "k".into())]))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_draft_session_may_call_only_read_only_tools() {
    let h = Harness::new().await;
    let (draft, _t) = h.session_kind("wes", RunKind::Draft).await;
    assert!(
        draft
            .call_tool("kv_get", args(&[("key", "k".into())]))
            .await
            .is_ok()
    );
    let refused = refusal(
        &draft,
        "kv_set",
        args(&[("key", "k".into()), ("value", "v".into())]),
    )
    .await;
    assert_eq!(refused.code, "write_barrier");
    assert_eq!(
        h.store.kv_get("k").await.unwrap(),
        None,
        "nothing was written"
    );
}

#[tokio::test]
async fn bad_arguments_are_refused_clearly_and_the_server_keeps_serving() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("wes").await;
    let wrong_type = refusal(&caller, "kv_get", args(&[("key", Value::Int(1))])).await;
    assert_eq!(wrong_type.code, "invalid_arguments");
    assert!(
        wrong_type
            .text
            .contains("argument `key` must be str, got int"),
        "{}",
        wrong_type.text
    );
    let unknown = refusal(
        &caller,
        "kv_get",
        args(&[("key", "k".into()), ("ky", "x".into())]),
    )
    .await;
    assert!(
        unknown.text.contains("unexpected keyword argument `ky`"),
        "{}",
        unknown.text
    );
    let missing = refusal(&caller, "kv_set", args(&[("key", "k".into())])).await;
    assert!(
        missing
            .text
            .contains("missing the required argument `value`"),
        "{}",
        missing.text
    );
    let huge = "x".repeat(1024 * 1024 + 1);
    let oversized = refusal(
        &caller,
        "kv_set",
        args(&[("key", "k".into()), ("value", huge.into())]),
    )
    .await;
    assert_eq!(oversized.code, "invalid_arguments");
    assert!(
        oversized.text.contains("over the limit of 1048576 bytes"),
        "{}",
        oversized.text
    );
    let bad_limit = refusal(&caller, "kv_list", args(&[("limit", Value::Int(0))])).await;
    assert!(
        bad_limit.text.contains("`limit` must be 1 to 1000"),
        "{}",
        bad_limit.text
    );
    // Still serving.
    assert!(
        caller
            .call_tool("kv_get", args(&[("key", "k".into())]))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_result_over_the_value_limits_is_limit_exceeded() {
    let limits = CallLimits {
        values: Limits::new(64, 100_000, 4_096).unwrap(),
        ..CallLimits::default()
    };
    let h = Harness::with(|b| b.limits(limits)).await;
    let (caller, _t) = h.session("wes").await;
    for i in 0..5 {
        let value = format!("{i}").repeat(1_000);
        caller
            .call_tool(
                "kv_set",
                args(&[("key", format!("k{i}").into()), ("value", value.into())]),
            )
            .await
            .unwrap();
    }
    let refused = refusal(&caller, "kv_list", Map::new()).await;
    assert_eq!(refused.code, "limit_exceeded");
    assert!(
        refused.text.contains("max_bytes = 4096"),
        "{}",
        refused.text
    );
}

/// A tool whose handler leaves a file behind: a side effect outside the store.
struct TouchFile(std::path::PathBuf);

#[async_trait::async_trait]
impl ToolHandler for TouchFile {
    async fn call(&self, _: &CallContext, _: Map) -> Result<Map, Refusal> {
        std::fs::write(&self.0, b"ran").unwrap();
        Ok(Map::new())
    }
}

fn touch_spec() -> ToolSpec {
    ToolSpec {
        name: "touch".into(),
        title: None,
        description: "Writes a file.".into(),
        input_schema: serde_json::json!({"type": "object"})
            .as_object()
            .unwrap()
            .clone(),
        output_schema: None,
        annotations: ToolAnnotations::default(),
        origin: Origin {
            source: Source::Capability,
            alias: None,
            original_name: "touch".into(),
        },
        read_only: false,
        input_shape: None,
        signature: None,
        roles: None,
        requires_approval: false,
        people_only: false,
        definition: None,
    }
}

/// An audit sink that cannot write intents.
#[derive(Debug)]
struct FailingIntents;

impl larkgate_platform::audit::AuditSink for FailingIntents {
    fn append(
        &self,
        entry: larkgate_platform::audit::AuditEntry,
    ) -> Result<u64, larkgate_platform::audit::AuditError> {
        if entry.kind == Some(larkgate_store::AuditKind::Intent) {
            return Err(std::io::Error::other("disk full").into());
        }
        Ok(0)
    }
}

#[tokio::test]
async fn when_the_intent_cannot_be_written_the_call_does_not_run() {
    let marker = tempfile::tempdir().unwrap();
    let path = marker.path().join("side-effect");
    let handler: Arc<dyn ToolHandler> = Arc::new(TouchFile(path.clone()));
    let h = Harness::with_sink(Some(Arc::new(FailingIntents)), |b| {
        b.tool(touch_spec(), handler).unwrap()
    })
    .await;
    let (caller, _t) = h.session("root").await;
    let refused = refusal(&caller, "touch", Map::new()).await;
    assert_eq!(refused.code, "internal");
    assert!(
        refused.text.contains("the call did not run"),
        "{}",
        refused.text
    );
    assert!(!path.exists(), "the handler ran without an intent record");
}

#[tokio::test]
async fn with_a_working_journal_the_same_tool_runs() {
    let marker = tempfile::tempdir().unwrap();
    let path = marker.path().join("side-effect");
    let handler: Arc<dyn ToolHandler> = Arc::new(TouchFile(path.clone()));
    let h = Harness::with(|b| b.tool(touch_spec(), handler).unwrap()).await;
    let (caller, _t) = h.session("root").await;
    caller.call_tool("touch", Map::new()).await.unwrap();
    assert!(path.exists());
}

/// What larkgate logs while a test runs, for tests of what goes to the operator's log.
#[derive(Clone, Default)]
struct CapturedLog(Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn a_failing_store_is_internal_with_a_correlation_id_and_its_detail_only_in_the_log() {
    let log = CapturedLog::default();
    // The test runtime is single-threaded: the server's tasks log through this subscriber too.
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .finish(),
    );
    let h = Harness::new().await;
    // The store fails under the approval gate: its approvals table is gone.
    let raw = rusqlite::Connection::open(h.dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    raw.execute_batch("DROP TABLE approvals").unwrap();
    let (caller, _t) = h.session("wes").await;
    let refused = refusal(&caller, "kv_delete", args(&[("key", "k".into())])).await;
    assert_eq!(refused.code, "internal");
    let id: String = refused
        .text
        .split("correlation id ")
        .nth(1)
        .expect("the text names a correlation id")
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    assert_eq!(id.len(), 16, "{}", refused.text);
    // The caller learns that larkgate failed and what did not happen, nothing of the store.
    let text = refused.text.to_lowercase();
    for leak in [
        "no such table",
        "sqlite",
        "select ",
        "database error",
        "/tmp",
    ] {
        assert!(!text.contains(leak), "{leak:?} reached the caller: {text}");
    }
    // The operator's log has the detail, under the same id.
    let logged = log.text();
    let line = logged
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("no log line names {id}: {logged}"));
    assert!(line.contains("no such table: approvals"), "{line}");
    // The server keeps serving what does not need the broken table.
    let ok = caller
        .call_tool("kv_get", args(&[("key", "k".into())]))
        .await
        .unwrap();
    assert_eq!(ok.get("found"), Some(&Value::Bool(false)));
}

/// A principal with no roles at all sends a 3 MB tool name: refused before any lookup, with a
/// short answer, and recorded cut with the whole name's hash; a few such calls do not grow
/// the data directory by megabytes.
#[tokio::test]
async fn a_tool_name_over_128_bytes_is_refused_and_recorded_cut_with_its_hash() {
    use sha2::Digest as _;
    let h = Harness::new().await;
    let (caller, _t) = h.session("nobody").await;
    let name = "a".repeat(3_000_000);
    for _ in 0..5 {
        let refused = refusal(&caller, &name, Map::new()).await;
        assert_eq!(refused.code, "not_found");
        assert!(
            refused.text.len() < 1024,
            "{} bytes told",
            refused.text.len()
        );
        assert!(refused.text.contains("at most 128"), "{}", refused.text);
    }
    h.audit.flush().await.unwrap();
    let records = h
        .store
        .audit_records(larkgate_store::AuditQuery::default())
        .await
        .unwrap();
    let hash = hex::encode(sha2::Sha256::digest(name.as_bytes()));
    let refusals: Vec<_> = records
        .iter()
        .filter(|r| r.tool.as_deref().is_some_and(|t| t.contains(&hash)))
        .collect();
    assert_eq!(refusals.len(), 5, "each refusal recorded");
    for record in refusals {
        let tool = record.tool.as_deref().unwrap();
        assert!(tool.len() < 300, "{} bytes recorded", tool.len());
        assert!(tool.contains("cut: 3000000 bytes"), "{tool}");
        assert!(record.detail.as_deref().unwrap().len() < 1024);
    }
    // (The flusher may release a journal segment meanwhile: a file gone holds nothing.)
    let size: u64 = std::fs::read_dir(h.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(size < 4 * 1024 * 1024, "the data directory is {size} bytes");
}

/// Holds the write lock of the harness's database from another connection (as another
/// process would) for `held`; answers once it is taken.
fn hold_write_lock(h: &Harness, held: Duration) -> std::thread::JoinHandle<()> {
    let path = h.dir.path().join(larkgate_store::DATABASE_FILE);
    let (locked, taken) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(held);
        connection.execute_batch("COMMIT").unwrap();
    });
    taken.recv().unwrap();
    holder
}

/// Another process holds the store's write lock for a second: a write through the pipeline
/// waits and succeeds. (Past the busy timeout the store answers busy, see the store's
/// `locks` tests, and `Refusal::store` makes that a `timeout`, see its unit test; end to end
/// the time that takes depends on the audit flusher, which shares the store's connection
/// and waits on the same lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_out_a_brief_lock() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    let set = |value: &'static str| args(&[("key", "k".into()), ("value", value.into())]);
    wes.call_tool("kv_set", set("0")).await.unwrap();
    let holder = hold_write_lock(&h, Duration::from_secs(1));
    wes.call_tool("kv_set", set("1"))
        .await
        .expect("the write waits for a lock held for a second");
    holder.join().unwrap();
    let got = wes
        .call_tool("kv_get", args(&[("key", "k".into())]))
        .await
        .unwrap();
    assert_eq!(got.get("value"), Some(&Value::from("1")));
}
