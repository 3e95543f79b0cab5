//! `larkgate serve` over time: what a restart keeps, and many clients at once.

use std::sync::Arc;

use larkgate_upstream::client::{Revisions, UpstreamClient};

use crate::ok;
use crate::sdk_clients::prepare;
use crate::serve::{Server, admin_gateway, client};

fn object(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().unwrap().clone()
}

/// Calls a tool that must succeed; returns its structured result.
async fn call(c: &UpstreamClient, tool: &str, args: serde_json::Value) -> serde_json::Value {
    let result = c.call_tool(tool, object(args)).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    serde_json::Value::Object(
        result
            .structured_content
            .unwrap()
            .as_object()
            .unwrap()
            .clone(),
    )
}

/// Calls a tool that must be refused with `code`; returns the envelope.
async fn refused(
    c: &UpstreamClient,
    tool: &str,
    args: serde_json::Value,
    code: &str,
) -> serde_json::Value {
    let result = c.call_tool(tool, object(args)).await.unwrap();
    assert_eq!(result.is_error, Some(true), "{tool}: {result:?}");
    let envelope =
        result.meta.clone().expect("an envelope in _meta").0["larkgate/envelope"].clone();
    assert_eq!(envelope["code"], code, "{tool}: {envelope}");
    envelope
}

const REMEMBER: &str = r#"
def main(*, word: str):
    """Says a word back."""
    return {"word": word}
"#;

#[test]
fn a_restart_keeps_principals_tokens_scripts_versions_runs_approvals_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: serde_json::Value = serde_json::from_str(&prepare(dir.path())).unwrap();
    let token = |role: &str| tokens[role].as_str().unwrap().to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let server = Server::start(dir.path());
    let url = server.url.clone();
    let ops = server.ops.clone();
    let (run_id, approval_id) = runtime.block_on(async {
        let ada = client(&url, &token("author"), Revisions::Latest)
            .await
            .unwrap();
        call(
            &ada,
            "script_save_draft",
            serde_json::json!({"name": "echo", "source": REMEMBER}),
        )
        .await;
        let ran = call(
            &ada,
            "script_run_draft",
            serde_json::json!({"name": "echo", "args": {"word": "kept"}}),
        )
        .await;
        let pat = client(&url, &token("publisher"), Revisions::Legacy)
            .await
            .unwrap();
        call(&pat, "script_publish", serde_json::json!({"name": "echo"})).await;
        let gated = refused(
            &ada,
            "kv_delete",
            serde_json::json!({"key": "k"}),
            "approval_required",
        )
        .await;
        let approval = gated["approval_id"].as_str().unwrap().to_owned();
        let eve = client(&url, &token("approver"), Revisions::Latest)
            .await
            .unwrap();
        call(
            &eve,
            "approvals_approve",
            serde_json::json!({"id": approval}),
        )
        .await;
        // The worker pool and run gauges are exported.
        let metrics = reqwest::get(format!("{ops}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("larkgate_idle_workers"), "{metrics}");
        assert!(metrics.contains("larkgate_active_runs 0"), "{metrics}");
        assert!(
            metrics.contains("larkgate_calls_total{tool=\"script_run_draft\",code=\"ok\"} 1"),
            "{metrics}"
        );
        (ran["run_id"].as_str().unwrap().to_owned(), approval)
    });
    // The record reads beside the running gateway.
    let shown = ok(dir.path(), &["runs", "show", &run_id]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["status"], "succeeded", "{shown}");
    assert_eq!(
        shown["result"],
        serde_json::json!({"word": "kept"}),
        "{shown}"
    );
    assert!(server.stop().success());

    let server = Server::start(dir.path());
    assert!(server.first_start.is_empty(), "{}", server.first_start);
    let url = server.url.clone();
    runtime.block_on(async {
        // Tokens and principals: the same tokens work, with the same roles.
        let ada = client(&url, &token("author"), Revisions::Legacy)
            .await
            .unwrap();
        // Scripts and versions: the draft, the version, and its tool.
        let list = call(&ada, "script_list", serde_json::json!({})).await;
        assert_eq!(list["drafts"][0]["name"], "echo", "{list}");
        assert_eq!(list["published"][0]["version"], 1, "{list}");
        let history = call(&ada, "script_history", serde_json::json!({"name": "echo"})).await;
        assert_eq!(history["versions"][0]["publisher"], "pat", "{history}");
        let echoed = call(&ada, "script__echo", serde_json::json!({"word": "again"})).await;
        assert_eq!(echoed["result"]["word"], "again", "{echoed}");
        // Runs.
        let run = call(&ada, "run_get", serde_json::json!({"run_id": run_id})).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"]["word"], "kept", "{run}");
        // Approvals: the approval granted before the restart is still usable, once.
        call(&ada, "kv_delete", serde_json::json!({"key": "k"})).await;
        let eve = client(&url, &token("approver"), Revisions::Latest)
            .await
            .unwrap();
        let used = call(
            &eve,
            "approvals_list",
            serde_json::json!({"status": "used"}),
        )
        .await;
        assert_eq!(used["approvals"][0]["id"], approval_id.as_str(), "{used}");
    });
    assert!(server.stop().success());
    // Audit: the chain verifies and holds what happened before and after the restart.
    let verified = ok(dir.path(), &["audit", "verify"]);
    assert!(verified.contains("intact"), "{verified}");
    let tail = ok(dir.path(), &["audit", "tail", "-n", "200"]);
    for expected in [
        "draft_saved",
        "published",
        "approved",
        "script__echo",
        "kv_delete",
    ] {
        assert!(tail.contains(expected), "{expected} missing from\n{tail}");
    }
}

const CLIENTS: usize = 32;
const CALLS: usize = 500;

#[test]
fn thirty_two_clients_making_500_calls_each_see_no_errors_and_every_intent_has_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["principal", "add", "loader", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "loader"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let url = server.url.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let errors: usize = runtime.block_on(async {
        let mut tasks = Vec::new();
        for n in 0..CLIENTS {
            // Half the clients speak each revision.
            let revisions = if n % 2 == 0 {
                Revisions::Latest
            } else {
                Revisions::Legacy
            };
            let c = Arc::new(client(&url, &token, revisions).await.unwrap());
            tasks.push(tokio::spawn(async move {
                let mut errors = 0;
                for i in 0..CALLS {
                    let args = serde_json::json!({"key": format!("c{n}-{i}"), "value": "x"});
                    match c.call_tool("kv_set", object(args)).await {
                        Ok(result) if result.is_error != Some(true) => {}
                        other => {
                            errors += 1;
                            eprintln!("client {n} call {i}: {other:?}");
                        }
                    }
                }
                errors
            }));
        }
        let mut errors = 0;
        for task in tasks {
            errors += task.await.unwrap();
        }
        errors
    });
    assert_eq!(errors, 0);
    assert!(server.stop().success());
    // Every call left an intent and its outcome in the audit chain, and every write landed.
    let db = rusqlite::Connection::open(d.join("larkgate-data/larkgate.sqlite3")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    let total = (CLIENTS * CALLS) as i64;
    assert_eq!(
        count("SELECT COUNT(*) FROM audit WHERE principal = 'loader' AND kind = 'intent'"),
        total
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM audit WHERE principal = 'loader' AND kind = 'outcome' \
             AND code = 'ok'"
        ),
        total
    );
    assert_eq!(count("SELECT COUNT(*) FROM kv"), total);
    assert!(ok(d, &["audit", "verify"]).contains("intact"));
}

/// A gateway configured by `config`, and a call of `script_run_draft(source)` in flight on it
/// (returned once the run is going).
struct RunInFlight {
    dir: tempfile::TempDir,
    server: Server,
    runtime: tokio::runtime::Runtime,
    call: tokio::task::JoinHandle<
        Result<rmcp::model::CallToolResult, larkgate_upstream::client::UpstreamError>,
    >,
}

impl RunInFlight {
    fn start(config: &str, source: &'static str) -> Self {
        let (dir, server, token) = admin_gateway(config);
        let url = server.url.clone();
        let base = server.ops.clone();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let call = runtime.spawn(async move {
            let c = client(&url, &token, Revisions::Latest).await.unwrap();
            c.call_tool(
                "script_run_draft",
                object(serde_json::json!({"source": source})),
            )
            .await
        });
        runtime.block_on(async {
            // Readiness, however long a busy machine takes to start a worker.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while std::time::Instant::now() < deadline {
                let metrics = reqwest::get(format!("{base}/metrics"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                if metrics.contains("larkgate_active_runs 1") {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the run never started");
        });
        RunInFlight {
            dir,
            server,
            runtime,
            call,
        }
    }

    /// The run's recorded status and error, in the data directory under `dir`.
    fn recorded_in(dir: &tempfile::TempDir) -> (String, Option<String>) {
        let db =
            rusqlite::Connection::open(dir.path().join("larkgate-data/larkgate.sqlite3")).unwrap();
        db.query_row("SELECT status, error FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    }
}

#[test]
fn shutdown_cancels_runs_still_going_and_records_them() {
    let forever =
        "def main():\n    n = 0\n    for i in range(2000000000):\n        n += 1\n    return n\n";
    let RunInFlight {
        dir,
        server,
        runtime,
        call,
    } = RunInFlight::start(
        "[server]\nshutdown_grace_ms = 300\n[scripts]\nmax_wall_time_ms = 120000\nmax_ticks = 100000000000\n",
        forever,
    );
    let stopping = std::time::Instant::now();
    assert!(server.stop().success());
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(20),
        "shutdown waited for the run"
    );
    // The call did not succeed: the client saw the connection end or a failed run.
    let answered = runtime.block_on(call).unwrap();
    assert!(
        answered.as_ref().map_or(true, |r| r.is_error == Some(true)),
        "{answered:?}"
    );
    let (status, error) = RunInFlight::recorded_in(&dir);
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(error.contains("cancelled: larkgate stopped"), "{error}");
}

#[test]
fn ctrl_c_gives_a_run_in_flight_the_grace_period_and_it_finishes() {
    // Busy for about two seconds, however fast the machine: it watches the clock.
    let busy = "def main():\n    start = clock_now()['unix_ms']\n    n = 0\n    for i in range(2000000000):\n        if i % 20000 == 0 and clock_now()['unix_ms'] - start > 2000:\n            return n\n        n += 1\n    return n\n";
    let RunInFlight {
        dir,
        server,
        runtime,
        call,
    } = RunInFlight::start(
        "[server]\nshutdown_grace_ms = 20000\n[scripts]\nmax_wall_time_ms = 60000\nmax_ticks = 100000000000\n",
        busy,
    );
    // The terminal's Ctrl-C reaches the server's process group; the worker, in its own, runs
    // on until the server's grace period lets it finish.
    assert!(server.interrupt().success());
    let answered = runtime.block_on(call).unwrap().unwrap();
    assert_ne!(answered.is_error, Some(true), "{answered:?}");
    let result = &answered.structured_content.unwrap()["result"];
    assert!(result.as_i64().unwrap() > 0, "{result}");
    assert_eq!(RunInFlight::recorded_in(&dir).0, "succeeded");
}

#[test]
fn the_script_tools_refuse_bad_input_with_a_clear_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: serde_json::Value = serde_json::from_str(&prepare(dir.path())).unwrap();
    let token = |role: &str| tokens[role].as_str().unwrap().to_owned();
    ok(
        dir.path(),
        &["principal", "add", "bob", "--roles", "author"],
    );
    let bob_token = ok(dir.path(), &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let server = Server::start(dir.path());
    let url = server.url.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ada = client(&url, &token("author"), Revisions::Latest)
            .await
            .unwrap();
        let bob = client(&url, &bob_token, Revisions::Latest).await.unwrap();
        let main = "def main():\n    return 1\n";
        // (tool, arguments, code, words the message must contain)
        let table = [
            (
                "script_run_draft",
                serde_json::json!({}),
                "invalid_arguments",
                "exactly one of",
            ),
            (
                "script_run_draft",
                serde_json::json!({"name": "a", "source": main}),
                "invalid_arguments",
                "exactly one of",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": main, "extra": 1}),
                "invalid_arguments",
                "no argument `extra`",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": main, "args": [1]}),
                "invalid_arguments",
                "`args` must be an object",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": 7}),
                "invalid_arguments",
                "`source` must be a string",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": "def main(:\n"}),
                "invalid_arguments",
                "draft",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": "x = 1\n"}),
                "invalid_arguments",
                "main",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": "load('x.star', 'y')\ndef main():\n    return 1\n"}),
                "invalid_arguments",
                "load",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": "def main(*, n: int):\n    return n\n",
                                   "args": {"n": "seven"}}),
                "invalid_arguments",
                "n",
            ),
            (
                "script_run_draft",
                serde_json::json!({"source": "def main():\n    fail('the key is missing')\n"}),
                "script_failed",
                "the key is missing",
            ),
            (
                "script_save_draft",
                serde_json::json!({"name": "slip", "source": "def main():\n    return kv_gett(key = \"k\")\n"}),
                "invalid_arguments",
                "slip.star:2:12-19: Use of undefined variable `kv_gett`",
            ),
            (
                "script_run_draft",
                serde_json::json!({"name": "nobody_wrote_this"}),
                "not_found",
                "no draft named",
            ),
            (
                "script_save_draft",
                serde_json::json!({"name": "Bad Name", "source": main}),
                "invalid_arguments",
                "not a script name",
            ),
            (
                "script_save_draft",
                serde_json::json!({"name": "kv_get", "source": main}),
                "invalid_arguments",
                "not a script name",
            ),
            (
                "script_save_draft",
                serde_json::json!({"name": "ok_name", "source": "def main(:\n"}),
                "invalid_arguments",
                "ok_name",
            ),
            (
                "script_history",
                serde_json::json!({"name": "never_published"}),
                "not_found",
                "no published versions",
            ),
            (
                "run_get",
                serde_json::json!({"run_id": "run-0"}),
                "not_found",
                "no run",
            ),
            // Publishing is for publishers: an author does not even see the tool.
            (
                "script_publish",
                serde_json::json!({"name": "x"}),
                "not_found",
                "script_publish",
            ),
        ];
        for (tool, args, code, words) in table {
            let envelope = refused(&ada, tool, args.clone(), code).await;
            let message = envelope["message"].as_str().unwrap();
            assert!(message.contains(words), "{tool} {args}: {envelope}");
        }
        // A draft belongs to its author: another author cannot overwrite it or run it, and
        // does not learn more than for a draft that does not exist.
        call(
            &ada,
            "script_save_draft",
            serde_json::json!({"name": "mine", "source": main}),
        )
        .await;
        let taken = refused(
            &bob,
            "script_save_draft",
            serde_json::json!({"name": "mine", "source": main}),
            "forbidden",
        )
        .await;
        assert!(
            taken["message"]
                .as_str()
                .unwrap()
                .contains("another author")
        );
        let theirs = refused(
            &bob,
            "script_run_draft",
            serde_json::json!({"name": "mine"}),
            "not_found",
        )
        .await;
        let missing = refused(
            &bob,
            "script_run_draft",
            serde_json::json!({"name": "absent"}),
            "not_found",
        )
        .await;
        assert_eq!(
            theirs["message"]
                .as_str()
                .unwrap()
                .replace("mine", "absent"),
            missing["message"].as_str().unwrap()
        );
        // A run is readable by whoever started it, not by another author.
        let ran = call(
            &ada,
            "script_run_draft",
            serde_json::json!({"name": "mine"}),
        )
        .await;
        let id = ran["run_id"].as_str().unwrap();
        call(&ada, "run_get", serde_json::json!({"run_id": id})).await;
        refused(
            &bob,
            "run_get",
            serde_json::json!({"run_id": id}),
            "not_found",
        )
        .await;
        // Publishing a draft that does not exist.
        let pat = client(&url, &token("publisher"), Revisions::Latest)
            .await
            .unwrap();
        let absent = refused(
            &pat,
            "script_publish",
            serde_json::json!({"name": "absent"}),
            "not_found",
        )
        .await;
        assert!(
            absent["hint"]
                .as_str()
                .unwrap()
                .contains("script_save_draft")
        );
    });
    assert!(server.stop().success());
}
