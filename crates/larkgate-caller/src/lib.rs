//! The script engine's only view of tools.
//!
//! The engine holds the interpreter and its bindings; it neither knows MCP nor decides whose
//! authority a run holds. It sees tools through [`Caller`]: a listing ([`Caller::tools`]), a
//! way to call one ([`Caller::call_tool`]), and a host call of a resource or prompt
//! ([`Caller::request`]). The production implementation is the in-memory MCP session of
//! `larkgate-session`; tests may use others.
//!
//! A call the platform refused arrives as [`CallError::Refused`] carrying a [`RefusalError`]:
//! the envelope's code, its retry-after, and the result's own text, so a refusal the engine does
//! not absorb reaches the script author in the tool's words. The engine acts on exactly one
//! code, [`Code::RateLimited`], and passes every other refusal through unchanged.
//!
//! The wire types every crate shares are re-exported here ([`wire`], from `larkgate-wire`): the
//! refusal [`Code`], the [`Envelope`] and the [`RunKind`], and the one table from a [`Code`] to
//! the JSON-RPC error code and HTTP status every edge answers with ([`answer`]). The write
//! barrier's one decision is here ([`barrier`]). [`Origin`], [`Source`] and [`Annotations`] are also the platform's
//! own types for what it writes into a listing's `_meta`: one definition for the writer and
//! the reader.

#![forbid(unsafe_code)]

pub mod barrier;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use larkgate_binding::{FieldShape, Map};
use serde::{Deserialize, Serialize};

pub use larkgate_wire::{
    self as wire, Category, Code, ENVELOPE_META_KEY, Envelope, RunKind, answer,
};

/// The key a result arrives under when the tool returned no structured content: its text,
/// verbatim.
pub const TEXT_RESULT_KEY: &str = "text";

/// The key a result's content blocks arrive under when it has other kinds than text (an
/// upstream's image, audio, resource link or embedded resource): every block, in order, as its
/// MCP JSON object (`{"type": "image", "mimeType": ..., "data": ...}`). Absent when the content
/// is only text, and when the structured result has a `content` field of its own.
pub const CONTENT_RESULT_KEY: &str = "content";

/// Adds a result's content `blocks` (MCP content JSON objects, in order) to `value` under
/// [`CONTENT_RESULT_KEY`] when some block is not text and `value` has no such field; within
/// `limits`, like the rest of a result.
pub fn add_content(
    value: &mut Map,
    blocks: &[serde_json::Value],
    limits: larkgate_binding::Limits,
) -> larkgate_binding::Result<()> {
    let only_text = blocks.iter().all(|block| block["type"] == "text");
    if only_text || value.contains_key(CONTENT_RESULT_KEY) {
        return Ok(());
    }
    let wrapped = serde_json::Map::from_iter([(
        CONTENT_RESULT_KEY.to_owned(),
        serde_json::Value::Array(blocks.to_vec()),
    )]);
    value.extend(larkgate_binding::from_json_object(&wrapped, limits)?);
    Ok(())
}

/// Where a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A typed capability built into larkgate (`kv_get`).
    Capability,
    /// A platform tool (approvals, scripts, runs).
    Platform,
    /// A tool of a federated MCP server (`<alias>__<tool>`).
    Upstream,
    /// A published script (`script__<name>`).
    Script,
}

/// A tool's origin, as carried in its listing's `_meta`. The way from a listed name back to
/// the origin is this record, never string splitting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// What kind of tool it is.
    pub source: Source,
    /// The upstream alias or script name; `None` for capabilities and platform tools.
    pub alias: Option<String>,
    /// The tool's name at its origin (`search-issues` for `github__search-issues`).
    pub original_name: String,
}

/// MCP tool annotations, as declared. They are claims by whoever implements the tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// `readOnlyHint`
    pub read_only: Option<bool>,
    /// `destructiveHint`
    pub destructive: Option<bool>,
    /// `idempotentHint`
    pub idempotent: Option<bool>,
    /// `openWorldHint`
    pub open_world: Option<bool>,
}

/// One tool of a session's listing: only tools this session may call are listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The MCP-facing name.
    pub name: String,
    /// A short human title, if any.
    pub title: Option<String>,
    /// The description, if any.
    pub description: Option<String>,
    /// The JSON Schema of the arguments.
    pub input_schema: serde_json::Value,
    /// The input shape, for tools that have one (capabilities bind through their plans).
    pub input_shape: Option<Vec<FieldShape>>,
    /// The Starlark signature, for tools that have one.
    pub signature: Option<String>,
    /// Annotations as declared.
    pub annotations: Annotations,
    /// Where the tool comes from.
    pub origin: Origin,
}

/// A call the platform refused, read from its envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct RefusalError {
    /// The envelope's code.
    pub code: Code,
    /// How long to wait before retrying, when the refusal says.
    pub retry_after: Option<Duration>,
    /// For `approval_required` and `approval_denied`: the approval's id.
    pub approval_id: Option<String>,
    /// The result's own text: what [`Display`](fmt::Display) shows.
    pub text: String,
}

impl fmt::Display for RefusalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl RefusalError {
    /// A refusal with `code` and the tool's `text`, nothing else.
    pub fn new(code: Code, text: impl Into<String>) -> Self {
        RefusalError {
            code,
            retry_after: None,
            approval_id: None,
            text: text.into(),
        }
    }

    /// Whether this is the one refusal the engine paces on.
    pub fn is_rate_limited(&self) -> bool {
        self.code == Code::RateLimited
    }
}

/// Why a call did not return a result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The platform refused the call; the refusal is data.
    #[error(transparent)]
    Refused(#[from] RefusalError),
    /// The session itself failed (closed, broken, or answered something unreadable).
    #[error("the tool session failed: {0}")]
    Transport(String),
}

/// What a host call asks for: a tool call, a resource read or a prompt get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// `tools/call`: the name is the tool's.
    #[default]
    Tool,
    /// `resources/read`: the name is the resource's larkgate URI; no arguments.
    Resource,
    /// `prompts/get`: the name is the prompt's; the arguments are strings.
    Prompt,
}

/// The engine's view of tools. See the crate documentation.
pub trait Caller: Send + Sync {
    /// This session's listing: exactly the tools it may call.
    fn tools(&self) -> impl Future<Output = Result<Vec<ToolInfo>, CallError>> + Send;

    /// Calls `name` with `arguments`; returns the structured result as a map, or, for a tool
    /// that returned only text, `{"text": <the text>}`.
    fn call_tool(
        &self,
        name: &str,
        arguments: Map,
    ) -> impl Future<Output = Result<Map, CallError>> + Send;

    /// A host call of any [`Target`]: a tool call as [`Caller::call_tool`]; a resource read,
    /// answered `{"contents": [...]}`; a prompt get, answered `{"description": ...,
    /// "messages": [...]}` (each part as its MCP JSON). A session that serves only tools
    /// refuses the others as `not_found`.
    fn request(
        &self,
        target: Target,
        name: &str,
        arguments: Map,
    ) -> impl Future<Output = Result<Map, CallError>> + Send {
        async move {
            match target {
                Target::Tool => self.call_tool(name, arguments).await,
                Target::Resource | Target::Prompt => Err(CallError::Refused(RefusalError::new(
                    Code::NotFound,
                    format!("this session serves no resources or prompts, so not {name}"),
                ))),
            }
        }
    }

    /// [`Caller::request`] with arguments that arrive as JSON, as a script worker's host call
    /// does. The default converts them to a map within `limits` and makes the request; a
    /// caller that sends JSON on (a session) passes them through unconverted, since whoever
    /// receives them converts and binds them again, with authority.
    fn request_json(
        &self,
        target: Target,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        limits: larkgate_binding::Limits,
    ) -> impl Future<Output = Result<Map, CallError>> + Send {
        async move {
            let map = larkgate_binding::from_json_object(&arguments, limits).map_err(|e| {
                CallError::Refused(RefusalError::new(Code::InvalidArguments, e.to_string()))
            })?;
            self.request(target, name, map).await
        }
    }
}

#[cfg(test)]
mod tests {
    use larkgate_binding::{Limits, Map, Value};
    use serde_json::json;

    use super::{CONTENT_RESULT_KEY, CallError, Caller, Code, Target, ToolInfo, add_content};

    fn text_value() -> Map {
        Map::from([("text".to_owned(), Value::from("a caption"))])
    }

    #[test]
    fn content_is_added_only_beside_other_kinds_than_text_and_never_over_a_field() {
        let text = json!({"type": "text", "text": "a caption"});
        let image = json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0K"});
        let cases: Vec<(&str, Map, Vec<serde_json::Value>, bool)> = vec![
            ("only text", text_value(), vec![text.clone()], false),
            ("no content", text_value(), vec![], false),
            (
                "an image",
                text_value(),
                vec![text.clone(), image.clone()],
                true,
            ),
            (
                "a structured `content` field of its own",
                Map::from([(CONTENT_RESULT_KEY.to_owned(), Value::from("kept"))]),
                vec![image.clone()],
                false,
            ),
        ];
        for (case, value, blocks, added) in cases {
            let mut changed = value.clone();
            add_content(&mut changed, &blocks, Limits::default()).unwrap();
            if added {
                let content = larkgate_binding::map_to_json(&changed)[CONTENT_RESULT_KEY].clone();
                assert_eq!(content, serde_json::Value::Array(blocks), "{case}");
                assert_eq!(changed["text"], value["text"], "{case}");
            } else {
                assert_eq!(changed, value, "{case}");
            }
        }
    }

    #[test]
    fn content_over_the_limits_is_an_error_not_a_truncation() {
        let image = json!({"type": "image", "mimeType": "image/png", "data": "x".repeat(2048)});
        let mut value = text_value();
        let small = Limits::new(64, 1000, 1024).unwrap();
        let error = add_content(&mut value, &[image], small).unwrap_err();
        assert!(error.to_string().contains("bytes"), "{error}");
        assert_eq!(value, text_value(), "nothing was added");
    }

    /// A caller that answers every request with the arguments it was given.
    struct Echo;

    impl Caller for Echo {
        async fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
            Ok(Vec::new())
        }

        async fn call_tool(&self, _name: &str, arguments: Map) -> Result<Map, CallError> {
            Ok(arguments)
        }
    }

    /// Runs a future that never waits (the callers here answer at once).
    fn now<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the future waited"),
        }
    }

    #[test]
    fn json_arguments_reach_a_caller_of_values_converted_within_the_limits() {
        let arguments = json!({"city": "Oslo", "days": [1, 2, 3]});
        let serde_json::Value::Object(object) = arguments.clone() else {
            unreachable!()
        };
        let answer = now(Echo.request_json(Target::Tool, "weather", object, Limits::default()));
        assert_eq!(
            serde_json::Value::Object(larkgate_binding::map_to_json(&answer.unwrap())),
            arguments
        );

        let serde_json::Value::Object(deep) = json!({"a": {"b": {"c": {"d": 1}}}}) else {
            unreachable!()
        };
        let shallow = Limits::new(2, 1000, 1024).unwrap();
        match now(Echo.request_json(Target::Tool, "weather", deep, shallow)) {
            Err(CallError::Refused(refusal)) => {
                assert_eq!(refusal.code, Code::InvalidArguments);
                assert!(refusal.text.contains("deep"), "{}", refusal.text);
            }
            other => panic!("{other:?}"),
        }
    }
}
