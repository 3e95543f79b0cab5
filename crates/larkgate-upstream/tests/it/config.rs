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
fn a_tool_whose_prefixed_name_is_invalid_is_dropped_and_counted() {
    let schema = Arc::new(
        serde_json::json!({"type": "object"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let tools = [
        Tool::new("fine", "ok", schema.clone()),
        Tool::new("has space", "bad", schema.clone()),
        Tool::new("x".repeat(200), "too long", schema),
    ];
    let adoption = adopt("docs", &tools, Approval::Always);
    assert_eq!(adoption.specs.len(), 1);
    assert_eq!(adoption.specs[0].name, "docs__fine");
    assert!(adoption.specs[0].requires_approval);
    assert_eq!(adoption.invalid.len(), 2);
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
