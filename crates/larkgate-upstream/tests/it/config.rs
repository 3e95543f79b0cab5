//! Upstream configuration: secrets from the environment, validation, and names that cannot be
//! federated.

use std::sync::Arc;

use larkgate_upstream::config::{UpstreamConfig, expand};
use larkgate_upstream::tools::{Approval, adopt};
use rmcp::model::Tool;

fn env(name: &str) -> Option<String> {
    match name {
        "TOKEN" => Some("s3cret".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

#[test]
fn header_values_take_secrets_from_the_environment() {
    assert_eq!(expand("Bearer ${TOKEN}", env).unwrap(), "Bearer s3cret");
    assert_eq!(expand("${TOKEN}:${TOKEN}", env).unwrap(), "s3cret:s3cret");
    assert_eq!(expand("x${EMPTY}y", env).unwrap(), "xy");
    assert_eq!(expand("costs $5", env).unwrap(), "costs $5");
    let table = [
        ("Bearer ${MISSING}", "MISSING is not set"),
        ("Bearer ${TOKEN", "unclosed"),
        ("${}", "not an environment variable name"),
        ("${A-B}", "not an environment variable name"),
    ];
    for (value, expected) in table {
        let error = expand(value, env).unwrap_err();
        assert!(error.contains(expected), "{value}: {error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
}

#[test]
fn configurations_are_validated_before_connecting() {
    let good: UpstreamConfig = toml::from_str(
        r#"
        alias = "github"
        url = "https://api.example.com/mcp"
        headers = { Authorization = "Bearer ${TOKEN}" }
        "#,
    )
    .unwrap();
    assert!(good.validate().is_ok());
    assert_eq!(
        good.approval,
        Approval::Always,
        "approval defaults to always"
    );
    let endpoint = good.endpoint(env).unwrap();
    assert_eq!(endpoint.headers["Authorization"], "Bearer s3cret");

    let table = [
        (
            "alias = \"Bad Alias\"\nurl = \"https://a.example/mcp\"",
            "alias",
        ),
        (
            "alias = \"ok\"\nurl = \"http://169.254.169.254/\"",
            "not a public address",
        ),
        (
            "alias = \"ok\"\nurl = \"https://a.example/mcp\"\nallow = [\"10.0.0.0/99\"]",
            "allow",
        ),
        (
            "alias = \"ok\"\nurl = \"https://a.example/mcp\"\n[limits]\nmax_tools = 0",
            "greater than zero",
        ),
    ];
    for (text, expected) in table {
        let config: UpstreamConfig = toml::from_str(text).unwrap();
        let error = config.validate().unwrap_err();
        assert!(error.contains(expected), "{text}: {error}");
    }
    let unknown = toml::from_str::<UpstreamConfig>(
        "alias = \"ok\"\nurl = \"https://a.example/mcp\"\napproval_mode = \"never\"",
    )
    .unwrap_err();
    assert!(unknown.to_string().contains("approval_mode"), "{unknown}");
}

#[test]
fn tool_names_are_mapped_by_one_rule_and_a_collision_drops_only_that_tool() {
    let schema = Arc::new(
        serde_json::json!({"type": "object"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let tool = |name: &str| Tool::new(name.to_owned(), "d", schema.clone());
    let names = |adoption: &larkgate_upstream::tools::Adoption| -> Vec<(String, String)> {
        adoption
            .specs
            .iter()
            .map(|s| (s.name.clone(), s.origin.original_name.clone()))
            .collect()
    };
    let tools = [
        tool("fine"),
        tool("files.read"),
        tool("has space"),
        tool("search-issues"),
        tool(&"x".repeat(200)),
        tool(""),
    ];
    let adoption = adopt("docs", &tools, Approval::Always);
    let mut adopted = names(&adoption);
    adopted.sort();
    assert_eq!(
        adopted,
        [
            ("docs__files_read".to_owned(), "files.read".to_owned()),
            ("docs__fine".to_owned(), "fine".to_owned()),
            ("docs__has_space".to_owned(), "has space".to_owned()),
            ("docs__search-issues".to_owned(), "search-issues".to_owned()),
        ]
    );
    assert!(adoption.specs.iter().all(|s| s.requires_approval));
    let reasons: Vec<&str> = adoption
        .invalid
        .iter()
        .map(|(_, why)| why.as_str())
        .collect();
    assert_eq!(adoption.invalid.len(), 2, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("longer than")),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r.contains("no name")), "{reasons:?}");

    // `a.b` maps onto `a_b`: the tool whose own name it is keeps it, in either order.
    for listing in [[tool("a.b"), tool("a_b")], [tool("a_b"), tool("a.b")]] {
        let adoption = adopt("docs", &listing, Approval::Never);
        assert_eq!(
            names(&adoption),
            [("docs__a_b".to_owned(), "a_b".to_owned())]
        );
        assert_eq!(adoption.invalid.len(), 1);
        assert_eq!(adoption.invalid[0].0, "a.b");
        assert!(
            adoption.invalid[0].1.contains("maps to docs__a_b"),
            "{:?}",
            adoption.invalid
        );
    }
    // Two look-alikes that both need mapping: the first listed keeps the name.
    let adoption = adopt("docs", &[tool("a.b"), tool("a b")], Approval::Never);
    assert_eq!(
        names(&adoption),
        [("docs__a_b".to_owned(), "a.b".to_owned())]
    );

    // A name listed twice: its first definition is used, the repeat reported.
    let (kept, repeated) = larkgate_upstream::tools::distinct(vec![
        Tool::new("same", "first", schema.clone()),
        tool("other"),
        Tool::new("same", "second", schema.clone()),
    ]);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].description.as_deref(), Some("first"));
    assert_eq!(repeated.len(), 1);
    assert!(repeated[0].1.contains("more than once"));
}

#[test]
fn environment_variables_override_header_secrets() {
    let config: UpstreamConfig = toml::from_str(
        r#"
        alias = "my_api"
        url = "https://api.example.com/mcp"
        headers = { X-Api-Key = "${MISSING}", Accept-Language = "en" }
        "#,
    )
    .unwrap();
    assert_eq!(
        larkgate_upstream::config::header_override("my_api", "X-Api-Key"),
        "LARKGATE_UPSTREAM_MY_API_X_API_KEY"
    );
    // Without the override, the missing variable is an error naming it.
    assert!(config.endpoint(env).unwrap_err().contains("MISSING"));
    let overrides = |name: &str| match name {
        "LARKGATE_UPSTREAM_MY_API_X_API_KEY" => Some("from-env".to_owned()),
        "LARKGATE_UPSTREAM_MY_API_AUTHORIZATION" => Some("Bearer supplied".to_owned()),
        _ => None,
    };
    let endpoint = config.endpoint(overrides).unwrap();
    assert_eq!(endpoint.headers["X-Api-Key"], "from-env");
    assert_eq!(endpoint.headers["Accept-Language"], "en");
    assert_eq!(endpoint.headers["Authorization"], "Bearer supplied");
    // An override replaces a configured Authorization rather than adding a second one.
    let configured: UpstreamConfig = toml::from_str(
        r#"
        alias = "my_api"
        url = "https://api.example.com/mcp"
        headers = { authorization = "Bearer ${TOKEN}" }
        "#,
    )
    .unwrap();
    let endpoint = configured.endpoint(overrides).unwrap();
    assert_eq!(endpoint.headers.len(), 1);
    assert_eq!(endpoint.headers["authorization"], "Bearer supplied");
}

#[test]
fn a_command_launched_upstream_is_validated_and_gets_only_the_environment_it_names() {
    for (text, says) in [
        ("alias = \"x\"", "neither a url nor a command"),
        (
            "alias = \"x\"\nurl = \"https://x.example/mcp\"\ncommand = [\"srv\"]",
            "both a url and a command",
        ),
        ("alias = \"x\"\ncommand = [\"\"]", "names the program"),
        (
            "alias = \"x\"\ncommand = [\"srv\"]\nheaders = { A = \"b\" }",
            "headers are for HTTP upstreams",
        ),
        (
            "alias = \"x\"\nurl = \"https://x.example/mcp\"\nenv = { A = \"b\" }",
            "for command-launched upstreams",
        ),
        (
            "alias = \"x\"\ncommand = [\"srv\"]\nenv = { \"A=B\" = \"c\" }",
            "not an environment variable name",
        ),
        (
            "alias = \"x\"\ncommand = [\"srv\"]\ninherit_env = [\"PATH; rm\"]",
            "not an environment variable name",
        ),
        (
            "alias = \"x\"\ncommand = [\"srv\"]\ncwd = \"relative/dir\"",
            "absolute path",
        ),
        (
            "alias = \"x\"\ncommand = [\"srv\"]\n[limits]\nstart_timeout_ms = 0",
            "greater than zero",
        ),
    ] {
        let config: UpstreamConfig = toml::from_str(text).unwrap();
        let error = config.validate().unwrap_err();
        assert!(error.contains(says), "{text}: {error}");
    }
    let config: UpstreamConfig = toml::from_str(
        "alias = \"x\"\ncommand = [\"srv\", \"--flag\", \"a b\"]\ninherit_env = [\"PATH\", \"UNSET\"]\n\
         env = { TOKEN = \"Bearer ${SECRET}\", PLAIN = \"1\" }\ncwd = \"/srv\"",
    )
    .unwrap();
    config.validate().unwrap();
    let env = |name: &str| match name {
        "PATH" => Some("/bin".to_owned()),
        "SECRET" => Some("s3cret".to_owned()),
        "HOME" => Some("/root".to_owned()),
        _ => None,
    };
    let target = config.command_target(env).unwrap();
    assert_eq!(target.program, "srv");
    assert_eq!(target.args, ["--flag", "a b"]);
    assert_eq!(
        target.env.into_iter().collect::<Vec<_>>(),
        [
            ("PATH".to_owned(), "/bin".to_owned()),
            ("PLAIN".to_owned(), "1".to_owned()),
            ("TOKEN".to_owned(), "Bearer s3cret".to_owned()),
        ]
    );
    assert_eq!(target.cwd.unwrap(), std::path::Path::new("/srv"));
    // A variable it needs that is not set names the variable, never a value.
    let error = config.command_target(|_| None).unwrap_err();
    assert!(error.contains("SECRET is not set"), "{error}");
    assert_eq!(config.target(), "command: srv --flag a b");
}
