//! `larkgate check`: the configuration validated without starting anything.

use crate::{fails, stderr, stdout};

#[test]
fn check_validates_the_configuration_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("good.toml"),
        "[[upstreams]]\nalias = \"gh\"\nurl = \"https://api.example.com/mcp\"\nheaders = { Authorization = \"Bearer ${LARKGATE_TEST_TOKEN}\" }\n",
    )
    .unwrap();
    let missing_env = fails(dir, &["--config", "good.toml", "check"]);
    assert!(
        missing_env.contains("LARKGATE_TEST_TOKEN is not set"),
        "{missing_env}"
    );
    let with_env = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir)
        .args(["--config", "good.toml", "check"])
        .env("LARKGATE_TEST_TOKEN", "x")
        .output()
        .unwrap();
    assert!(with_env.status.success(), "{}", stderr(&with_env));
    assert!(stdout(&with_env).contains("1 upstreams in the file"));
    assert!(
        !dir.join("larkgate-data").exists(),
        "check opens no data directory"
    );

    let cases = [
        ("data_dri = \"x\"", "unknown field `data_dri`"),
        (
            "[[upstreams]]\nalias = \"x\"\nurl = \"http://10.0.0.1/mcp\"",
            "upstreams[0]",
        ),
        (
            "[policy.roles.a]\ncall = [\"bad name\"]",
            "not a tool pattern",
        ),
        (
            "[scripts]\nmax_wall_time_ms = 0",
            "scripts.max_wall_time_ms",
        ),
        ("listen = \"nowhere\"", "listen"),
        (
            "[[upstreams]]\nalias = \"a\"\nurl = \"https://a.example/mcp\"\n\
             [[upstreams]]\nalias = \"a\"\nurl = \"https://b.example/mcp\"",
            "two upstreams have the alias \"a\"",
        ),
        (
            "[[upstreams]]\nalias = \"gh\"\nurl = \"https://a.example/mcp\"\n\
             headers = { Authorization = \"Bearer abc123\" }",
            "LARKGATE_UPSTREAM_GH_AUTHORIZATION",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.join("bad.toml"), text).unwrap();
        let error = fails(dir, &["--config", "bad.toml", "check"]);
        assert!(error.contains(expected), "{text}: {error}");
    }
}

#[test]
fn check_warns_about_what_is_valid_but_grants_or_matches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    crate::ok(dir, &["principal", "add", "eve", "--roles", "viewr"]);
    std::fs::write(
        crate::config_path(dir),
        "[policy.roles.viewer]\nlist = [\"*\"]\nresources = [\"docs://*\", \"larkgate://docs/*\"]\n\
         [policy.approvals]\nrequire = [\"kv_delte\"]\n",
    )
    .unwrap();
    let output = crate::larkgate_in(dir, &["check"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let warned = stderr(&output);
    for expected in [
        "warning: the policy lets no role call any tool",
        "warning: policy.approvals.require: the pattern \"kv_delte\" matches no tool",
        "warning: the principal \"eve\" has the role \"viewr\"",
        // An upstream's own URI: larkgate lists resources under its own.
        "warning: policy.roles.viewer.resources: the pattern \"docs://*\" matches no resource",
    ] {
        assert!(warned.contains(expected), "{expected}: {warned}");
    }
    assert!(
        !warned.contains("the pattern \"larkgate://docs/*\""),
        "a larkgate URI pattern is fine: {warned}"
    );
    assert!(
        stdout(&output).contains("configuration read from ./larkgate-data/larkgate.toml"),
        "{}",
        stdout(&output)
    );
}

/// `check` says which rules hold calls for their decision, and refuses a wait longer than a
/// request is kept pending, saying which rule and what to lower.
#[test]
fn check_says_which_calls_wait_for_their_decision_and_refuses_a_wait_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let config = |require: &str| {
        std::fs::write(
            crate::config_path(dir),
            format!(
                "[policy.roles.admin]\ncall = [\"*\"]\n[policy.approvals]\nrequire = {require}\n\
                 pending_ttl_seconds = 600\n"
            ),
        )
        .unwrap();
    };
    config(r#"["kv_set", { tool = "kv_delete", wait_seconds = 120 }]"#);
    let output = crate::larkgate_in(dir, &["check"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let said = stdout(&output);
    assert!(
        said.contains(
            "approvals: a call of \"kv_delete\" from a client over HTTP or stdio waits up to \
             120 s for its decision"
        ),
        "{said}"
    );
    assert!(!said.contains("\"kv_set\""), "{said}");
    config(r#"[{ tool = "kv_delete", wait_seconds = 900 }]"#);
    let refused = fails(dir, &["check"]);
    assert!(
        refused.contains("\"kv_delete\" waits 900 s") && refused.contains("lower its wait_seconds"),
        "{refused}"
    );
}
