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

use crate::rate_limits::redis_url;
use crate::serve::{Server, client};
use crate::{config_path, ok};

/// How long a replica may take to follow a change another one made, before a test calls it
/// lost. Scripts are pushed by the database (milliseconds when idle) and upstreams followed
/// every second; the bound tells "followed" from "never", on a machine with other work on it,
/// and races nothing.
const FOLLOWED_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// The configuration every replica shares: the schema, Redis under a prefix of the schema's
/// name (so tests do not share budgets), `kv_delete` under approval, 100 `clock_now` calls an
/// hour per principal, a budget on everything large enough never to refuse, and intents that
/// carry their arguments (so the test can find each call in the chain).
fn config(schema: &TestSchema) -> String {
    format!(
        "[store]\nurl = {:?}\nschema = {:?}\n\
         [ratelimit]\nredis = {:?}\nprefix = \"{}:\"\n\
         [audit]\nrecord_arguments = true\n\
         [policy.roles.admin]\ncall = [\"*\"]\n\
         [policy.approvals]\nrequire = [\"kv_delete\"]\n\
         [[policy.rate_limits]]\nper = \"principal_tool\"\ntools = [\"clock_now\"]\n\
         calls = 100\nperiod_seconds = 3600\nburst = 100\n\
         [[policy.rate_limits]]\nper = \"principal\"\ncalls = 1000000\nperiod_seconds = 3600\n\
         burst = 1000000\n",
        url(),
        schema.name(),
        redis_url(),
        schema.name(),
    )
}

/// Puts `[server]` settings in front of every replica's configuration.
fn server_settings(dirs: &[tempfile::TempDir], settings: &str) {
    for dir in dirs {
        let config = std::fs::read_to_string(config_path(dir.path())).unwrap();
        std::fs::write(
            config_path(dir.path()),
            format!("[server]\n{settings}\n{config}"),
        )
        .unwrap();
    }
}

/// Three data directories on `schema`, the principal `ada` (admin) and a token for it.
fn replicas(schema: &TestSchema) -> (Vec<tempfile::TempDir>, String) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for dir in &dirs {
        std::fs::write(config_path(dir.path()), config(schema)).unwrap();
    }
    let token = admin(dirs[0].path(), "ada");
    (dirs, token)
}

/// Registers `name` as an admin in the store beside `dir` and makes a token for them.
fn admin(dir: &std::path::Path, name: &str) -> String {
    ok(dir, &["principal", "add", name, "--roles", "admin"]);
    ok(dir, &["token", "create", "--principal", name])
        .trim()
        .to_owned()
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

/// A script published through replica 2 is listed by replica 3 promptly (the database
/// tells every replica), replica 3's client is told the listing changed, and the script is
/// called through replica 3.
#[test]
fn a_script_published_through_one_replica_is_served_by_another_promptly() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    let pat = admin(dirs[0].path(), "pat");
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
                published.elapsed() < FOLLOWED_WITHIN,
                "replica 3 did not serve the script within {FOLLOWED_WITHIN:?}"
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

/// One JSON-RPC message to `url` as `token`, in `session` when given, over the 2025-11-25
/// revision: the status, the session header answered, and the body.
fn post(
    url: &str,
    token: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (u16, Option<String>, String) {
    let mut request = reqwest::blocking::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2025-11-25");
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.body(body.to_string()).send().unwrap();
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, header, response.text().unwrap())
}

/// Opens a 2025-11-25 session on `url`: `Ok(id)`, or the refusal's status and body.
fn open_session(url: &str, token: &str) -> Result<String, (u16, String)> {
    let (status, session, body) = post(
        url,
        token,
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "replicas-test", "version": "1"}}}),
    );
    if status != 200 {
        return Err((status, body));
    }
    let session = session.expect("a session id");
    let (status, _, body) = post(
        url,
        token,
        Some(&session),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(status == 202 || status == 200, "{status} {body}");
    Ok(session)
}

/// `clock_now` in `session` through `url`: the status and body.
fn clock_now(url: &str, token: &str, session: &str, id: u32) -> (u16, String) {
    let (status, _, body) = post(
        url,
        token,
        Some(session),
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "clock_now", "arguments": {}}}),
    );
    (status, body)
}

/// A 2025-11-25 session opened on replica 1 continues on replicas 2 and 3 (restored from the
/// database, its owner checked), another principal's token on it is refused on every replica,
/// and the cap per principal counts the sessions on all replicas together.
#[test]
fn a_session_opened_on_one_replica_continues_on_another_and_only_for_its_owner() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    server_settings(&dirs, "max_sessions_per_principal = 2");
    let bob = admin(dirs[0].path(), "bob");
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let urls: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();

    let session = open_session(urls[0], &ada).unwrap();
    // Another principal's token on ada's session is refused by a replica that has never held
    // it (the owner is read from the database), before ada continues there.
    let (status, body) = clock_now(urls[2], &bob, &session, 20);
    assert_eq!(status, 403, "{body}");
    for (i, url) in urls.iter().enumerate() {
        let (status, body) = clock_now(url, &ada, &session, 10 + i as u32);
        assert_eq!(status, 200, "replica {}: {body}", i + 1);
        assert!(
            body.contains("\"isError\":false"),
            "replica {}: {body}",
            i + 1
        );
    }
    // ...and by every replica once they hold it.
    for (i, url) in urls.iter().enumerate() {
        let (status, body) = clock_now(url, &bob, &session, 21 + i as u32);
        assert_eq!(status, 403, "replica {}: {body}", i + 1);
    }
    // A session id nobody opened is not restored.
    let (status, body) = clock_now(urls[2], &ada, "0123456789abcdef", 30);
    assert_eq!(status, 404, "{body}");
    // The cap of 2 per principal holds across replicas: one more on replica 2, then none on
    // replica 3.
    open_session(urls[1], &ada).unwrap();
    let (status, body) = open_session(urls[2], &ada).unwrap_err();
    assert_eq!(status, 429, "{body}");
    // Ending it through replica 2 removes it from the database, so no replica restores it again
    // (one that holds it in memory keeps it until it idles out: see the README).
    let response = reqwest::blocking::Client::new()
        .delete(urls[1])
        .bearer_auth(&ada)
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let stored: i64 = runtime.block_on(async {
        schema
            .client()
            .await
            .query_one("SELECT count(*) FROM sessions WHERE id = $1", &[&session])
            .await
            .unwrap()
            .get(0)
    });
    assert_eq!(stored, 0);
    drop(servers);
}

/// The envelope of a refused call.
fn envelope(result: &rmcp::model::CallToolResult) -> serde_json::Value {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    result.meta.as_ref().expect("an envelope").0["larkgate/envelope"].clone()
}

/// Calls through the three replicas in turn: `calls = 100` (burst 100) admits exactly 100 of
/// 150 in all; an approval granted through replica 1 is used through replica 2, then refused
/// through replica 3; a token revoked beside replica 1 is refused by replicas 2 and 3 at their
/// next request.
#[test]
fn three_replicas_share_limits_approvals_and_revocations() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    let bob = admin(dirs[0].path(), "bob");
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    runtime.block_on(async {
        let mut sessions = Vec::new();
        for server in &servers {
            sessions.push(client(&server.url, &ada, Revisions::Latest).await.unwrap());
        }
        let mut admitted = 0;
        for i in 0..150 {
            let result = sessions[i % 3]
                .call_tool("clock_now", serde_json::Map::new())
                .await
                .unwrap();
            if result.is_error != Some(true) {
                admitted += 1;
            } else {
                assert_eq!(envelope(&result)["code"], "rate_limited", "{result:?}");
            }
        }
        assert_eq!(admitted, 100);

        let delete = || {
            serde_json::json!({"key": "doomed"})
                .as_object()
                .unwrap()
                .clone()
        };
        let gated = sessions[0].call_tool("kv_delete", delete()).await.unwrap();
        let gated = envelope(&gated);
        assert_eq!(gated["code"], "approval_required", "{gated}");
        let approver = client(&servers[0].url, &bob, Revisions::Latest)
            .await
            .unwrap();
        answered(
            &approver,
            "approvals_approve",
            serde_json::json!({"id": gated["approval_id"]}),
        )
        .await;
        let used = sessions[1].call_tool("kv_delete", delete()).await.unwrap();
        assert_ne!(used.is_error, Some(true), "{used:?}");
        let again = sessions[2].call_tool("kv_delete", delete()).await.unwrap();
        assert_eq!(envelope(&again)["code"], "approval_required");
    });
    // Revoked beside replica 1 (the operator's command, on its data directory).
    assert!(ok(dirs[0].path(), &["token", "revoke", &bob]).contains("revoked"));
    runtime.block_on(async {
        for server in &servers[1..] {
            let refused = client(&server.url, &bob, Revisions::Latest)
                .await
                .unwrap_err();
            assert!(refused.contains("401 Unauthorized"), "{refused}");
        }
    });
}

/// A session opened on replica 1 is continued by replicas 2 and 3 (which never held it), and
/// left idle past the timeout it ends everywhere: in the shared entry, and in the process that
/// holds it (rmcp's own timer, on real time). That use through any replica moves the expiry is
/// proven on a moved clock in the edge's own tests (`larkgate-edge/tests/it/replicas.rs`); here
/// real processes on one database show the end of it. The margin: the two calls that continue
/// the session have the whole idle timeout (3 s) to arrive; a slower machine only makes the
/// wait past the timeout longer, never the session less expired.
#[test]
fn a_session_is_continued_by_every_replica_and_an_idle_one_expires_everywhere() {
    const IDLE: std::time::Duration = std::time::Duration::from_secs(3);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    server_settings(
        &dirs,
        &format!("session_idle_timeout_ms = {}", IDLE.as_millis()),
    );
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let urls: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();
    let session = open_session(urls[0], &ada).unwrap();
    for (id, url) in (1..).zip(&urls[1..]) {
        let (status, body) = clock_now(url, &ada, &session, id);
        assert_eq!(status, 200, "{body}");
    }
    std::thread::sleep(IDLE + std::time::Duration::from_secs(1));
    for url in &urls {
        let (status, body) = clock_now(url, &ada, &session, 9);
        assert_eq!(status, 404, "{body}");
    }
}

/// An upstream added beside replica 1 (the operator's command on its directory) is listed by
/// replica 2 promptly, from the definitions pinned when it was added, and replica 2's
/// client is told; replica 3 starts the server itself and calls its tool. Removed beside
/// replica 1, it leaves replica 2's listing promptly too. ("Promptly": see [`FOLLOWED_WITHIN`].)
#[test]
fn an_upstream_added_beside_one_replica_is_served_by_the_others() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let workdir = tempfile::tempdir().unwrap();
    let marker = workdir.path().display().to_string();
    let python = crate::python().display().to_string();
    let script = crate::root()
        .join("crates/larkgate/tests/peers/stdio_server.py")
        .display()
        .to_string();
    runtime.block_on(async {
        let watcher = client(&servers[1].url, &ada, Revisions::Legacy)
            .await
            .unwrap();
        let has_echo =
            |tools: Vec<rmcp::model::Tool>| tools.iter().any(|t| t.name == "local__echo");
        assert!(!has_echo(watcher.list_tools().await.unwrap()));
        let add = [
            "upstream",
            "add",
            "local",
            "--approval",
            "never",
            "--cwd",
            &marker,
            "--command",
            &python,
            &script,
            "serve",
            &marker,
        ];
        let dir = dirs[0].path().to_owned();
        let args: Vec<String> = add.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ok(&dir, &args)
        })
        .await
        .unwrap();
        let added = std::time::Instant::now();
        while !(watcher.tools_changed() && has_echo(watcher.list_tools().await.unwrap())) {
            assert!(
                added.elapsed() < FOLLOWED_WITHIN,
                "replica 2 did not list the upstream within {FOLLOWED_WITHIN:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // Replicas 3 and 2 each start their own copy of the server; its tool answers through
        // each once that copy is up.
        let caller = client(&servers[2].url, &ada, Revisions::Latest)
            .await
            .unwrap();
        for through in [&caller, &watcher] {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let arguments = serde_json::json!({"text": "hi"});
                let result = through
                    .call_tool("local__echo", arguments.as_object().unwrap().clone())
                    .await
                    .unwrap();
                if result.is_error != Some(true) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{result:?}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        let dir = dirs[0].path().to_owned();
        tokio::task::spawn_blocking(move || ok(&dir, &["upstream", "remove", "local"]))
            .await
            .unwrap();
        let removed = std::time::Instant::now();
        loop {
            if watcher.tools_changed() && !has_echo(watcher.list_tools().await.unwrap()) {
                break;
            }
            assert!(
                removed.elapsed() < FOLLOWED_WITHIN,
                "replica 2 still lists the upstream {FOLLOWED_WITHIN:?} after it was removed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
}

/// A 2025-11-25 session opened at a virtual server on replica 1 is restored by replica 2 only
/// at that server: the database keeps which endpoint opened it, so neither `/mcp` nor another
/// server continues it, on a replica that has never held it; and a session of `/mcp` is not
/// continued at a server.
#[test]
fn a_session_of_a_virtual_server_continues_on_another_replica_only_at_that_server() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    for dir in &dirs[..2] {
        let config = std::fs::read_to_string(config_path(dir.path())).unwrap();
        std::fs::write(
            config_path(dir.path()),
            format!(
                "{config}[[servers]]\nname = \"clock\"\ntools = [\"clock_now\"]\n\
                 [[servers]]\nname = \"kv\"\ntools = [\"kv_*\"]\n"
            ),
        )
        .unwrap();
    }
    let servers: Vec<Server> = dirs[..2].iter().map(|d| Server::start(d.path())).collect();
    let at = |replica: usize, path: &str| format!("{}{path}", servers[replica].url);

    let session = open_session(&at(0, "/clock"), &ada).unwrap();
    // Elsewhere on replica 2 first, so that its own server is the first to restore it there.
    for (path, id) in [("", 1), ("/kv", 2)] {
        let (status, body) = clock_now(&at(1, path), &ada, &session, id);
        assert_eq!(status, 404, "/mcp{path}: {body}");
    }
    let (status, body) = clock_now(&at(1, "/clock"), &ada, &session, 3);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"isError\":false"), "{body}");
    for (path, id) in [("", 4), ("/kv", 5)] {
        let (status, body) = clock_now(&at(1, path), &ada, &session, id);
        assert_eq!(status, 404, "/mcp{path} once held: {body}");
    }

    let of_mcp = open_session(&at(0, ""), &ada).unwrap();
    let (status, body) = clock_now(&at(1, "/clock"), &ada, &of_mcp, 6);
    assert_eq!(status, 404, "{body}");
    let (status, body) = clock_now(&at(1, ""), &ada, &of_mcp, 7);
    assert_eq!(status, 200, "{body}");
    drop(servers);
}

/// A virtual server added with `server_add` through replica 1 is served by replica 2 (which
/// follows the database's notifications), lists what its patterns choose there, and a removal
/// through replica 2 reaches replica 1: its endpoint answers 404 from then on.
/// ("Promptly": see [`FOLLOWED_WITHIN`].)
#[test]
fn a_virtual_server_added_through_one_replica_is_served_and_removed_by_all() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let (dirs, ada) = replicas(&schema);
    let servers: Vec<Server> = dirs[..2].iter().map(|d| Server::start(d.path())).collect();
    let at = |replica: usize, path: &str| format!("{}{path}", servers[replica].url);
    assert_eq!(open_session(&at(1, "/clock"), &ada).unwrap_err().0, 404);
    let call = |replica: usize, tool: &'static str, arguments: serde_json::Value| {
        let url = servers[replica].url.clone();
        let token = ada.clone();
        runtime.block_on(async move {
            let admin = client(&url, &token, Revisions::Latest).await.unwrap();
            let result = admin
                .call_tool(tool, arguments.as_object().unwrap().clone())
                .await
                .unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
            result.structured_content.expect("structured content")
        })
    };
    let saved = call(
        0,
        "server_add",
        serde_json::json!({"name": "clock", "tools": "clock_*", "description": "Time"}),
    );
    assert_eq!(saved["path"], "/mcp/clock", "{saved}");
    assert_eq!(saved["tools_served"], 1, "{saved}");
    let added = std::time::Instant::now();
    let session = loop {
        match open_session(&at(1, "/clock"), &ada) {
            Ok(session) => break session,
            Err((404, _)) => {
                assert!(
                    added.elapsed() < FOLLOWED_WITHIN,
                    "replica 2 did not serve the server within {FOLLOWED_WITHIN:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(other) => panic!("{other:?}"),
        }
    };
    let (status, body) = clock_now(&at(1, "/clock"), &ada, &session, 2);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"isError\":false"), "{body}");
    let listed = call(1, "server_list", serde_json::json!({}));
    let stored = &listed["servers"][0];
    assert_eq!(stored["name"], "clock", "{listed}");
    assert_eq!(stored["added"]["by"], "ada", "{listed}");

    call(1, "server_remove", serde_json::json!({"name": "clock"}));
    let removed = std::time::Instant::now();
    while open_session(&at(0, "/clock"), &ada).map_err(|(status, _)| status) != Err(404) {
        assert!(
            removed.elapsed() < FOLLOWED_WITHIN,
            "replica 1 still serves the server {FOLLOWED_WITHIN:?} after it was removed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(servers);
}

/// Each replica signs the checkpoints of the batches it links, with its own key, named in each
/// checkpoint: a verifier given both keys accepts the one chain (from either directory, and as
/// a bundle on its own, by larkgate and by the docs' Python verifier); given one, it names the
/// checkpoint the other signed.
#[test]
fn each_replica_signs_with_its_own_key_and_a_verifier_given_both_accepts_the_chain() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create());
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for dir in &dirs {
        let config = config(&schema).replace(
            "record_arguments = true\n",
            "record_arguments = true\ncheckpoint_records = 2\n",
        );
        std::fs::write(config_path(dir.path()), config).unwrap();
    }
    let token = admin(dirs[0].path(), "ada");
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    // One call at a time, alternating: each replica links batches that cross the interval.
    for i in 0..6 {
        let answer = crate::traces::call(
            &servers[i % 2].url,
            &token,
            None,
            None,
            "kv_set",
            serde_json::json!({"key": format!("k{i}"), "value": "v"}),
        );
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    for server in servers {
        assert!(server.stop().success());
    }
    let keys: Vec<String> = dirs
        .iter()
        .map(|d| ok(d.path(), &["audit", "key"]).trim().to_owned())
        .collect();
    assert_ne!(keys[0], keys[1]);
    for dir in &dirs {
        let text = ok(
            dir.path(),
            &["audit", "verify", "--key", &keys[0], "--key", &keys[1]],
        );
        assert!(text.contains("the chain is intact"), "{text}");
        let signed_by = text
            .lines()
            .find(|l| l.contains("signed checkpoints, signed by"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            signed_by.contains(&keys[0]) && signed_by.contains(&keys[1]),
            "{text}"
        );
    }
    let output = crate::larkgate_in(dirs[0].path(), &["audit", "verify", "--key", &keys[0]]);
    assert!(!output.status.success());
    let text = crate::stdout(&output);
    assert!(
        text.contains("BROKEN checkpoint") && text.contains("a key you did not give"),
        "{text}"
    );

    let bundle = dirs[1].path().join("chain.jsonl");
    ok(
        dirs[1].path(),
        &[
            "audit",
            "export",
            "--from",
            "1",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let both = ok(
        elsewhere.path(),
        &[
            "audit",
            "verify",
            "--bundle",
            bundle.to_str().unwrap(),
            "--key",
            &keys[0],
            "--key",
            &keys[1],
        ],
    );
    assert!(both.contains("is intact"), "{both}");
    // The auditor's own verifier, from the docs, given both keys.
    let verifier = crate::audit::docs_verifier(elsewhere.path());
    let output = std::process::Command::new(crate::python())
        .arg(&verifier)
        .arg(&bundle)
        .args(&keys)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let one = crate::fails(
        elsewhere.path(),
        &[
            "audit",
            "verify",
            "--bundle",
            bundle.to_str().unwrap(),
            "--key",
            &keys[1],
        ],
    );
    assert!(one.contains("is BROKEN"), "{one}");
}
