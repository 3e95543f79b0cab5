//! Reloading a running `serve`'s configuration: `larkgate reload` and SIGHUP apply a new
//! policy and run limits to the next call, in the sessions already open; a file that fails its
//! checks or changes what only a restart applies is refused whole, and the one in force stays.

use std::path::Path;

use larkgate_upstream::client::{Revisions, UpstreamClient};

use crate::serve::{Server, client};
use crate::{fails, ok};

const BASE: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.reader]
call = ["clock_now"]
"#;

/// What `kv_get` answers `client`: `ok`, or the refusal's code.
async fn kv_get(client: &UpstreamClient) -> String {
    let arguments = serde_json::json!({"key": "k"});
    let result = client
        .call_tool("kv_get", arguments.as_object().unwrap().clone())
        .await
        .unwrap();
    if result.is_error != Some(true) {
        return "ok".to_owned();
    }
    let text = serde_json::to_string(&result.content).unwrap();
    for code in ["forbidden", "rate_limited", "not_found"] {
        if text.contains(code) {
            return code.to_owned();
        }
    }
    panic!("an unexpected refusal: {text}")
}

fn write_config(dir: &Path, text: &str) {
    std::fs::write(crate::config_path(dir), text).unwrap();
}

#[test]
fn a_reload_applies_a_new_policy_to_open_sessions_and_refuses_what_it_cannot_apply_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, BASE);
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let token = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // One 2025-11-25 session (a session of its own on the server) and one 2026-07-28 client,
    // both kept open across every reload.
    let (legacy, latest) = runtime.block_on(async {
        (
            client(&server.url, &token, Revisions::Legacy)
                .await
                .unwrap(),
            client(&server.url, &token, Revisions::Latest)
                .await
                .unwrap(),
        )
    });
    let both = |wanted: &str| {
        runtime.block_on(async {
            assert_eq!(kv_get(&legacy).await, wanted, "the 2025-11-25 session");
            assert_eq!(kv_get(&latest).await, wanted, "the 2026-07-28 client");
        })
    };
    both("not_found");

    // A new role grant, and a rate limit on it.
    write_config(
        d,
        &format!(
            "{BASE}call = [\"clock_now\", \"kv_get\"]\n[[policy.rate_limits]]\nper = \
             \"principal_tool\"\ntools = [\"kv_get\"]\ncalls = 2\nperiod_seconds = 3600\n"
        )
        .replace("call = [\"clock_now\"]\ncall", "call"),
    );
    let said = ok(d, &["reload"]);
    assert!(
        said.contains("the configuration was reloaded from") && said.contains("[policy] changed"),
        "{said}"
    );
    both("ok");
    both("rate_limited");

    // A file that does not parse: refused, with the reason; the policy in force stays.
    write_config(d, "[policy.roles.reader\ncall = [\"*\"]\n");
    let refused = fails(d, &["reload"]);
    assert!(
        refused.contains("was not reloaded, and the one in force stays")
            && refused.contains("larkgate.toml"),
        "{refused}"
    );
    both("rate_limited");

    // A file that changes what only a restart applies: refused, naming each key.
    write_config(
        d,
        &format!("{BASE}[server]\nlisten = \"127.0.0.1:1\"\n[scripts]\nworkers = 5\n"),
    );
    let refused = fails(d, &["reload"]);
    assert!(
        refused.contains("server.listen") && refused.contains("scripts.workers"),
        "{refused}"
    );
    both("rate_limited");

    // SIGHUP, as a service manager sends it: back to the first policy (the rate limit gone).
    write_config(d, BASE);
    let pid = server.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // The log says each outcome: the first reload, the two refusals, then this one.
    let mut lines = server.stderr_until("was reloaded from");
    lines.extend(server.stderr_until("was reloaded from"));
    let outcomes: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains("the configuration was"))
        .collect();
    assert_eq!(outcomes.len(), 4, "{outcomes:?}");
    assert!(outcomes[1].contains("was not reloaded"), "{outcomes:?}");
    assert!(outcomes[2].contains("server.listen"), "{outcomes:?}");
    both("not_found");

    // And it still stops gracefully, its endpoint file removed.
    runtime.block_on(async {
        legacy.close().await;
        latest.close().await;
    });
    let announced = d.join("larkgate-data/serve.url");
    assert!(announced.exists());
    assert!(server.stop().success());
    assert!(!announced.exists(), "serve.url outlived serve");
}

/// `larkgate reload` with no `serve` running says so, and changes nothing.
#[test]
fn reload_without_a_running_serve_says_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, BASE);
    let refused = fails(d, &["reload"]);
    assert!(
        refused.contains("no larkgate serve is running on"),
        "{refused}"
    );
}
