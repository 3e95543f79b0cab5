//! A platform on a temporary data directory, with principals and helpers to open sessions.

use std::sync::Arc;

use larkgate_binding::{Limits, Map, Value};
use larkgate_caller::{CallError, Caller, RefusalError};
use larkgate_platform::audit::{AuditLog, AuditOptions, AuditSink};
use larkgate_platform::clock::ManualClock;
use larkgate_platform::policy::Policy;
use larkgate_platform::{Platform, PlatformBuilder, RunContext, RunKind};
use larkgate_session::{SessionCaller, Teardown, connect};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, PrincipalStore, SqliteStore};

/// The test policy: `admin` everything; `viewer` sees everything but calls only reads;
/// `writer` calls the kv tools; approvals on `kv_delete`; a rate limit on `clock_now`.
pub(crate) const POLICY: &str = r#"
[roles.admin]
call = ["*"]

[roles.viewer]
list = ["*"]
call = ["kv_get", "kv_list", "clock_now"]

[roles.writer]
call = ["kv_*", "clock_now"]

[approvals]
require = ["kv_delete"]

[[rate_limits]]
per = "principal_tool"
tools = ["clock_now"]
calls = 5
period_seconds = 1
"#;

pub(crate) struct Harness {
    /// Keeps the data directory alive for the test's duration.
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Arc<SqliteStore>,
    pub(crate) audit: Arc<AuditLog>,
    pub(crate) platform: Platform,
    /// The platform's clocks, both: rate limits and approvals wait for it, not for time.
    pub(crate) clock: ManualClock,
}

pub(crate) fn principal(id: &str, roles: &[&str]) -> Principal {
    Principal {
        id: id.into(),
        kind: PrincipalKind::User,
        roles: roles.iter().map(|r| r.to_string()).collect(),
        issuer: IssuerBinding::Local,
    }
}

impl Harness {
    pub(crate) async fn new() -> Self {
        Self::with(|b| b).await
    }

    /// A harness whose builder `configure` may adjust.
    pub(crate) async fn with(configure: impl FnOnce(PlatformBuilder) -> PlatformBuilder) -> Self {
        Self::with_sink(None, configure).await
    }

    /// A harness whose audit records go to `sink` instead of the journal.
    pub(crate) async fn with_sink(
        sink: Option<Arc<dyn AuditSink>>,
        configure: impl FnOnce(PlatformBuilder) -> PlatformBuilder,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        for p in [
            principal("root", &["admin"]),
            principal("vera", &["viewer"]),
            principal("wes", &["writer"]),
            principal("alice", &["approver"]),
            principal("nobody", &[]),
        ] {
            store.add_principal(p).await.unwrap();
        }
        let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
            .await
            .unwrap();
        let policy: Policy = toml::from_str(POLICY).unwrap();
        let clock = ManualClock::default();
        let sink: Arc<dyn AuditSink> = sink.unwrap_or_else(|| audit.clone());
        let builder = Platform::builder(store.clone(), sink)
            .unwrap()
            .policy(policy)
            .clock(Box::new(clock.clone()))
            .wall_clock(Arc::new(clock.clone()));
        let platform = configure(builder).build();
        Harness {
            dir,
            store,
            audit,
            platform,
            clock,
        }
    }

    /// A direct session as `id` (a registered principal).
    pub(crate) async fn session(&self, id: &str) -> (SessionCaller, Teardown) {
        self.session_kind(id, RunKind::Direct).await
    }

    pub(crate) async fn session_kind(&self, id: &str, kind: RunKind) -> (SessionCaller, Teardown) {
        let principal = self.store.principal(id).await.unwrap().unwrap();
        let run = RunContext {
            principal,
            run_id: (kind != RunKind::Direct).then(|| format!("run-{id}")),
            kind,
            depth: u32::from(kind != RunKind::Direct),
            chain: Default::default(),
            upstream_tools: None,
        };
        connect(&self.platform, run, kind.as_str(), Limits::default())
            .await
            .unwrap()
    }
}

/// Arguments from `(key, value)` pairs.
pub(crate) fn args(pairs: &[(&str, Value)]) -> Map {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// The refusal of a call that must be refused.
pub(crate) async fn refusal(caller: &SessionCaller, tool: &str, arguments: Map) -> RefusalError {
    match caller.call_tool(tool, arguments).await {
        Err(CallError::Refused(refusal)) => refusal,
        other => panic!("{tool} should be refused, got {other:?}"),
    }
}
