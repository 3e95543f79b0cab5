//! Tool search on the catalogue of 500 tools from 10 upstreams ([`crate::catalogue`]): what a
//! searched server lists, what `find_tools` finds and for whom, and how well it finds the
//! tool a question asks for. (Calls through `call_tool` cross the pipeline in the MCP server;
//! the larkgate crate's `servers` tests make them with the official SDK.)

use std::collections::BTreeSet;
use std::sync::Arc;

use larkgate_platform::policy::{Pattern, Policy};
use larkgate_platform::servers::{ServerSpec, VirtualServer};
use larkgate_platform::{Code, Platform, RunContext, SessionIdentity};
use serde_json::json;

use crate::catalogue;
use crate::harness::{Harness, principal};

/// `admin` calls everything; `github` calls the GitHub upstream's tools only.
const POLICY: &str = r#"
[roles.admin]
call = ["*"]
[roles.github]
call = ["github__*"]
"#;

async fn harness() -> Harness {
    let policy: Policy = toml::from_str(POLICY).unwrap();
    Harness::with(|b| catalogue::register(b.policy(policy))).await
}

fn patterns(patterns: &[&str]) -> Vec<Pattern> {
    patterns.iter().map(|p| Pattern::new(p).unwrap()).collect()
}

/// A server of `tools` with tool search and `pinned`.
fn searched(tools: &[&str], pinned: &[&str]) -> ServerSpec {
    ServerSpec {
        name: "search".into(),
        tools: patterns(tools),
        prefix: true,
        tool_search: true,
        pinned: patterns(pinned),
        ..Default::default()
    }
}

/// `roles` reaching the platform through `server`.
fn identity(roles: &[&str], server: ServerSpec) -> SessionIdentity {
    SessionIdentity {
        run: RunContext::direct(principal("someone", roles)),
        label: "test".into(),
        server: Some(Arc::new(VirtualServer::new(server).unwrap())),
    }
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

fn find(
    platform: &Platform,
    identity: &SessionIdentity,
    query: &str,
    limit: usize,
) -> serde_json::Value {
    let arguments = json!({ "query": query, "limit": limit });
    let answer = platform
        .find_tools(Some(identity), arguments.as_object())
        .expect("the search answers");
    answer
        .content
        .and_then(|c| c.structured)
        .expect("a structured answer")
}

#[tokio::test]
async fn the_catalogue_has_500_distinct_tools_from_10_upstreams() {
    let tools = catalogue::tools();
    assert_eq!(tools.len(), 500);
    let names: BTreeSet<String> = tools
        .iter()
        .map(|(a, t)| format!("{a}__{}", t.name))
        .collect();
    assert_eq!(names.len(), 500, "every tool's name is its own");
    let upstreams: BTreeSet<&str> = tools.iter().map(|(a, _)| *a).collect();
    assert_eq!(upstreams.len(), 10);
    for (query, expected) in catalogue::QUERIES {
        assert!(
            names.contains(*expected),
            "{query:?} asks for {expected}, which is not a tool"
        );
    }
    assert_eq!(catalogue::QUERIES.len(), 50);
}

/// Search quality: what the README reports, held here so that a change to the ranking that
/// makes it worse fails. The figures are those `cargo bench --bench tool_search` prints.
#[tokio::test]
async fn find_tools_answers_the_tool_a_question_asks_for_among_its_first_five() {
    let h = harness().await;
    let admin = identity(&["admin"], searched(&["*"], &[]));
    let recall_5 = catalogue::recall_at(&h.platform, &admin, 5);
    let recall_1 = catalogue::recall_at(&h.platform, &admin, 1);
    assert!(recall_5 >= 0.90, "recall@5 fell to {recall_5:.2}");
    assert!(recall_1 >= 0.60, "recall@1 fell to {recall_1:.2}");
}

#[tokio::test]
async fn a_searched_server_lists_its_search_and_the_pinned_tools_it_serves_and_the_caller_may_see()
{
    let h = harness().await;
    // slack__* is pinned but not served; kv_get is served and pinned.
    let server = searched(
        &["github__*", "kv_get", "kv_set"],
        &["kv_get", "slack__*", "github__get_issue"],
    );
    let admin = identity(&["admin"], server.clone());
    assert_eq!(
        names(&h.platform.list(Some(&admin))),
        ["find_tools", "call_tool", "github__get_issue", "kv_get"]
    );
    // A pinned tool the caller may not see is not listed.
    let github = identity(&["github"], server.clone());
    assert_eq!(
        names(&h.platform.list(Some(&github))),
        ["find_tools", "call_tool", "github__get_issue"]
    );
    // Without tool search, the same server lists all it serves.
    let all = identity(
        &["admin"],
        ServerSpec {
            tool_search: false,
            pinned: Vec::new(),
            ..server
        },
    );
    assert_eq!(h.platform.list(Some(&all)).len(), 52);
    // The search's tools describe themselves, and find_tools says it only reads.
    let listed = h.platform.list(Some(&admin));
    let find_tools = &listed[0];
    assert!(find_tools.output_schema.is_some());
    assert_eq!(
        find_tools
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint),
        Some(true)
    );
    assert_eq!(find_tools.input_schema["required"], json!(["query"]));
    assert_eq!(listed[1].input_schema["required"], json!(["name"]));
}

#[tokio::test]
async fn a_search_finds_only_what_the_caller_may_see_and_ranks_it_as_if_nothing_else_existed() {
    let h = harness().await;
    // The same 50 tools, seen by a principal who may see only them through a server of
    // everything, and by an admin through a server of only them.
    let narrow_roles = identity(&["github"], searched(&["*"], &[]));
    let narrow_server = identity(&["admin"], searched(&["github__*"], &[]));
    for (query, _) in catalogue::QUERIES {
        let by_roles = find(&h.platform, &narrow_roles, query, 20);
        let by_server = find(&h.platform, &narrow_server, query, 20);
        assert_eq!(by_roles["searched"], 50, "{query}");
        assert_eq!(
            by_roles, by_server,
            "{query}: the hidden tools changed the ranking"
        );
        for tool in by_roles["tools"].as_array().unwrap() {
            let name = tool["name"].as_str().unwrap();
            assert!(name.starts_with("github__"), "{query}: found {name}");
        }
    }
    // A tool of another upstream is not found by its own name.
    let answer = find(
        &h.platform,
        &narrow_roles,
        "slack__create_message post a message in a channel",
        20,
    );
    assert!(
        answer["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"].as_str().unwrap().starts_with("github__"))
    );
}

#[tokio::test]
async fn a_found_tool_comes_with_its_signature_schemas_and_annotations() {
    let h = harness().await;
    let admin = identity(&["admin"], searched(&["*"], &[]));
    let answer = find(&h.platform, &admin, "merge a pull request", 3);
    let first = &answer["tools"][0];
    assert_eq!(first["name"], "github__merge_pull_request");
    assert_eq!(
        first["signature"],
        "github__merge_pull_request(pull_request_id: string, title?: string, head?: string, base?: string)"
    );
    assert_eq!(first["inputSchema"]["required"], json!(["pull_request_id"]));
    assert_eq!(first["annotations"]["readOnlyHint"], false);
    assert!(
        first["description"]
            .as_str()
            .unwrap()
            .contains("Merge a GitHub pull request")
    );
    // It ranked what the same server would list without tool search: the catalogue and the
    // built-in tools.
    let unsearched = identity(
        &["admin"],
        ServerSpec {
            tool_search: false,
            ..searched(&["*"], &[])
        },
    );
    let listed = h.platform.list(Some(&unsearched)).len();
    assert!(listed > 500, "{listed}");
    assert_eq!(answer["searched"], listed);
}

#[tokio::test]
async fn a_prefix_less_server_is_searched_under_the_upstream_s_own_names() {
    let h = harness().await;
    let server = ServerSpec {
        name: "github".into(),
        upstream: Some("github".into()),
        prefix: false,
        tool_search: true,
        pinned: patterns(&["github__get_issue"]),
        ..Default::default()
    };
    let admin = identity(&["admin"], server);
    assert_eq!(
        names(&h.platform.list(Some(&admin))),
        ["find_tools", "call_tool", "get_issue"]
    );
    let answer = find(&h.platform, &admin, "merge a pull request", 1);
    assert_eq!(answer["tools"][0]["name"], "merge_pull_request");
    assert_eq!(answer["searched"], 50);
}

#[tokio::test]
async fn find_tools_without_a_caller_is_unauthenticated_and_bad_arguments_are_refused() {
    let h = harness().await;
    let refusal = h
        .platform
        .find_tools(None, json!({"query": "issues"}).as_object())
        .unwrap_err();
    assert_eq!(refusal.code, Code::Unauthenticated);
    let admin = identity(&["admin"], searched(&["*"], &[]));
    let refusal = h
        .platform
        .find_tools(
            Some(&admin),
            json!({"query": "issues", "limit": 500}).as_object(),
        )
        .unwrap_err();
    assert_eq!(refusal.code, Code::InvalidArguments);
    assert!(
        refusal.message.contains("from 1 to 20"),
        "{}",
        refusal.message
    );
}
