//! The script service on a temporary data directory, in this process: a real SQLite store and
//! audit chain, the platform with its pipeline, runs in real worker processes (this crate's
//! `larkgate-scripts-worker`), and principals who call the script tools through in-memory MCP
//! sessions, as agents and the command line do.

use std::sync::Arc;

use larkgate_binding::{Limits, Map};
use larkgate_caller::{CallError, Caller, RefusalError};
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::policy::Policy;
use larkgate_platform::{Platform, RunContext, RunKind};
use larkgate_script::WorkerCommand;
use larkgate_script::worker::DEFAULT_ADDRESS_SPACE;
use larkgate_scripts::{RunBounds, Scripts, Workers};
use larkgate_session::{SessionCaller, Teardown, connect};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, PrincipalStore, SqliteStore};
use serde_json::Value;

/// Every principal's policy: `admin` calls everything, `writer` the kv tools, and `author`
/// (who writes scripts) may call published scripts' tools.
pub(crate) const POLICY: &str = r#"
[roles.admin]
call = ["*"]

[roles.writer]
call = ["kv_*", "clock_now"]

[roles.author]
call = ["script__*"]
"#;

/// Reads, then tries to write: what a draft may not do and a published version may.
pub(crate) const GREET: &str = r#"
def main(*, name: str):
    """Greets, and tries to remember it."""
    seen = kv_get(key = name, default = "0")["value"]
    saved = try_call("kv_set", key = name, value = str(int(seen) + 1))
    print("saved" if saved.ok else "not saved: " + saved.error.code)
    return {"hello": name, "saved": saved.ok}
"#;

pub(crate) struct Harness {
    /// Keeps the data directory alive for the test's duration.
    _dir: tempfile::TempDir,
    pub(crate) store: Arc<SqliteStore>,
    pub(crate) audit: Arc<AuditLog>,
    pub(crate) platform: Platform,
    pub(crate) scripts: Arc<Scripts>,
}

fn principal(id: &str, roles: &[&str]) -> Principal {
    Principal {
        id: id.into(),
        kind: PrincipalKind::User,
        roles: roles.iter().map(|r| r.to_string()).collect(),
        issuer: IssuerBinding::Local,
    }
}

/// The worker program runs are made in.
pub(crate) fn worker() -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_larkgate-scripts-worker").into(),
        address_space: DEFAULT_ADDRESS_SPACE,
    }
}

impl Harness {
    /// The service on [`POLICY`] with the default bounds.
    pub(crate) async fn new() -> Self {
        Self::with("", RunBounds::default()).await
    }

    /// The service on [`POLICY`] followed by `policy` (more of the policy's TOML), under
    /// `bounds`. Principals: `root` (admin), `ada` (author and writer), `bob` (author), `pat`
    /// (publisher), `nobody` (no roles).
    pub(crate) async fn with(policy: &str, bounds: RunBounds) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        for p in [
            principal("root", &["admin"]),
            principal("ada", &["author", "writer"]),
            principal("bob", &["author"]),
            principal("pat", &["publisher"]),
            principal("nobody", &[]),
        ] {
            store.add_principal(p).await.unwrap();
        }
        let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
            .await
            .unwrap();
        let policy: Policy = toml::from_str(&format!("{POLICY}{policy}")).unwrap();
        let platform = Platform::builder(store.clone(), audit.clone())
            .unwrap()
            .policy(policy)
            .build();
        let scripts = Scripts::start(
            platform.clone(),
            store.clone(),
            audit.clone(),
            Workers::Fresh(worker()),
            bounds,
        )
        .await
        .unwrap();
        Harness {
            _dir: dir,
            store,
            audit,
            platform,
            scripts,
        }
    }

    /// A direct session as `id` (a registered principal), as an agent's.
    pub(crate) async fn session(&self, id: &str) -> Session {
        let principal = self.store.principal(id).await.unwrap().unwrap();
        let run = RunContext {
            principal,
            run_id: None,
            kind: RunKind::Direct,
            depth: 0,
            chain: Default::default(),
            upstream_tools: None,
        };
        let (caller, teardown) = connect(&self.platform, run, "direct", Limits::default())
            .await
            .unwrap();
        Session {
            caller,
            _teardown: teardown,
        }
    }

    /// Saves `source` as `author`'s draft `name`; panics if it is refused.
    pub(crate) async fn save(&self, author: &str, name: &str, source: &str) -> Value {
        self.session(author)
            .await
            .call(
                "script_save_draft",
                serde_json::json!({"name": name, "source": source}),
            )
            .await
            .unwrap_or_else(|refusal| panic!("{author} could not save {name}: {refusal}"))
    }

    /// Publishes `name` as `publisher`; panics if it is refused.
    pub(crate) async fn publish(&self, publisher: &str, name: &str) -> Value {
        self.session(publisher)
            .await
            .call("script_publish", serde_json::json!({"name": name}))
            .await
            .unwrap_or_else(|refusal| panic!("{publisher} could not publish {name}: {refusal}"))
    }

    /// The audit chain's records, flushed to the store first.
    pub(crate) async fn audit_records(&self) -> Vec<larkgate_store::AuditRecord> {
        use larkgate_store::AuditStore;
        self.audit.flush().await.unwrap();
        self.store
            .audit_records(larkgate_store::AuditQuery::default())
            .await
            .unwrap()
    }
}

/// A principal's MCP session with the platform.
pub(crate) struct Session {
    caller: SessionCaller,
    _teardown: Teardown,
}

impl Session {
    /// Calls `tool` with JSON `arguments`: its structured result, or its refusal.
    pub(crate) async fn call(&self, tool: &str, arguments: Value) -> Result<Value, RefusalError> {
        let arguments: Map = match larkgate_binding::from_json(&arguments, Limits::default()) {
            Ok(larkgate_binding::Value::Map(map)) => map,
            other => panic!("arguments are an object: {other:?}"),
        };
        match self.caller.call_tool(tool, arguments).await {
            Ok(result) => Ok(larkgate_binding::to_json(&larkgate_binding::Value::Map(
                result,
            ))),
            Err(CallError::Refused(refusal)) => Err(refusal),
            Err(other) => panic!("{tool}: {other}"),
        }
    }

    /// The refusal of a call that must be refused.
    pub(crate) async fn refused(&self, tool: &str, arguments: Value) -> RefusalError {
        match self.call(tool, arguments).await {
            Err(refusal) => refusal,
            Ok(result) => panic!("{tool} was not refused: {result}"),
        }
    }

    /// Runs `source` as a draft with `args`: the tool's answer or its refusal.
    pub(crate) async fn run_source(
        &self,
        source: &str,
        args: Value,
    ) -> Result<Value, RefusalError> {
        self.call(
            "script_run_draft",
            serde_json::json!({"source": source, "args": args}),
        )
        .await
    }

    /// The record of run `id`, as `run_get` shows it to this session's principal.
    pub(crate) async fn run_record(&self, id: &str) -> Result<Value, RefusalError> {
        self.call("run_get", serde_json::json!({"run_id": id}))
            .await
    }
}
