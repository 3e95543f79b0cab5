//! Scripts through real in-memory sessions on the assembled platform: the same pipeline an
//! agent's call crosses, with the run's identity bound to its session.

use std::sync::Arc;

use larkgate_binding::{Limits, Map, Value};
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::{Platform, RunContext, RunKind};
use larkgate_script::{Blocking, RunError, Script, ScriptLimits, Tools, run_in_process};
use larkgate_store::{
    AuditKind, AuditQuery, AuditStore, IssuerBinding, KvStore, Principal, PrincipalKind,
    PrincipalStore, SqliteStore,
};

const POLICY: &str = r#"
[roles.author]
call = ["kv_*", "clock_now"]
"#;

const SCRIPT: &str = r#"
def main(*, key: str):
    """Reads a key, and tries to write it."""
    before = kv_get(key = key, default = "none")
    write = try_call("kv_set", key = key, value = "written")
    return {"before": before["value"], "wrote": write.ok, "code": write.error.code if not write.ok else None}
"#;

/// A platform on a fresh store, with one author, `ada`.
pub(crate) struct Setup {
    _dir: tempfile::TempDir,
    pub(crate) store: Arc<SqliteStore>,
    audit: Arc<AuditLog>,
    pub(crate) platform: Platform,
    pub(crate) ada: Principal,
}

pub(crate) async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let ada = Principal {
        id: "ada".into(),
        kind: PrincipalKind::User,
        roles: vec!["author".into()],
        issuer: IssuerBinding::Local,
    };
    store.add_principal(ada.clone()).await.unwrap();
    let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
        .await
        .unwrap();
    let platform = Platform::builder(store.clone(), audit.clone())
        .unwrap()
        .policy(toml::from_str(POLICY).unwrap())
        .build();
    Setup {
        _dir: dir,
        store,
        audit,
        platform,
        ada,
    }
}

async fn run(setup: &Setup, kind: RunKind) -> Result<larkgate_script::RunOutput, RunError> {
    let run = RunContext {
        principal: setup.ada.clone(),
        run_id: Some(format!("run-{kind}")),
        kind,
        depth: 1,
        chain: Default::default(),
        upstream_tools: None,
    };
    let label = format!("script-{kind}");
    let (caller, teardown) =
        larkgate_session::connect(&setup.platform, run, &label, Limits::default())
            .await
            .unwrap();
    let mut args = Map::new();
    args.insert("key".into(), Value::from("greeting"));
    let host = Arc::new(Blocking(caller));
    let draft = kind == RunKind::Draft;
    let output = tokio::task::spawn_blocking(move || {
        run_in_process(
            Script {
                filename: "s.star",
                source: SCRIPT,
                arguments: &args,
                limits: &ScriptLimits::default(),
            },
            Some(Tools { host, draft }),
        )
        .into_result()
    })
    .await
    .unwrap();
    teardown.close().await;
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_reads_but_cannot_write_and_a_published_run_can() {
    let setup = setup().await;
    let draft = run(&setup, RunKind::Draft).await.unwrap();
    assert_eq!(
        draft.result.to_string(),
        r#"{"before":"none","code":"write_barrier","wrote":false}"#
    );
    assert_eq!(setup.store.kv_get("greeting").await.unwrap(), None);

    let published = run(&setup, RunKind::Published).await.unwrap();
    assert_eq!(
        published.result.to_string(),
        r#"{"before":"none","code":null,"wrote":true}"#
    );
    assert_eq!(
        setup.store.kv_get("greeting").await.unwrap().as_deref(),
        Some("written")
    );

    // Audit tells the run kinds apart.
    setup.audit.flush().await.unwrap();
    let records = setup
        .store
        .audit_records(AuditQuery::default())
        .await
        .unwrap();
    let intents: Vec<(Option<&str>, Option<&str>, Option<&str>)> = records
        .iter()
        .filter(|r| r.kind == AuditKind::Intent)
        .map(|r| {
            (
                r.tool.as_deref(),
                r.run_kind.as_deref(),
                r.session.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        intents,
        [
            (Some("kv_get"), Some("draft"), Some("script-draft")),
            (Some("kv_get"), Some("published"), Some("script-published")),
            (Some("kv_set"), Some("published"), Some("script-published")),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_calling_a_hidden_tool_gets_the_same_refusal_as_for_a_missing_one() {
    let setup = setup().await;
    let run = RunContext {
        principal: setup.ada.clone(),
        run_id: None,
        kind: RunKind::Draft,
        depth: 1,
        chain: Default::default(),
        upstream_tools: None,
    };
    let (caller, teardown) =
        larkgate_session::connect(&setup.platform, run, "script-draft", Limits::default())
            .await
            .unwrap();
    let host = Arc::new(Blocking(caller));
    let source = r#"
def main():
    hidden = try_call("approvals_list")
    missing = try_call("approvals_lisst")
    return [hidden.error.code, hidden.error.message, missing.error.code, missing.error.message]
"#;
    let out = tokio::task::spawn_blocking(move || {
        run_in_process(
            Script {
                filename: "d.star",
                source,
                arguments: &Map::new(),
                limits: &ScriptLimits::default(),
            },
            Some(Tools { host, draft: true }),
        )
        .into_result()
    })
    .await
    .unwrap()
    .unwrap();
    teardown.close().await;
    let items = out.result.as_list().unwrap().to_vec();
    assert_eq!(items[0], Value::from("not_found"));
    assert_eq!(items[2], Value::from("not_found"));
    let strip = |v: &Value, name: &str| v.as_str().unwrap().replace(name, "<tool>");
    assert_eq!(
        strip(&items[1], "approvals_list"),
        strip(&items[3], "approvals_lisst")
    );
}
