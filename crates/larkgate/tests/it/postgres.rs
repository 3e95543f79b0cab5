//! larkgate on PostgreSQL as an operator runs it: `larkgate migrate` (twice at once, on an
//! older schema, on a newer one), settings that are wrong in each way `check` and `serve` must
//! explain, and a database that goes away under load and comes back. Each test has a schema of
//! its own on the test server (see `larkgate_store::postgres::testing`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use larkgate_store::postgres::testing::{Relay, TestSchema, url};
use larkgate_upstream::client::Revisions;

use crate::serve::{Server, client};
use crate::{config_path, fails, ok};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

fn store_section(url: &str, schema: &TestSchema) -> String {
    format!("[store]\nurl = {url:?}\nschema = {:?}\n", schema.name())
}

#[test]
fn migrate_run_twice_at_once_creates_the_schema_once() {
    let runtime = runtime();
    let schema = runtime.block_on(TestSchema::create());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(config_path(dir.path()), store_section(&url(), &schema)).unwrap();
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_larkgate"))
            .current_dir(dir.path())
            .arg("migrate")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (start(), start());
    let mut said = Vec::new();
    for child in [first, second] {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        said.push(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let version = larkgate_store::postgres::SCHEMA_VERSION;
    assert_eq!(
        said.iter()
            .filter(|s| s.contains(&format!("schema migrated from version 0 to {version}")))
            .count(),
        1,
        "{said:?}"
    );
    assert_eq!(
        said.iter()
            .filter(|s| s.contains(&format!("schema already at version {version}")))
            .count(),
        1,
        "{said:?}"
    );
    assert!(
        said[0].contains(&format!("schema {:?}", schema.name())),
        "{said:?}"
    );
    // And the store works: a principal added through it is there.
    ok(dir.path(), &["principal", "add", "ada", "--roles", "admin"]);
    assert!(ok(dir.path(), &["principal", "list"]).contains("ada"));
}

#[test]
fn an_older_schema_is_migrated_and_a_newer_one_is_refused_with_what_to_do() {
    let runtime = runtime();
    let schema = runtime.block_on(TestSchema::create());
    runtime.block_on(async {
        let older = larkgate_store::PostgresStore::connect(&schema.settings()).unwrap();
        older.migrate_to(1).await.unwrap();
        larkgate_store::KvStore::kv_set(&older, "kept", "yes")
            .await
            .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(config_path(dir.path()), store_section(&url(), &schema)).unwrap();
    let version = larkgate_store::postgres::SCHEMA_VERSION;
    let said = ok(dir.path(), &["migrate"]);
    assert!(
        said.contains(&format!("schema migrated from version 1 to {version}")),
        "{said}"
    );
    assert!(ok(dir.path(), &["call", "kv_get", "--arg", "key=kept"]).contains("yes"));

    runtime.block_on(schema.execute("UPDATE larkgate_schema SET version = 99"));
    for command in [
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ][..],
        &["migrate"],
    ] {
        let error = fails(dir.path(), command);
        assert!(
            error.contains("schema version 99, newer than this larkgate knows"),
            "{command:?}: {error}"
        );
        assert!(error.contains("run that version (or newer)"), "{error}");
    }
}

#[test]
fn wrong_store_settings_are_explained_without_the_password() {
    let runtime = runtime();
    let schema = runtime.block_on(TestSchema::create());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = |text: &str| std::fs::write(config_path(d), text).unwrap();

    // The password's variable is not set: refused before anything connects.
    config(&format!(
        "{}password = \"${{LARKGATE_TEST_NO_SUCH_VARIABLE}}\"\n",
        store_section(&url(), &schema)
    ));
    for command in [
        &["check"][..],
        &["migrate"],
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ],
    ] {
        let error = fails(d, command);
        assert!(
            error.contains(
                "store.password: the environment variable LARKGATE_TEST_NO_SUCH_VARIABLE is not set"
            ),
            "{command:?}: {error}"
        );
    }
    // A password written into the file or the URL.
    config(&format!(
        "{}password = \"hunter2-in-the-file\"\n",
        store_section(&url(), &schema)
    ));
    let error = fails(d, &["check"]);
    assert!(error.contains("must come from the environment"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
    config("[store]\nurl = \"postgres://larkgate:hunter2@127.0.0.1/test\"\n");
    let error = fails(d, &["check"]);
    assert!(error.contains("holds a password"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");

    // Nothing listens there: `check` does not connect, so it passes and says so; `serve`
    // and `migrate` say where they tried and why they failed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    config(&format!(
        "[store]\nurl = \"postgres://larkgate@127.0.0.1:{port}/larkgate\"\nconnect_timeout_ms = 2000\n"
    ));
    let checked = ok(d, &["check"]);
    assert!(checked.contains("not contacted"), "{checked}");
    for command in [
        &["migrate"][..],
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ],
    ] {
        let error = fails(d, command);
        assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
        assert!(error.to_lowercase().contains("refused"), "{error}");
        assert!(
            error.contains("check that PostgreSQL is running"),
            "{error}"
        );
    }

    // A role the server does not know, with a password from the environment: the server's
    // reason, never the password.
    let host_and_db = url()
        .trim_start_matches("postgres://")
        .split_once('@')
        .unwrap()
        .1
        .to_owned();
    config(&format!(
        "[store]\nurl = \"postgres://no_such_larkgate_role@{host_and_db}\"\nschema = {:?}\n\
         password = \"${{LARKGATE_TEST_DB_PASSWORD}}\"\n",
        schema.name()
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ])
        .env("LARKGATE_TEST_DB_PASSWORD", "hunter2-from-the-environment")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("role \"no_such_larkgate_role\" does not exist")
            || error.contains("password authentication failed"),
        "{error}"
    );
    assert!(!error.contains("hunter2"), "{error}");
}

/// Calls `kv_set` with `key`; answers whether the call was acknowledged (answered without an
/// error). A call refused or failed is not acknowledged, whatever the reason.
async fn set(admin: &larkgate_upstream::client::UpstreamClient, key: &str) -> Result<(), String> {
    let arguments = serde_json::json!({"key": key, "value": "v"});
    match admin
        .call_tool("kv_set", arguments.as_object().unwrap().clone())
        .await
    {
        Ok(result) if result.is_error != Some(true) => Ok(()),
        Ok(result) => Err(format!("{:?}", result.structured_content)),
        Err(error) => Err(error.to_string()),
    }
}

#[test]
fn the_database_going_away_under_load_loses_no_acknowledged_call_and_service_resumes() {
    let runtime = runtime();
    let schema = runtime.block_on(TestSchema::create());
    let relay = runtime.block_on(Relay::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        config_path(d),
        format!(
            "{}busy_timeout_ms = 1000\nconnect_timeout_ms = 1000\n",
            store_section(&relay.url(), &schema)
        ),
    )
    .unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let base = server.ops.clone();
    let ready = |base: &str| {
        reqwest::blocking::get(format!("{base}/readyz"))
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(ready(&base), 200);

    let mut acknowledged = Vec::new();
    let mut refused = Vec::new();
    runtime.block_on(async {
        let admin = client(&server.url, &token, Revisions::Latest)
            .await
            .unwrap();
        for i in 0..40 {
            let key = format!("before{i}");
            set(&admin, &key).await.unwrap();
            acknowledged.push(key);
        }
    });
    // The database goes away mid-load. Each call is answered at once with a 503 that says
    // what failed and holds no address (raw HTTP: the MCP client library would wait out its
    // own timeout on a 503).
    relay.cut();
    let http = reqwest::blocking::Client::new();
    for i in 0..10 {
        let started = Instant::now();
        let response = http
            .post(&server.url)
            .bearer_auth(&token)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(
                serde_json::json!({
                    "jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "kv_set", "arguments": {"key": format!("during{i}"), "value": "v"}}
                })
                .to_string(),
            )
            .send()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "a call hung");
        let status = response.status().as_u16();
        let body = response.text().unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("could not be reached"), "{body}");
        assert!(!body.contains("127.0.0.1:"), "{body}");
        refused.push(body);
    }
    assert_eq!(ready(&base), 503);

    // It comes back: within seconds the gateway is ready and calls work again.
    relay.restore();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready(&base) != 200 {
        assert!(Instant::now() < deadline, "not ready again");
        std::thread::sleep(Duration::from_millis(200));
    }
    runtime.block_on(async {
        let admin = client(&server.url, &token, Revisions::Latest)
            .await
            .unwrap();
        for i in 0..20 {
            let key = format!("after{i}");
            set(&admin, &key).await.unwrap();
            acknowledged.push(key);
        }
    });
    assert!(server.stop().success());

    // Every acknowledged call's write is in the database, and the audit chain (journaled
    // locally while the database was away) is whole.
    runtime.block_on(async {
        let db = schema.client().await;
        for key in &acknowledged {
            let found = db
                .query_opt("SELECT value FROM kv WHERE key = $1", &[key])
                .await
                .unwrap();
            assert!(found.is_some(), "{key} was acknowledged and lost");
        }
    });
    let verified = ok(d, &["audit", "verify"]);
    assert!(verified.contains("intact"), "{verified}");
}

/// An operator's command on another machine (another data directory) pointed at the same
/// database as a running gateway is a replica of its own: its events and its calls join the
/// gateway's chain, which verifies whole from either directory. A copy of the gateway's data
/// directory (same replica name) is refused while the gateway runs, with what to do.
#[test]
fn a_command_elsewhere_on_the_same_database_joins_the_gateways_chain() {
    let runtime = runtime();
    let schema = runtime.block_on(TestSchema::create());
    let gateway = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    for dir in [gateway.path(), elsewhere.path(), copy.path()] {
        std::fs::write(config_path(dir), store_section(&url(), &schema)).unwrap();
    }
    let server = Server::start(gateway.path());
    ok(
        elsewhere.path(),
        &["principal", "add", "zed", "--roles", "writer"],
    );
    ok(elsewhere.path(), &["call", "clock_now"]);
    let replica = |dir: &std::path::Path| config_path(dir).with_file_name("replica");
    let name = std::fs::read_to_string(replica(gateway.path())).unwrap();
    std::fs::write(replica(copy.path()), &name).unwrap();
    let refused = fails(copy.path(), &["call", "clock_now"]);
    assert!(
        refused.contains(&format!("journaling as replica {}", name.trim())),
        "{refused}"
    );
    assert!(refused.contains("its own name"), "{refused}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tail = ok(gateway.path(), &["audit", "tail", "-n", "50"]);
        if tail.contains("added principal zed") && tail.contains("clock_now") {
            break;
        }
        assert!(Instant::now() < deadline, "{tail}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.stop().success());
    for dir in [gateway.path(), elsewhere.path()] {
        let verified = ok(dir, &["audit", "verify"]);
        assert!(verified.contains("intact"), "{verified}");
        assert!(!verified.contains("without an outcome"), "{verified}");
    }
    let tail = ok(elsewhere.path(), &["audit", "tail", "-n", "50"]);
    assert_eq!(tail.matches("added principal zed").count(), 1, "{tail}");
}
