//! Tool search: a virtual server with `tool_search = true` lists two tools, `find_tools` and
//! `call_tool`, and the tools it pins, rather than every tool it serves. A model finds the
//! tools its task needs by asking, and pays for the few it is answered instead of the hundreds
//! an organisation federates, on every turn.
//!
//! - `find_tools(query, limit)` ranks the tools the caller may call through the server (the
//!   same set its full listing would show, under the same names) by their larkgate names
//!   (the upstream's alias included), titles, descriptions and parameters with BM25
//!   ([`bm25`]), and answers the best `limit` (default
//!   [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`]), each with a one-line signature and its input
//!   and output schemas and annotations, as a listing would give them.
//! - `call_tool(name, arguments)` is a call of the tool `name` with `arguments`: it is the same
//!   request with that name and those arguments from there on, so it crosses the same pipeline
//!   (authorize against the roles and the server, write barrier, rate limit, approval gate,
//!   audit under the tool's own name), and a tool it is not allowed is refused as a direct call
//!   of it would be.
//!
//! What a search can and cannot do (threat model): a search is a listing and shows nothing a
//! listing would not. It ranks only what the caller may see, so a tool the caller may not see
//! neither appears nor changes the ranking of the others (each tool's text is analysed once, but
//! the statistics the ranking weighs terms by are those of the caller's tools alone). It
//! is not audited, as a listing is not; what `call_tool` calls is. The names `find_tools` and
//! `call_tool` are the search's own on such a server: a served tool of either name is reached
//! through `call_tool` and not listed. Scripts' own sessions are not a virtual server's, so a
//! script's host calls see its namespaces whole.

pub mod bm25;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::envelope::{Code, Refusal};
use crate::registry::{McpContent, Registry, ToolOutput};

/// The search's tool that ranks tools.
pub const FIND_TOOLS: &str = "find_tools";
/// The search's tool that calls one.
pub const CALL_TOOL: &str = "call_tool";
/// How many tools `find_tools` answers when not asked for a number.
pub const DEFAULT_LIMIT: usize = 5;
/// The most tools `find_tools` answers.
pub const MAX_LIMIT: usize = 20;
/// The longest query, in characters.
pub const MAX_QUERY: usize = 1000;

/// Whether `name` is one of the search's own tools.
pub fn is_search_tool(name: &str) -> bool {
    name == FIND_TOOLS || name == CALL_TOOL
}

/// The two tools a searched server lists before its pinned ones.
pub fn search_tools() -> [Tool; 2] {
    let find = Tool::new(
        FIND_TOOLS,
        format!(
            "Finds the tools of this server that fit a task: answers the best matches of the \
             query (words of what you want to do, or a tool's name), each with its signature \
             and its input schema. Call one with {CALL_TOOL}. This server has more tools than \
             it lists; search before you assume one is missing."
        ),
        object(json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What the tool should do, in a few words, or its name",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": format!("How many tools to answer (default {DEFAULT_LIMIT})"),
                },
            },
            "required": ["query"],
            "additionalProperties": false,
        })),
    )
    .with_raw_output_schema(object(json!({
        "type": "object",
        "properties": {
            "tools": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string" },
                        "signature": { "type": "string" },
                        "title": { "type": "string" },
                        "description": { "type": "string" },
                        "inputSchema": { "type": "object" },
                        "outputSchema": { "type": "object" },
                        "annotations": { "type": "object" },
                    },
                    "required": ["name", "signature", "inputSchema"],
                },
            },
            "searched": {
                "type": "integer",
                "description": "How many tools the search ranked",
            },
        },
        "required": ["tools", "searched"],
    })))
    .annotate(
        ToolAnnotations::new()
            .read_only(true)
            .idempotent(true)
            .open_world(false)
            .destructive(false),
    );
    let call = Tool::new(
        CALL_TOOL,
        format!(
            "Calls a tool of this server that {FIND_TOOLS} found, by its name, with its \
             arguments as its input schema says. The answer is that tool's."
        ),
        object(json!({
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "The tool's name" },
                "arguments": {
                    "type": "object",
                    "description": "The tool's arguments",
                },
            },
            "required": ["name"],
            "additionalProperties": false,
        })),
    );
    [find, call]
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!("a schema written here is an object"),
    }
}

/// A checked `find_tools` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// What to search for.
    pub text: String,
    /// How many tools to answer.
    pub limit: usize,
}

impl Query {
    /// Reads a `find_tools` call's arguments, or says what is wrong with them.
    pub fn from_arguments(arguments: Option<&JsonObject>) -> Result<Query, Refusal> {
        let invalid = |message: String| {
            Refusal::new(Code::InvalidArguments, message).with_hint(format!(
                "call {FIND_TOOLS} with {{\"query\": \"words of the task\", \"limit\": \
                 {DEFAULT_LIMIT}}}"
            ))
        };
        let empty = JsonObject::new();
        let arguments = arguments.unwrap_or(&empty);
        if let Some(unexpected) = unexpected(arguments, FIND_TOOLS, ["query", "limit"]) {
            return Err(invalid(unexpected));
        }
        let text = match arguments.get("query") {
            Some(Value::String(text)) => text,
            Some(_) => return Err(invalid(format!("{FIND_TOOLS}: query must be a string"))),
            None => return Err(invalid(format!("{FIND_TOOLS} needs a query"))),
        };
        if text.chars().count() > MAX_QUERY {
            return Err(invalid(format!(
                "{FIND_TOOLS}: the query is longer than {MAX_QUERY} characters"
            )));
        }
        if bm25::terms(text).is_empty() {
            return Err(invalid(format!(
                "{FIND_TOOLS}: the query has no words to search by (it is empty, or only \
                 words as common as \"the\")"
            )));
        }
        let limit = match arguments.get("limit") {
            None | Some(Value::Null) => DEFAULT_LIMIT,
            Some(limit) => match limit.as_u64() {
                Some(limit) if (1..=MAX_LIMIT as u64).contains(&limit) => limit as usize,
                _ => {
                    return Err(invalid(format!(
                        "{FIND_TOOLS}: limit must be a whole number from 1 to {MAX_LIMIT}"
                    )));
                }
            },
        };
        Ok(Query {
            text: text.clone(),
            limit,
        })
    }
}

/// The weights of a tool's fields in the ranking: its name counts most, then its title, its
/// description and its parameters' names, then what its parameters are described as.
fn fields(tool: &Tool) -> Vec<(&str, f64)> {
    let mut fields = vec![(tool.name.as_ref(), 3.0)];
    if let Some(title) = &tool.title {
        fields.push((title.as_str(), 2.0));
    }
    if let Some(description) = &tool.description {
        fields.push((description.as_ref(), 1.0));
    }
    if let Some(Value::Object(properties)) = tool.input_schema.get("properties") {
        for (name, property) in properties {
            fields.push((name.as_str(), 1.0));
            if let Some(Value::String(description)) = property.get("description") {
                fields.push((description.as_str(), 0.5));
            }
        }
    }
    fields
}

/// A tool's document: what its ranking reads, analysed once.
pub fn document(tool: &Tool) -> bm25::Document {
    bm25::Document::new(fields(tool))
}

/// Each tool's document for one version of the registry, built when a search first meets that
/// version (every tool's, once) and kept until the tools change, so that a search analyses no
/// text but its query.
#[derive(Debug, Default)]
pub struct Documents {
    current: Mutex<Option<(Arc<Registry>, Arc<ByName>)>>,
}

/// The tools' documents, by larkgate name.
pub type ByName = HashMap<String, bm25::Document>;

impl Documents {
    /// The documents of `registry`'s tools, by larkgate name.
    pub fn of(&self, registry: &Arc<Registry>) -> Arc<ByName> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((of, documents)) = &*current
            && Arc::ptr_eq(of, registry)
        {
            return Arc::clone(documents);
        }
        let documents: Arc<ByName> = Arc::new(
            registry
                .iter()
                .map(|tool| (tool.spec.name.clone(), document(&tool.to_mcp())))
                .collect(),
        );
        *current = Some((Arc::clone(registry), Arc::clone(&documents)));
        documents
    }
}

/// The answer to `query` among the tools of `documents` (what the caller may call, of which
/// there are `documents.len()`): the best matches, each as `shown` gives the tool at its
/// position, as the caller's server shows it.
pub fn find(
    documents: &[&bm25::Document],
    query: &Query,
    shown: impl Fn(usize) -> Tool,
) -> ToolOutput {
    let found: Vec<Value> = bm25::rank(documents, &query.text, query.limit)
        .into_iter()
        .map(|(position, _)| described(&shown(position)))
        .collect();
    let answer = json!({ "tools": found, "searched": documents.len() });
    let text = serde_json::to_string(&answer).unwrap_or_default();
    ToolOutput {
        value: larkgate_binding::Map::new(),
        content: Some(McpContent {
            blocks: vec![rmcp::model::ContentBlock::text(text)],
            structured: Some(answer),
        }),
    }
}

/// A found tool as `find_tools` answers it.
fn described(tool: &Tool) -> Value {
    let mut described = serde_json::Map::new();
    described.insert("name".into(), json!(tool.name));
    described.insert("signature".into(), json!(signature(tool)));
    if let Some(title) = &tool.title {
        described.insert("title".into(), json!(title));
    }
    if let Some(description) = &tool.description {
        described.insert("description".into(), json!(description));
    }
    described.insert(
        "inputSchema".into(),
        Value::Object((*tool.input_schema).clone()),
    );
    if let Some(output) = &tool.output_schema {
        described.insert("outputSchema".into(), Value::Object((**output).clone()));
    }
    if let Some(annotations) = &tool.annotations
        && let Ok(annotations) = serde_json::to_value(annotations)
    {
        described.insert("annotations".into(), annotations);
    }
    Value::Object(described)
}

/// A tool's signature in one line, from its input schema: `name(required: type, optional?:
/// type)`, required parameters first.
pub fn signature(tool: &Tool) -> String {
    let required: Vec<&str> = match tool.input_schema.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut parameters: Vec<(bool, String)> = match tool.input_schema.get("properties") {
        Some(Value::Object(properties)) => properties
            .iter()
            .map(|(name, schema)| {
                let needed = required.contains(&name.as_str());
                let mark = if needed { "" } else { "?" };
                (!needed, format!("{name}{mark}: {}", type_of(schema)))
            })
            .collect(),
        _ => Vec::new(),
    };
    parameters.sort_by_key(|(optional, _)| *optional);
    let parameters: Vec<String> = parameters.into_iter().map(|(_, p)| p).collect();
    format!("{}({})", tool.name, parameters.join(", "))
}

/// A parameter's type as its schema gives it, in short.
fn type_of(schema: &Value) -> String {
    if let Some(Value::Array(values)) = schema.get("enum") {
        let values: Vec<String> = values.iter().take(8).map(Value::to_string).collect();
        return values.join(" | ");
    }
    match schema.get("type") {
        Some(Value::String(ty)) if ty == "array" => match schema.get("items") {
            Some(items) => format!("{}[]", type_of(items)),
            None => "array".to_owned(),
        },
        Some(Value::String(ty)) => ty.clone(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "any".to_owned(),
    }
}

/// What is wrong with `arguments` of `tool`, which takes the two keys `takes`, when it has
/// another: the first such key, cut to a bound.
fn unexpected(arguments: &JsonObject, tool: &str, takes: [&str; 2]) -> Option<String> {
    let unknown = arguments.keys().find(|k| !takes.contains(&k.as_str()))?;
    let unknown = crate::bounded::cut(unknown, 64);
    Some(format!(
        "{tool} takes {} and {}, not {unknown:?}",
        takes[0], takes[1]
    ))
}

/// The call a `call_tool` call stands for: its tool's name and arguments, or what is wrong
/// with it.
pub fn unwrap_call(arguments: Option<JsonObject>) -> Result<(String, Option<JsonObject>), Refusal> {
    let invalid = |message: String| {
        Refusal::new(Code::InvalidArguments, message).with_hint(format!(
            "call {CALL_TOOL} with {{\"name\": \"a tool {FIND_TOOLS} answered\", \"arguments\": \
             {{...}}}}"
        ))
    };
    let mut arguments = arguments.unwrap_or_default();
    if let Some(unexpected) = unexpected(&arguments, CALL_TOOL, ["name", "arguments"]) {
        return Err(invalid(unexpected));
    }
    let name = match arguments.remove("name") {
        Some(Value::String(name)) => name,
        Some(_) => return Err(invalid(format!("{CALL_TOOL}: name must be a string"))),
        None => return Err(invalid(format!("{CALL_TOOL} needs the name of a tool"))),
    };
    if is_search_tool(&name) {
        return Err(invalid(format!(
            "{CALL_TOOL} calls the tools {FIND_TOOLS} finds, not {name}: call {name} itself"
        )));
    }
    let inner = match arguments.remove("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(inner)) => Some(inner),
        Some(_) => return Err(invalid(format!("{CALL_TOOL}: arguments must be an object"))),
    };
    Ok((name, inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(value: Value) -> Option<JsonObject> {
        match value {
            Value::Object(object) => Some(object),
            Value::Null => None,
            _ => panic!("arguments are an object"),
        }
    }

    #[test]
    fn find_tools_refuses_what_it_cannot_search_by_and_says_what_to_write() {
        for (given, says) in [
            (json!(null), "needs a query"),
            (json!({}), "needs a query"),
            (json!({"query": 5}), "query must be a string"),
            (json!({"query": ""}), "no words to search by"),
            (json!({"query": "the of a"}), "no words to search by"),
            (
                json!({"query": "x".repeat(MAX_QUERY + 1)}),
                "longer than 1000 characters",
            ),
            (json!({"query": "issues", "limit": 0}), "from 1 to 20"),
            (json!({"query": "issues", "limit": 21}), "from 1 to 20"),
            (json!({"query": "issues", "limit": -1}), "from 1 to 20"),
            (json!({"query": "issues", "limit": 2.5}), "from 1 to 20"),
            (json!({"query": "issues", "limit": "5"}), "from 1 to 20"),
            (json!({"query": "issues", "top": 5}), "not \"top\""),
        ] {
            let refusal = Query::from_arguments(arguments(given.clone()).as_ref())
                .expect_err(&given.to_string());
            assert_eq!(refusal.code, Code::InvalidArguments, "{given}");
            assert!(
                refusal.message.contains(says),
                "{given}: {}",
                refusal.message
            );
            assert!(refusal.hint.as_deref().is_some_and(|h| h.contains("query")));
        }
        // A caller's key of any size is repeated cut to a bound, with the hash of the whole.
        let mut long = JsonObject::new();
        long.insert("k".repeat(5000), json!(1));
        long.insert("query".into(), json!("issues"));
        let refusal = Query::from_arguments(Some(&long)).unwrap_err();
        assert!(
            refusal.message.contains("(cut: 5000 bytes, sha256 "),
            "{}",
            refusal.message
        );
        assert!(refusal.message.len() < 300, "{}", refusal.message);
        let refusal = unwrap_call(Some(long)).unwrap_err();
        assert!(refusal.message.len() < 300, "{}", refusal.message);
        let query = Query::from_arguments(arguments(json!({"query": "issues"})).as_ref()).unwrap();
        assert_eq!(query.limit, DEFAULT_LIMIT);
        let query =
            Query::from_arguments(arguments(json!({"query": "issues", "limit": 20})).as_ref())
                .unwrap();
        assert_eq!(query.limit, 20);
    }

    #[test]
    fn call_tool_is_the_call_it_names_or_says_what_is_wrong() {
        let (name, inner) = unwrap_call(arguments(
            json!({"name": "kv_get", "arguments": {"key": "a"}}),
        ))
        .unwrap();
        assert_eq!(name, "kv_get");
        assert_eq!(inner, arguments(json!({"key": "a"})));
        assert_eq!(
            unwrap_call(arguments(json!({"name": "clock_now"}))).unwrap(),
            ("clock_now".to_owned(), None)
        );
        for (given, says) in [
            (json!(null), "needs the name"),
            (json!({"arguments": {}}), "needs the name"),
            (json!({"name": 3}), "name must be a string"),
            (
                json!({"name": "kv_get", "arguments": [1]}),
                "arguments must be an object",
            ),
            (
                json!({"name": "kv_get", "arguments": "key=a"}),
                "arguments must be an object",
            ),
            (json!({"name": "kv_get", "key": "a"}), "not \"key\""),
            (json!({"name": "call_tool"}), "call call_tool itself"),
            (json!({"name": "find_tools"}), "call find_tools itself"),
        ] {
            let refusal = unwrap_call(arguments(given.clone())).expect_err(&given.to_string());
            assert_eq!(refusal.code, Code::InvalidArguments, "{given}");
            assert!(
                refusal.message.contains(says),
                "{given}: {}",
                refusal.message
            );
        }
    }

    fn tool(name: &str, description: &str, schema: Value) -> Tool {
        Tool::new(name.to_owned(), description.to_owned(), object(schema))
    }

    #[test]
    fn signatures_put_required_parameters_first_and_name_their_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "state": {"enum": ["open", "closed"]},
                "owner": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "page": {"type": ["integer", "null"]},
                "anything": {},
            },
            "required": ["owner"],
        });
        let shown = signature(&tool("list_issues", "", schema));
        assert!(shown.starts_with("list_issues(owner: string, "), "{shown}");
        for part in [
            "state?: \"open\" | \"closed\"",
            "labels?: string[]",
            "page?: integer | null",
            "anything?: any",
        ] {
            assert!(shown.contains(part), "{shown} lacks {part}");
        }
        assert_eq!(
            signature(&tool("now", "", json!({"type": "object"}))),
            "now()"
        );
    }

    #[test]
    fn find_answers_the_best_matches_with_their_schemas() {
        let tools = [
            tool(
                "kv_get",
                "Reads a value by key",
                json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
            ),
            tool(
                "github__create_issue",
                "Opens an issue in a repository",
                json!({"type": "object"}),
            ),
            tool(
                "github__list_issues",
                "Lists a repository's issues",
                json!({"type": "object"}),
            ),
            tool(
                "slack__post_message",
                "Posts a message to a channel",
                json!({"type": "object"}),
            ),
        ];
        let documents: Vec<bm25::Document> = tools.iter().map(document).collect();
        let documents: Vec<&bm25::Document> = documents.iter().collect();
        let find = |query: &Query| find(&documents, query, |position| tools[position].clone());
        let query = Query {
            text: "open a new issue".into(),
            limit: 2,
        };
        let answer = find(&query);
        let structured = answer.content.as_ref().unwrap().structured.clone().unwrap();
        assert_eq!(structured["searched"], 4);
        let names: Vec<&str> = structured["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["github__create_issue", "github__list_issues"]);
        let query = Query {
            text: "read the value of a key".into(),
            limit: 5,
        };
        let answer = find(&query).content.unwrap().structured.unwrap();
        let first = &answer["tools"][0];
        assert_eq!(first["name"], "kv_get");
        assert_eq!(first["signature"], "kv_get(key: string)");
        assert_eq!(first["inputSchema"]["required"], json!(["key"]));
        let query = Query {
            text: "kubernetes pods".into(),
            limit: 5,
        };
        let answer = find(&query).content.unwrap().structured.unwrap();
        assert_eq!(answer["tools"], json!([]));
    }
}
