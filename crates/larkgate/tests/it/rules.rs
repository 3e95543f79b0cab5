//! A rule on a call's arguments (`[[policy.rules]]`) decides the same from every edge: an
//! agent over HTTP, a desktop client over stdio, a draft run's host call, a published
//! script's, and the admin console's actions (which are tool calls); the caller reads a role's
//! refusal, and the operator's audit names the rule.

use serde_json::json;

use crate::ok;

const POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.author]
call = ["kv_get", "clock_now"]

[[policy.rules]]
name = "no secret"
tools = ["kv_get"]
when = 'args.key == "secret"'
effect = "deny"
reason = "the secret is for the deploy pipeline"

[[policy.rules]]
name = "release scripts"
tools = ["script_publish"]
when = 'args.name.startsWith("release_")'
effect = "deny"
reason = "release scripts are published by the release pipeline"

[[policy.rules]]
name = "numbered keys"
tools = ["kv_get"]
when = 'args.key.startsWith("n/") && int(args.key) > 100'
effect = "deny"
"#;

/// Publishes `peek(key)`, which reads the key with `kv_get`, saved by ada (who must exist)
/// and published by a new publisher, pat.
fn publish_peek(d: &std::path::Path) {
    ok(d, &["principal", "add", "pat", "--roles", "publisher"]);
    std::fs::write(
        d.join("peek.star"),
        "def main(*, key: str):\n    return kv_get(key = key)\n",
    )
    .unwrap();
    ok(d, &["--as", "ada", "script", "save", "peek", "peek.star"]);
    ok(d, &["--as", "pat", "script", "publish", "peek"]);
}

/// The answer to `tool` called with `arguments` written as they are (JSON text, which may say
/// a key twice), over HTTP on the 2026-07-28 revision.
fn call_raw(url: &str, token: &str, tool: &str, arguments: &str) -> serde_json::Value {
    let body = format!(
        r#"{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": "{tool}",
            "arguments": {arguments}, "_meta": {{
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {{}}}}}}}}"#
    );
    reqwest::blocking::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// The text of a call's refusal, or `ok`.
fn outcome(answer: &serde_json::Value) -> String {
    if answer["result"]["isError"] == false {
        return "ok".to_owned();
    }
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

#[test]
fn a_rule_refuses_alike_over_http_stdio_a_draft_and_a_published_script() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin,author"]);
    let token = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    publish_peek(d);
    let server = crate::serve::Server::start(d);
    let call = |tool: &str, arguments: serde_json::Value| {
        outcome(&crate::traces::call(
            &server.url,
            &token,
            None,
            None,
            tool,
            arguments,
        ))
    };

    // HTTP.
    assert_eq!(call("kv_get", json!({"key": "public"})), "ok");
    let refused = call("kv_get", json!({"key": "secret"}));
    assert!(
        refused.starts_with("forbidden: ada may not call kv_get"),
        "{refused}"
    );
    assert!(
        !refused.contains("deploy pipeline") && !refused.contains("no secret"),
        "{refused}"
    );

    // Arguments with a key twice: the rule judges what the tool gets (the last), never the
    // other one.
    for (arguments, expected) in [
        (r#"{"key": "public", "key": "secret"}"#, false),
        (r#"{"key": "secret", "key": "public"}"#, true),
    ] {
        let answer = call_raw(&server.url, &token, "kv_get", arguments);
        assert_eq!(outcome(&answer) == "ok", expected, "{arguments}: {answer}");
    }

    // A draft run's host call: the run fails with the same refusal.
    let source = "def main():\n    return kv_get(key = \"secret\")\n";
    let refused = call("script_run_draft", json!({"source": source}));
    assert!(
        refused.contains("forbidden: ada may not call kv_get"),
        "{refused}"
    );

    // A published script's host call, made as script:peek.
    assert_eq!(call("script__peek", json!({"key": "public"})), "ok");
    let refused = call("script__peek", json!({"key": "secret"}));
    assert!(
        refused.contains("forbidden: script:peek may not call kv_get"),
        "{refused}"
    );

    // stdio (relayed to the running serve).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use rmcp::ServiceExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
        command
            .current_dir(d)
            .arg("stdio")
            .env("LARKGATE_TOKEN", &token);
        let session =
            ().serve(rmcp::transport::TokioChildProcess::new(command).unwrap())
                .await
                .unwrap();
        let arguments = json!({"key": "secret"});
        let result = session
            .call_tool(
                rmcp::model::CallToolRequestParams::new("kv_get")
                    .with_arguments(arguments.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_eq!(result.is_error, Some(true), "{result:?}");
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(
            text.contains("forbidden: ada may not call kv_get"),
            "{text}"
        );
        session.cancel().await.unwrap();
    });

    // The console's audit page names the rule to an administrator.
    let origin = server.url.trim_end_matches("/mcp").to_owned();
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{origin}/admin/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = http
        .get(format!("{origin}/admin/audit"))
        .header("Cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().unwrap();
    assert!(
        page.contains("decided by rule no secret: the secret is for the deploy pipeline"),
        "{page}"
    );

    // The console's publish is the call script_publish: the rule refuses it there as over
    // HTTP, and the page says what the caller is told, nothing of the rule.
    let source = "def main():\n    return \"v2\"\n";
    let saved = call(
        "script_save_draft",
        json!({"name": "release_notes", "source": source}),
    );
    assert_eq!(saved, "ok");
    let refused = call("script_publish", json!({"name": "release_notes"}));
    assert!(
        refused.starts_with("forbidden: ada may not call script_publish"),
        "{refused}"
    );
    let script_page = |path: &str| {
        http.get(format!("{origin}{path}"))
            .header("Cookie", &cookie)
            .send()
            .unwrap()
            .text()
            .unwrap()
    };
    let page = script_page("/admin/scripts/release_notes");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no form: {page}"))
        .to_owned();
    let posted = http
        .post(format!("{origin}/admin/scripts/release_notes/publish"))
        .header("Cookie", &cookie)
        .header("Origin", &origin)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .unwrap();
    assert_eq!(posted.status(), 303);
    let page = script_page("/admin/scripts/release_notes");
    assert!(page.contains("ada may not call script_publish"), "{page}");
    assert!(!page.contains("release pipeline"), "{page}");
    assert!(page.contains("Never published."), "{page}");

    // A rule that cannot be evaluated on a call refuses it with a correlation id, under which
    // the log has the rule and its error.
    let refused = call("kv_get", json!({"key": "n/seven"}));
    assert!(
        refused.starts_with(
            "forbidden: ada may not call kv_get: a policy rule could not be evaluated on this call"
        ),
        "{refused}"
    );
    let id: String = refused
        .split("(correlation id ")
        .nth(1)
        .unwrap_or_else(|| panic!("{refused}"))
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    let logged = server.stderr_until(&id);
    let line = logged.last().unwrap();
    assert!(
        line.contains("rule numbered keys: its condition could not be evaluated"),
        "{line}"
    );
    assert!(server.stop().success());

    // The operator's audit names the rule and its reason, for each refusal: HTTP (twice: the
    // key written twice), the draft, the published script and stdio; publishing over HTTP and
    // from the console.
    let audit = ok(d, &["audit", "tail", "-n", "500", "--json"]);
    let decided = |text: &str| audit.matches(text).count();
    assert_eq!(
        decided("decided by rule no secret: the secret is for the deploy pipeline"),
        5,
        "{audit}"
    );
    assert_eq!(
        decided(
            "decided by rule release scripts: release scripts are published by the release \
             pipeline"
        ),
        2,
        "{audit}"
    );
    // The console's refusal is recorded as its session's, like any edge's.
    assert!(
        audit.contains(r#""session":"console","tool":"script_publish""#),
        "{audit}"
    );
}

/// `larkgate policy explain` shows each rule's result and the decision, and calls nothing.
#[test]
fn policy_explain_shows_every_rule_and_the_decision_without_calling() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "author"]);
    let said = ok(
        d,
        &[
            "--as",
            "ada",
            "policy",
            "explain",
            "kv_get",
            "--args",
            r#"{"key": "secret"}"#,
        ],
    );
    for expected in [
        "ada calling kv_get:",
        "roles: ada's roles [author] call it",
        r#"arguments: {"key":"secret"}"#,
        "rule no secret (deny): applies; its condition is true",
        "decision: forbidden, by no secret: the secret is for the deploy pipeline",
    ] {
        assert!(said.contains(expected), "{expected:?} in {said}");
    }
    let said = ok(
        d,
        &[
            "--as",
            "ada",
            "policy",
            "explain",
            "kv_get",
            "--arg",
            "key=public",
        ],
    );
    assert!(
        said.contains("rule no secret (deny): applies; its condition is false"),
        "{said}"
    );
    assert!(said.ends_with("decision: allowed\n"), "{said}");
    // Invisible and mistyped tools, and arguments the tool refuses.
    let said = ok(
        d,
        &[
            "--as", "ada", "policy", "explain", "kv_set", "--arg", "key=k",
        ],
    );
    assert!(said.contains("decision: not_found"), "{said}");
    let said = ok(d, &["--as", "ada", "policy", "explain", "kv_gett"]);
    assert!(
        said.contains("decision: not_found: no tool is named kv_gett"),
        "{said}"
    );
    let said = ok(
        d,
        &[
            "--as", "ada", "policy", "explain", "kv_get", "--arg", "nope=1",
        ],
    );
    assert!(said.contains("decision: invalid_arguments"), "{said}");
    // Nothing was called, so nothing was audited.
    let audit = ok(d, &["audit", "tail", "-n", "20"]);
    assert!(!audit.contains("kv_get"), "{audit}");
}

/// `larkgate check` compiles every condition and names an argument a built-in tool the rule
/// names does not take, with the closest one it does.
#[test]
fn check_names_a_condition_that_reads_an_argument_its_tool_does_not_take() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let typo = POLICY.replace(
        r#"when = 'args.key == "secret"'"#,
        r#"when = 'args.kye == "secret"'"#,
    );
    std::fs::write(crate::config_path(d), &typo).unwrap();
    let refused = crate::fails(d, &["check"]);
    assert!(
        refused.contains("no secret: its condition reads `args.kye`, which kv_get does not take")
            && refused.contains("did you mean `args.key`?"),
        "{refused}"
    );
    // What would call tools refuses to start on it, as check does.
    let refused = crate::fails(d, &["call", "clock_now"]);
    assert!(refused.contains("did you mean `args.key`?"), "{refused}");
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    let said = ok(d, &["check"]);
    assert!(said.contains("2 roles, 3 rules"), "{said}");

    // A published script's tool: a rule naming it is checked against its parameters, with a
    // warning (scripts change outside the file), at check and at every start.
    ok(d, &["principal", "add", "ada", "--roles", "admin,author"]);
    publish_peek(d);
    let on_script = format!(
        "{POLICY}\n[[policy.rules]]\nname = \"peek\"\ntools = [\"script__peek\"]\n\
         when = 'args.kee == \"x\"'\neffect = \"deny\"\n"
    );
    std::fs::write(crate::config_path(d), &on_script).unwrap();
    let checked = crate::larkgate_in(d, &["check"]);
    assert!(checked.status.success(), "{}", crate::stderr(&checked));
    let warned = crate::stderr(&checked);
    assert!(
        warned.contains(
            "peek: its condition reads `args.kee`, which script__peek does not take (it takes \
             key); did you mean `args.key`?: the rule refuses every call of script__peek"
        ),
        "{warned}"
    );

    // An upstream's tool: checked against the definition pinned when it was approved, read
    // from the store (the upstream itself is gone by then).
    let peer = crate::upstreams::weather();
    ok(
        d,
        &[
            "upstream",
            "add",
            "weather",
            &peer.url,
            "--allow",
            "127.0.0.1",
        ],
    );
    drop(peer);
    let on_upstream = format!(
        "{POLICY}\n[[policy.rules]]\nname = \"cities\"\ntools = [\"weather__forecast\"]\n\
         when = 'args.ctiy == \"Oslo\"'\neffect = \"deny\"\n"
    );
    std::fs::write(crate::config_path(d), &on_upstream).unwrap();
    let checked = crate::larkgate_in(d, &["check"]);
    assert!(checked.status.success(), "{}", crate::stderr(&checked));
    let warned = crate::stderr(&checked);
    assert!(
        warned.contains(
            "cities: its condition reads `args.ctiy`, which weather__forecast does not take"
        ) && warned.contains("did you mean `args.city`?"),
        "{warned}"
    );
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    // And a running serve refuses such a file at a reload, keeping the one in force.
    let server = crate::serve::Server::start(d);
    std::fs::write(crate::config_path(d), &typo).unwrap();
    let refused = crate::fails(d, &["reload"]);
    assert!(
        refused.contains("was not reloaded") && refused.contains("did you mean `args.key`?"),
        "{refused}"
    );
    assert!(server.stop().success());
}
