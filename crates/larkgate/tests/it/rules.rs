//! A rule on a call's arguments (`[[policy.rules]]`) decides the same from every edge: an
//! agent over HTTP, a desktop client over stdio, a draft run's host call and a published
//! script's; the caller reads a role's refusal, and the operator's audit names the rule.

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
    assert!(server.stop().success());

    // The operator's audit names the rule and its reason, for each of the four.
    let audit = ok(d, &["audit", "tail", "-n", "50", "--json"]);
    let decided = audit
        .matches("decided by rule no secret: the secret is for the deploy pipeline")
        .count();
    assert_eq!(decided, 4, "{audit}");
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
    assert!(said.contains("2 roles, 1 rules"), "{said}");

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
