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

/// Whether `line` is an access line, in text or in JSON.
fn is_access_line(line: &str) -> bool {
    crate::logs::access_fields(line).is_some()
        || serde_json::from_str::<serde_json::Value>(line)
            .is_ok_and(|json| json["message"] == "access")
}

/// Calls `clock_now` with `token` and asserts the access line in text that says so.
fn assert_a_call_is_logged(server: &Server, token: &str) {
    let answer = crate::traces::call(
        &server.url,
        token,
        None,
        None,
        "clock_now",
        serde_json::json!({}),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let lines = server.stderr_until("tool=\"clock_now\"");
    assert!(
        crate::logs::access_fields(lines.last().unwrap()).is_some(),
        "{lines:?}"
    );
}

/// A reload puts identity providers, trace export and the log's format and access lines in
/// force for the next request, and takes them away again, without a restart.
#[test]
fn a_reload_changes_sign_in_traces_and_the_log_for_the_next_request() {
    let provider = crate::sign_in::Provider::start();
    let collector = crate::traces::peer("otlp_receiver.py");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let signed_in = format!(
        "{BASE}\n[[sign_in.issuers]]\nissuer = \"{}\"\nname = \"idp\"\n\n[telemetry]\n\
         otlp_endpoint = \"http://127.0.0.1:{}\"\nservice_name = \"reloaded\"\n\n[server]\n\
         log_format = \"json\"\naccess_log = false\n",
        provider.issuer, collector.port
    );
    // `ada` is registered for the provider (which the file must name for that); then the
    // gateway starts without it.
    write_config(d, &signed_in);
    let admin = crate::sign_in::ada_and_root(d, "reader");
    write_config(d, BASE);
    let server = Server::start(d);
    let url = server.url.clone();
    let metadata = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let status = |url: &str| reqwest::blocking::get(url).unwrap().status().as_u16();
    let ada = provider.token("ada", &[("aud", &url)]);

    // Before: no provider, text lines with access lines.
    assert_eq!(status(&metadata), 404);
    let (code, challenge, _) = crate::sign_in::call(&url, Some(&ada), "clock_now");
    assert_eq!(code, 401);
    assert!(!challenge.contains("resource_metadata"), "{challenge}");
    assert_a_call_is_logged(&server, &admin);

    // The provider, traces, JSON and no access lines, from the next request on.
    write_config(d, &signed_in);
    let said = ok(d, &["reload"]);
    assert!(
        said.contains(
            "[sign_in], [telemetry], server.log_format, server.access_log changed, for the next call"
        ),
        "{said}"
    );
    let lines = server.stderr_until("was reloaded from");
    let reloaded: serde_json::Value = serde_json::from_str(lines.last().unwrap())
        .unwrap_or_else(|_| panic!("the reload's own line is not JSON: {lines:?}"));
    assert_eq!(reloaded["level"], "INFO", "{reloaded}");
    assert_eq!(status(&metadata), 200);
    let document: serde_json::Value = reqwest::blocking::get(&metadata).unwrap().json().unwrap();
    assert_eq!(
        document["authorization_servers"],
        serde_json::json!([provider.issuer])
    );
    let (code, _, body) = crate::sign_in::call(&url, Some(&ada), "clock_now");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    let (code, challenge, _) = crate::sign_in::call(&url, None, "clock_now");
    assert_eq!(code, 401);
    assert!(challenge.contains("resource_metadata"), "{challenge}");
    let spans = crate::traces::spans_until(&collector, |spans| {
        spans.iter().any(|span| span.name == "tools/call clock_now")
    });
    assert!(!spans.is_empty());
    // No access line between the reload and the next one's line.
    write_config(d, BASE);
    let said = ok(d, &["reload"]);
    assert!(
        said.contains("[sign_in], [telemetry], server.log_format, server.access_log"),
        "{said}"
    );
    let lines = server.stderr_until("was reloaded from");
    assert!(!lines.iter().any(|line| is_access_line(line)), "{lines:?}");

    // Back to the first file: the provider's token is refused again, the metadata gone, and
    // the log is text with access lines.
    assert_eq!(status(&metadata), 404);
    let (code, _, _) = crate::sign_in::call(&url, Some(&ada), "clock_now");
    assert_eq!(code, 401);
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("larkgate: the configuration was reloaded"),
        "{lines:?}"
    );
    assert_a_call_is_logged(&server, &admin);
    assert!(server.stop().success());
}

/// A format chosen by `LARKGATE_LOG_FORMAT` (or `--log-format`) outranks the file's, at a
/// reload as at start; a `[telemetry]` that cannot export is refused whole.
#[test]
fn a_reload_keeps_a_chosen_log_format_and_refuses_telemetry_it_cannot_build() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, BASE);
    let server = Server::start_with_env(d, &[("LARKGATE_LOG_FORMAT", "text")]);
    write_config(d, &format!("{BASE}[server]\nlog_format = \"json\"\n"));
    let said = ok(d, &["reload"]);
    assert!(
        said.contains("server.log_format changed")
            && said.contains("the log keeps its format: --log-format or LARKGATE_LOG_FORMAT"),
        "{said}"
    );
    let lines = server.stderr_until("was reloaded from");
    assert!(lines.last().unwrap().starts_with("larkgate: "), "{lines:?}");

    // A collector header naming a variable that is not set: nothing changes, not even the
    // policy beside it.
    write_config(
        d,
        &format!(
            "{BASE}[policy.roles.extra]\ncall = [\"kv_get\"]\n[telemetry]\notlp_endpoint = \
             \"http://127.0.0.1:4318\"\nheaders = {{ authorization = \"Bearer ${{NO_SUCH_OTLP_TOKEN}}\" }}\n"
        ),
    );
    let refused = fails(d, &["reload"]);
    assert!(
        refused.contains("was not reloaded, and the one in force stays")
            && refused.contains("NO_SUCH_OTLP_TOKEN"),
        "{refused}"
    );
    assert!(server.stop().success());
}
