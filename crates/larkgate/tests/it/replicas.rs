//! Several `larkgate serve` processes (replicas, each with its own data directory) on one
//! PostgreSQL schema and one Redis: one audit chain that verifies whole, with exactly one intent
//! and one outcome per call, and a replica killed with `kill -9` mid-load that, restarted,
//! replays its journal into the chain once and loses no call a client saw answered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use larkgate_store::postgres::testing::{TestSchema, url};
use larkgate_upstream::client::Revisions;

use crate::serve::{Server, client};
use crate::{config_path, ok};

fn redis_url() -> String {
    std::env::var("LARKGATE_TEST_REDIS_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// The configuration every replica shares: the schema, Redis under a prefix of the schema's
/// name (so tests do not share budgets), a budget large enough never to refuse, and intents
/// that carry their arguments (so the test can find each call in the chain).
fn config(schema: &TestSchema) -> String {
    format!(
        "[store]\nurl = {:?}\nschema = {:?}\n\
         [ratelimit]\nredis = {:?}\nprefix = \"{}:\"\n\
         [audit]\nrecord_arguments = true\n\
         [policy.roles.admin]\ncall = [\"*\"]\n\
         [[policy.rate_limits]]\nper = \"principal\"\ncalls = 1000000\nperiod_seconds = 3600\n\
         burst = 1000000\n",
        url(),
        schema.name(),
        redis_url(),
        schema.name(),
    )
}

/// Three data directories on `schema`, the principal `ada` (admin) and a token for it.
fn replicas(schema: &TestSchema) -> (Vec<tempfile::TempDir>, String) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for dir in &dirs {
        std::fs::write(config_path(dir.path()), config(schema)).unwrap();
    }
    ok(
        dirs[0].path(),
        &["principal", "add", "ada", "--roles", "admin"],
    );
    let token = ok(dirs[0].path(), &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    (dirs, token)
}

/// One `kv_set`; whether the client saw it answered `ok`.
async fn set(c: &larkgate_upstream::client::UpstreamClient, key: &str) -> Result<(), String> {
    let arguments = serde_json::json!({"key": key, "value": "v"});
    match c
        .call_tool("kv_set", arguments.as_object().unwrap().clone())
        .await
    {
        Ok(result) if result.is_error != Some(true) => Ok(()),
        Ok(result) => Err(format!("{:?}", result.structured_content)),
        Err(error) => Err(error.to_string()),
    }
}

/// Per key: the sequences of its intents, and of their outcomes with their codes.
#[derive(Debug, Default)]
struct Calls {
    intents: BTreeMap<String, Vec<i64>>,
    outcomes: BTreeMap<String, Vec<String>>,
}

/// The `kv_set` calls in the chain, by the key their intent recorded.
async fn calls_in_chain(schema: &TestSchema) -> Calls {
    let db = schema.client().await;
    let mut calls = Calls::default();
    let mut key_of = BTreeMap::new();
    for row in db
        .query(
            "SELECT seq, kind, args, intent_seq, code FROM audit WHERE tool = 'kv_set' \
             ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
    {
        let seq: i64 = row.get(0);
        let kind: String = row.get(1);
        if kind == "intent" {
            let args: String = row.get(2);
            let args: serde_json::Value = serde_json::from_str(&args).unwrap();
            let key = args["key"].as_str().unwrap().to_owned();
            calls.intents.entry(key.clone()).or_default().push(seq);
            key_of.insert(seq, key);
        } else if kind == "outcome" {
            let intent: i64 = row.get(3);
            let key = key_of
                .get(&intent)
                .unwrap_or_else(|| panic!("outcome {seq} names {intent}, not an earlier intent"))
                .clone();
            calls.outcomes.entry(key).or_default().push(row.get(4));
        }
    }
    calls
}

async fn stored_keys(schema: &TestSchema) -> BTreeSet<String> {
    let db = schema.client().await;
    db.query("SELECT key FROM kv", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// `audit verify` from `dir`: it says the chain is intact; returns what it printed.
fn verified(dir: &Path) -> String {
    let output = crate::larkgate_in(dir, &["audit", "verify"]);
    let text = format!("{}{}", crate::stdout(&output), crate::stderr(&output));
    assert!(text.contains("the chain is intact"), "{text}");
    text
}

#[test]
fn three_replicas_chain_every_call_once_into_one_chain() {
    chain_load(4, 100);
}

/// The larger run (3 × 16 clients × 500 calls): a benchmark of the same guarantees, not run in
/// CI. `cargo test --release -p larkgate --test it -- --ignored replicas::larger --nocapture`
#[test]
#[ignore = "a benchmark-sized run: 24,000 calls"]
fn larger_run_three_replicas_sixteen_clients_each() {
    chain_load(16, 500);
}

/// 3 × `clients` clients, each with a session on every replica, spreading its `calls` calls
/// round-robin over them: no errors, exactly one intent and one `ok` outcome per call in one
/// chain that every replica wrote to, which verifies (and has one head) from each directory.
fn chain_load(clients: usize, calls_each: usize) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, token) = replicas(&schema);
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let started = std::time::Instant::now();
    let errors: Vec<String> = runtime.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..3 * clients {
            let urls = urls.clone();
            let token = token.clone();
            tasks.push(tokio::spawn(async move {
                let mut sessions = Vec::new();
                for url in &urls {
                    sessions.push(client(url, &token, Revisions::Latest).await.unwrap());
                }
                let mut errors = Vec::new();
                for i in 0..calls_each {
                    let key = format!("c{c}-{i}");
                    if let Err(error) = set(&sessions[(c + i) % 3], &key).await {
                        errors.push(format!("{key}: {error}"));
                    }
                }
                errors
            }));
        }
        let mut errors = Vec::new();
        for task in tasks {
            errors.extend(task.await.unwrap());
        }
        errors
    });
    let total = 3 * clients * calls_each;
    println!(
        "{total} calls through 3 replicas in {:.1} s ({:.0} calls/s)",
        started.elapsed().as_secs_f64(),
        total as f64 / started.elapsed().as_secs_f64()
    );
    assert!(errors.is_empty(), "{errors:?}");
    for server in servers {
        assert!(server.stop().success());
    }
    let calls = runtime.block_on(calls_in_chain(&schema));
    assert_eq!(calls.intents.len(), total);
    for (key, intents) in &calls.intents {
        assert_eq!(intents.len(), 1, "{key}: {intents:?}");
        assert_eq!(
            calls.outcomes.get(key).map(Vec::as_slice),
            Some(&["ok".to_owned()][..]),
            "{key}"
        );
    }
    assert_eq!(runtime.block_on(stored_keys(&schema)).len(), total);
    // Every replica put records in the one chain, and it verifies from each directory.
    let replicas: i64 = runtime.block_on(async {
        schema
            .client()
            .await
            .query_one(
                "SELECT count(DISTINCT replica) FROM audit WHERE tool = 'kv_set'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    });
    assert_eq!(replicas, 3);
    let mut heads = BTreeSet::new();
    for dir in &dirs {
        let text = verified(dir.path());
        assert!(!text.contains("without an outcome"), "{text}");
        heads.insert(ok(dir.path(), &["audit", "head"]));
    }
    assert_eq!(heads.len(), 1, "{heads:?}");
}

#[test]
fn a_replica_killed_mid_load_and_restarted_loses_no_answered_call() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, token) = replicas(&schema);
    let mut servers: Vec<Option<Server>> =
        dirs.iter().map(|d| Some(Server::start(d.path()))).collect();
    let urls: Vec<String> = servers
        .iter()
        .map(|s| s.as_ref().unwrap().url.clone())
        .collect();
    let answered = Arc::new(AtomicUsize::new(0));

    // Load, and `kill -9` of the second replica once 400 calls have been answered.
    let token = &token;
    let run = |phase: &'static str, urls: Vec<String>, answered: Arc<AtomicUsize>| async move {
        let mut tasks = Vec::new();
        for c in 0..12 {
            let urls = urls.clone();
            let token = token.clone();
            let answered = answered.clone();
            tasks.push(tokio::spawn(async move {
                let mut sessions = Vec::new();
                for url in &urls {
                    sessions.push(Some(client(url, &token, Revisions::Latest).await.unwrap()));
                }
                let (mut acknowledged, mut failed) = (Vec::new(), Vec::new());
                for i in 0..if phase == "before" { 100 } else { 20 } {
                    let key = format!("{phase}-c{c}-{i}");
                    // A replica that failed a call is not used again in this phase.
                    let Some(index) = (0..3)
                        .map(|step| (c + i + step) % 3)
                        .find(|&index| sessions[index].is_some())
                    else {
                        break;
                    };
                    match set(sessions[index].as_ref().unwrap(), &key).await {
                        Ok(()) => {
                            answered.fetch_add(1, Ordering::SeqCst);
                            acknowledged.push(key);
                        }
                        Err(_) => {
                            failed.push(key);
                            sessions[index] = None;
                        }
                    }
                }
                (acknowledged, failed)
            }));
        }
        let (mut acknowledged, mut failed) = (Vec::new(), Vec::new());
        for task in tasks {
            let (a, f) = task.await.unwrap();
            acknowledged.extend(a);
            failed.extend(f);
        }
        (acknowledged, failed)
    };
    let killed = servers[1].take().unwrap();
    let watcher = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            while answered.load(Ordering::SeqCst) < 400 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            // Dropping a server kills it with SIGKILL.
            drop(killed);
        })
    };
    let (mut acknowledged, failed) =
        runtime.block_on(run("before", urls.clone(), answered.clone()));
    watcher.join().unwrap();
    assert!(
        acknowledged.len() >= 400 && !failed.is_empty(),
        "the kill did not land mid-load: {} answered, {} failed",
        acknowledged.len(),
        failed.len()
    );

    // Restarted on its directory, it replays its journal; then load on all three again.
    servers[1] = Some(Server::start(dirs[1].path()));
    let urls: Vec<String> = servers
        .iter()
        .map(|s| s.as_ref().unwrap().url.clone())
        .collect();
    let (after, failed_after) = runtime.block_on(run("after", urls, answered.clone()));
    assert!(failed_after.is_empty(), "{failed_after:?}");
    acknowledged.extend(after);
    for server in servers.into_iter().flatten() {
        assert!(server.stop().success());
    }

    // Every answered call is in the store, and in the chain once with its outcome `ok`.
    let stored = runtime.block_on(stored_keys(&schema));
    let calls = runtime.block_on(calls_in_chain(&schema));
    for key in &acknowledged {
        assert!(stored.contains(key), "{key} was answered and is not stored");
        assert_eq!(calls.intents.get(key).map(Vec::len), Some(1), "{key}");
        assert_eq!(
            calls.outcomes.get(key).map(Vec::as_slice),
            Some(&["ok".to_owned()][..]),
            "{key}"
        );
    }
    // Calls in flight at the kill: at most an intent each, and `verify` names exactly the
    // intents that have no outcome, all of them calls no client saw answered.
    let mut open = Vec::new();
    for (key, intents) in &calls.intents {
        assert_eq!(intents.len(), 1, "{key}: {intents:?}");
        if !calls.outcomes.contains_key(key) {
            assert!(
                failed.contains(key),
                "{key} has no outcome but was not in flight"
            );
            open.push(intents[0]);
        }
    }
    open.sort_unstable();
    let text = verified(dirs[0].path());
    if open.is_empty() {
        assert!(!text.contains("without an outcome"), "{text}");
    } else {
        let listed = format!("{open:?}");
        assert!(text.contains(&listed), "expected {listed} in: {text}");
    }
}

/// `[audit] store_intents = true`: a replica killed right after its last answer and whose
/// journal is then lost (a lost disk) still has every answered call's intent in the chain; at
/// most outcomes are missing, and `verify` lists exactly those intents.
#[test]
fn with_store_intents_a_lost_journal_loses_no_intent() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, token) = replicas(&schema);
    let dir = dirs[0].path();
    let config = std::fs::read_to_string(config_path(dir))
        .unwrap()
        .replace("[audit]\n", "[audit]\nstore_intents = true\n");
    std::fs::write(config_path(dir), config).unwrap();
    let server = Server::start(dir);
    let keys: Vec<String> = (0..30).map(|i| format!("lost-{i}")).collect();
    runtime.block_on(async {
        let c = client(&server.url, &token, Revisions::Latest)
            .await
            .unwrap();
        for key in &keys {
            set(&c, key).await.unwrap();
        }
    });
    drop(server); // kill -9, at once
    let data_dir = config_path(dir).parent().unwrap().to_owned();
    for entry in std::fs::read_dir(&data_dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("audit.journal")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let calls = runtime.block_on(calls_in_chain(&schema));
    for key in &keys {
        assert_eq!(
            calls.intents.get(key).map(Vec::len),
            Some(1),
            "{key}: {calls:?}"
        );
    }
    let missing: Vec<i64> = keys
        .iter()
        .filter(|key| !calls.outcomes.contains_key(*key))
        .map(|key| calls.intents[key][0])
        .collect();
    let text = verified(dirs[1].path());
    if missing.is_empty() {
        assert!(!text.contains("without an outcome"), "{text}");
    } else {
        assert!(
            text.contains(&format!("{missing:?}")),
            "{missing:?} in {text}"
        );
    }
}

const ECHO: &str = r#"
def main(*, word: str):
    """Says a word back."""
    return {"word": word}
"#;

async fn lists_echo(c: &larkgate_upstream::client::UpstreamClient) -> bool {
    c.list_tools()
        .await
        .unwrap()
        .into_iter()
        .any(|t| t.name == "script__echo")
}

/// Calls `tool` through `c`; the result, which must not be an error.
async fn answered(
    c: &larkgate_upstream::client::UpstreamClient,
    tool: &str,
    arguments: serde_json::Value,
) -> rmcp::model::CallToolResult {
    let result = c
        .call_tool(tool, arguments.as_object().unwrap().clone())
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result
}

/// A script published through replica 2 is listed by replica 3 within a second (the database
/// tells every replica), replica 3's client is told the listing changed, and the script is
/// called through replica 3.
#[test]
fn a_script_published_through_one_replica_is_served_by_another_within_a_second() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    ok(
        dirs[0].path(),
        &["principal", "add", "pat", "--roles", "admin"],
    );
    let pat = ok(dirs[0].path(), &["token", "create", "--principal", "pat"])
        .trim()
        .to_owned();
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    runtime.block_on(async {
        let watcher = client(&servers[2].url, &ada, Revisions::Legacy)
            .await
            .unwrap();
        assert!(!lists_echo(&watcher).await);
        let author = client(&servers[1].url, &ada, Revisions::Latest)
            .await
            .unwrap();
        answered(
            &author,
            "script_save_draft",
            serde_json::json!({"name": "echo", "source": ECHO}),
        )
        .await;
        let publisher = client(&servers[1].url, &pat, Revisions::Latest)
            .await
            .unwrap();
        answered(
            &publisher,
            "script_publish",
            serde_json::json!({"name": "echo"}),
        )
        .await;
        let published = std::time::Instant::now();
        while !(watcher.tools_changed() && lists_echo(&watcher).await) {
            assert!(
                published.elapsed() < std::time::Duration::from_secs(1),
                "replica 3 did not serve the script within a second"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let caller = client(&servers[2].url, &ada, Revisions::Latest)
            .await
            .unwrap();
        let result = answered(&caller, "script__echo", serde_json::json!({"word": "hi"})).await;
        let content = result.structured_content.unwrap();
        assert_eq!(content["result"]["word"], "hi", "{content}");
    });
}
