//! Tools from inside a script, against a scripted `Caller`: globals, namespaces, `call`,
//! `try_call`, binding before the call leaves, pacing, the draft barrier and the call limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_binding::{FieldShape, Limits, Map, Value};
use larkgate_caller::{
    Annotations, CallError, Caller, Code, Origin, RefusalError, Source, ToolInfo,
};
use larkgate_script::{Blocking, RunError, Script, ScriptLimits, Tools, run_in_process};

/// A caller with a fixed listing that records calls and answers from a script of replies.
#[derive(Default)]
pub(crate) struct Scripted {
    pub(crate) calls: Mutex<Vec<(String, Map)>>,
    /// How many times each call is refused as rate-limited before it succeeds.
    rate_limited: Mutex<u32>,
    refuse_with: Mutex<Option<RefusalError>>,
}

fn tool(
    name: &str,
    source: Source,
    alias: Option<&str>,
    original: &str,
    read_only: bool,
) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        title: None,
        description: Some(format!("The {original} tool.")),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
            "required": ["query"],
        }),
        input_shape: None,
        signature: None,
        annotations: Annotations {
            read_only: Some(read_only),
            ..Default::default()
        },
        origin: Origin {
            source,
            alias: alias.map(str::to_owned),
            original_name: original.into(),
        },
    }
}

pub(crate) fn listing() -> Vec<ToolInfo> {
    let mut kv_get = tool("kv_get", Source::Capability, None, "kv_get", true);
    kv_get.input_shape = Some(vec![
        FieldShape::new("key", "str", true),
        FieldShape::new("default", "str | None", false),
    ]);
    kv_get.signature = Some("kv_get(*, key: str, default: str | None = None) -> dict".into());
    let mut kv_set = tool("kv_set", Source::Capability, None, "kv_set", false);
    kv_set.input_shape = Some(vec![
        FieldShape::new("key", "str", true),
        FieldShape::new("value", "str", true),
    ]);
    vec![
        kv_get,
        kv_set,
        tool(
            "github__search_issues",
            Source::Upstream,
            Some("github"),
            "search_issues",
            true,
        ),
        tool(
            "github__search-code",
            Source::Upstream,
            Some("github"),
            "search-code",
            true,
        ),
    ]
}

impl Caller for Scripted {
    async fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        Ok(listing())
    }

    async fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError> {
        self.calls
            .lock()
            .unwrap()
            .push((name.to_owned(), arguments.clone()));
        if let Some(refusal) = self.refuse_with.lock().unwrap().clone() {
            return Err(CallError::Refused(refusal));
        }
        let mut limited = self.rate_limited.lock().unwrap();
        if *limited > 0 {
            *limited -= 1;
            return Err(CallError::Refused(RefusalError {
                code: Code::RateLimited,
                retry_after: Some(Duration::from_millis(10)),
                approval_id: None,
                text: "slow down".into(),
            }));
        }
        let mut result = Map::new();
        result.insert("tool".into(), Value::from(name));
        result.insert("args".into(), Value::Map(arguments));
        Ok(result)
    }
}

fn limits() -> ScriptLimits {
    ScriptLimits {
        max_ticks: 1_000_000,
        max_tool_calls: 20,
        max_wall_time: Duration::from_secs(5),
        values: Limits::default(),
        ..ScriptLimits::default()
    }
}

fn run_with(
    caller: Arc<Scripted>,
    draft: bool,
    source: &str,
) -> Result<larkgate_script::RunOutput, RunError> {
    let host = Arc::new(Blocking(ArcCaller(caller)));
    run_in_process(
        Script {
            filename: "tools.star",
            source,
            arguments: &Map::new(),
            limits: &limits(),
        },
        Some(Tools { host, draft }),
    )
    .into_result()
}

/// `Arc<Scripted>` as a `Caller`, so the test keeps a handle on what was called.
struct ArcCaller(Arc<Scripted>);

impl Caller for ArcCaller {
    async fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        self.0.tools().await
    }
    async fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError> {
        self.0.call_tool(name, arguments).await
    }
}

#[test]
fn capabilities_are_globals_and_upstream_tools_live_in_their_namespace() {
    let caller = Arc::new(Scripted::default());
    let source = r#"
def main():
    a = kv_get(key = "k")
    b = github.search_issues(query = "bug", limit = 3)
    c = github["search-code"](query = "fn main")
    d = call("kv_get", key = "other", default = None)
    return [a["tool"], b["args"], c["tool"], d["args"]]
"#;
    let out = run_with(caller.clone(), false, source).unwrap();
    assert_eq!(
        out.result.to_string(),
        r#"["kv_get",{"limit":3,"query":"bug"},"github__search-code",{"key":"other"}]"#
    );
    assert_eq!(out.tool_calls, 4);
    assert_eq!(caller.calls.lock().unwrap().len(), 4);
}

#[test]
fn arguments_are_checked_before_the_call_leaves_the_engine() {
    for (call, expected) in [
        ("kv_get('k')", "takes keyword arguments only"),
        ("kv_get(ky = 'k')", "did you mean `key`?"),
        ("kv_get(key = 1)", "argument `key` must be str, got int"),
        (
            "github.search_issues(limit = 1)",
            "missing the required argument `query`",
        ),
        (
            "github.search_issues(query = 3)",
            "argument `query` must be string, got int",
        ),
    ] {
        let caller = Arc::new(Scripted::default());
        let source = format!("def main():\n    return {call}\n");
        let err = run_with(caller.clone(), false, &source).unwrap_err();
        assert!(err.to_string().contains(expected), "{call}: {err}");
        assert_eq!(err.code(), "invalid_arguments", "{call}");
        assert!(
            caller.calls.lock().unwrap().is_empty(),
            "{call} left the engine"
        );
    }
}

#[test]
fn a_refusal_raises_with_the_tools_own_text_and_code_unless_tried() {
    let caller = Arc::new(Scripted::default());
    *caller.refuse_with.lock().unwrap() = Some(RefusalError {
        code: Code::Forbidden,
        retry_after: None,
        approval_id: None,
        text: "ada may not call kv_get".into(),
    });
    let err = run_with(
        caller.clone(),
        false,
        "def main():\n    return kv_get(key = 'k')\n",
    )
    .unwrap_err();
    assert_eq!(
        err,
        RunError::Refused {
            code: Code::Forbidden,
            text: "ada may not call kv_get".into(),
            tool: Some("kv_get".into()),
            approval_id: None,
        }
    );
    let source = r#"
def main():
    r = try_call("kv_get", key = "k")
    return {"ok": r.ok, "code": r.error.code, "message": r.error.message}
"#;
    let out = run_with(caller, false, source).unwrap();
    assert_eq!(
        out.result.to_string(),
        r#"{"code":"forbidden","message":"ada may not call kv_get","ok":false}"#
    );
}

#[test]
fn rate_limited_calls_are_paced_and_retried() {
    let caller = Arc::new(Scripted::default());
    *caller.rate_limited.lock().unwrap() = 3;
    let out = run_with(
        caller.clone(),
        false,
        "def main():\n    return kv_get(key = 'k')['tool']\n",
    )
    .unwrap();
    assert_eq!(out.result, Value::from("kv_get"));
    assert_eq!(out.paces, 3);
    assert_eq!(out.tool_calls, 4);
}

#[test]
fn a_draft_may_not_call_a_tool_that_does_not_declare_read_only() {
    let caller = Arc::new(Scripted::default());
    let err = run_with(
        caller.clone(),
        true,
        "def main():\n    return kv_set(key = 'k', value = 'v')\n",
    )
    .unwrap_err();
    assert_eq!(err.code(), "write_barrier");
    assert!(
        caller.calls.lock().unwrap().is_empty(),
        "the call left the engine"
    );
    // Reads are fine in a draft.
    assert!(run_with(caller, true, "def main():\n    return kv_get(key = 'k')\n").is_ok());
}

#[test]
fn the_tool_call_limit_stops_a_run() {
    let caller = Arc::new(Scripted::default());
    let source = "def main():\n    for i in range(1000000):\n        kv_get(key = 'k')\n";
    match run_with(caller, false, source) {
        Err(RunError::Limit {
            limit: "tool calls",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn tools_and_help_describe_what_a_script_may_call() {
    let caller = Arc::new(Scripted::default());
    let source = r#"
def main():
    names = [t.name for t in tools()]
    return {"names": names, "help": help(kv_get), "by_name": help("github__search-code")}
"#;
    let out = run_with(caller, false, source).unwrap();
    let map = out.result.as_map().unwrap();
    assert_eq!(map["names"].as_list().unwrap().len(), 4);
    assert!(
        map["help"]
            .as_str()
            .unwrap()
            .starts_with("kv_get(*, key: str")
    );
    assert!(
        map["by_name"]
            .as_str()
            .unwrap()
            .starts_with("github__search-code(query=..., limit=...)")
    );
}
