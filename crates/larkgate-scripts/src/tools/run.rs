//! Running scripts as tools: `script_run_draft`, which reads its own arguments (a map of
//! arbitrary values), and the `script__<name>` tool of each published script.

use std::sync::{Arc, Weak};

use larkgate_binding::{Map, Value};
use larkgate_platform::access::AUTHORS;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::identity::CallContext;
use larkgate_platform::registry::{
    Origin, SCRIPT_NAMESPACE, Source, ToolAnnotations, ToolHandler, ToolSpec, script_tool_name,
};
use larkgate_store::ScriptVersion;

use crate::{RunRequest, Scripts, check, upgrade};

use super::{Tool, object};

/// What a finished run answers with: its result, what it printed, and its id.
fn run_output_schema() -> serde_json::Map<String, serde_json::Value> {
    object(serde_json::json!({
        "type": "object",
        "properties": {
            "result": {"description": "main's return value"},
            "printed": {"type": "string", "description": "what the script printed"},
            "run_id": {"type": "string", "description": "the run's id, for run_get"},
            "intended_writes": {
                "type": "array",
                "description": "a review run's calls to tools that may write, recorded instead of made",
                "items": {
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string"},
                        "arguments": {"type": "object"}
                    },
                    "required": ["tool", "arguments"]
                }
            }
        },
        "required": ["result", "printed", "run_id"]
    }))
}

pub(super) fn run_draft_spec() -> ToolSpec {
    ToolSpec {
        title: Some("Run a draft".to_owned()),
        description: "Runs a draft as you, with read-only tools only (a call to any other tool \
                      is refused with write_barrier): your saved draft `name`, or `source` \
                      given inline. `args` are main's keyword arguments. With review=true, a \
                      call to a tool that may write is not refused but recorded and answered \
                      {\"intercepted\": true, \"tool\": NAME, \"write\": N} instead of being \
                      made, and the answer lists these intended writes: what publishing would \
                      let the script do. Answers main's result, what it printed and the run \
                      id; a failed run is refused with its own code."
            .to_owned(),
        input_schema: object(serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "your saved draft's name"},
                "source": {"type": "string", "description": "Starlark source to run instead"},
                "args": {"type": "object", "description": "main's keyword arguments"},
                "review": {
                    "type": "boolean",
                    "description": "record calls to tools that may write instead of refusing them"
                }
            },
            "additionalProperties": false
        })),
        output_schema: Some(run_output_schema()),
        annotations: ToolAnnotations {
            read_only: Some(false),
            destructive: Some(false),
            idempotent: Some(false),
            open_world: Some(false),
        },
        signature: Some(
            "script_run_draft(*, name: str | None = None, source: str | None = None, \
             args: dict[str, any] | None = None, review: bool = False) -> struct(result: any, \
             printed: str, run_id: str, intended_writes: list | None)"
                .to_owned(),
        ),
        roles: Some(AUTHORS),
        ..ToolSpec::new(
            "script_run_draft".to_owned(),
            Origin {
                source: Source::Platform,
                alias: None,
                original_name: "script_run_draft".to_owned(),
            },
        )
    }
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::new(Code::InvalidArguments, message).with_hint(
        "call script_run_draft(name=\"your_draft\", args={...}) or \
         script_run_draft(source=\"def main(*): ...\", args={...})",
    )
}

fn text_argument(arguments: &Map, key: &str) -> Result<Option<String>, Refusal> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.to_string())),
        Some(other) => Err(invalid(format!(
            "script_run_draft(): `{key}` must be a string, got {}",
            other.type_name()
        ))),
    }
}

/// `script_run_draft`: its arguments are a map of arbitrary values, which the flat input
/// shapes of typed tools cannot say, so it reads them itself.
pub(super) struct RunDraft(pub(super) Weak<Scripts>);

#[async_trait::async_trait]
impl ToolHandler for RunDraft {
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal> {
        let scripts = upgrade(&self.0)?;
        if let Some(unknown) = arguments
            .keys()
            .find(|k| !matches!(k.as_str(), "name" | "source" | "args" | "review"))
        {
            return Err(invalid(format!(
                "script_run_draft() has no argument `{unknown}`"
            )));
        }
        let args = match arguments.get("args") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Map(map)) => map.clone(),
            Some(other) => {
                return Err(invalid(format!(
                    "script_run_draft(): `args` must be an object, got {}",
                    other.type_name()
                )));
            }
        };
        let review = match arguments.get("review") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(review)) => *review,
            Some(other) => {
                return Err(invalid(format!(
                    "script_run_draft(): `review` must be true or false, got {}",
                    other.type_name()
                )));
            }
        };
        let actor = context.identity.run.principal.clone();
        let (name, saved, source) = match (
            text_argument(&arguments, "name")?,
            text_argument(&arguments, "source")?,
        ) {
            (Some(name), None) => {
                let draft = scripts.own_draft(&actor, &name).await?;
                (name, true, draft.source)
            }
            (None, Some(source)) => ("draft".to_owned(), false, source),
            _ => {
                return Err(invalid(
                    "script_run_draft() needs exactly one of `name` and `source`",
                ));
            }
        };
        let mut request = RunRequest::draft(
            &actor,
            name,
            saved,
            source,
            args,
            context.identity.run.depth + 1,
        );
        request.chain = context.identity.run.chain.then(&actor.id, &actor.id);
        if review {
            request = request.reviewing();
        }
        request.conversation = context.conversation.clone();
        let finished = scripts.run(request).await?;
        finished_output(finished)
    }
}

fn finished_output(finished: crate::Finished) -> Result<Map, Refusal> {
    match &finished.outcome {
        Ok(value) => {
            let mut out = Map::new();
            out.insert("result".to_owned(), value.clone());
            out.insert("printed".to_owned(), Value::from(finished.printed.as_str()));
            out.insert(
                "run_id".to_owned(),
                Value::from(finished.record.id.as_str()),
            );
            if let Some(review) = &finished.review {
                let writes = serde_json::to_value(&review.intended_writes).map_err(|e| {
                    Refusal::internal("the intended writes could not be answered", e)
                })?;
                let writes =
                    larkgate_binding::from_json(&writes, larkgate_binding::Limits::default())
                        .map_err(|e| {
                            Refusal::internal("the intended writes could not be answered", e)
                        })?;
                out.insert("intended_writes".to_owned(), writes);
            }
            Ok(out)
        }
        Err(error) => Err(finished.refusal(error)),
    }
}

/// A published script's tool.
struct ScriptTool {
    scripts: Weak<Scripts>,
    name: String,
}

#[async_trait::async_trait]
impl ToolHandler for ScriptTool {
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal> {
        let scripts = upgrade(&self.scripts)?;
        let mut request = scripts
            .published_run(&self.name, arguments, &context.identity.run)
            .await?;
        request.conversation = context.conversation.clone();
        finished_output(scripts.run(request).await?)
    }
}

/// The tool `script__<name>` of a published version: input schema from `main`'s parameters,
/// description from its docstring, classified write.
pub(crate) fn script_tool(
    scripts: Weak<Scripts>,
    version: &ScriptVersion,
) -> Result<Tool, Refusal> {
    let entry = check(&version.name, &version.source)?;
    let name = &version.name;
    let description = entry.description.clone().unwrap_or_else(|| {
        format!(
            "Runs the published script {name} (version {}).",
            version.version
        )
    });
    let spec = ToolSpec {
        title: Some(name.clone()),
        description,
        input_schema: object(entry.input.json_schema()),
        output_schema: Some(run_output_schema()),
        annotations: ToolAnnotations {
            read_only: Some(false),
            destructive: None,
            idempotent: Some(false),
            open_world: None,
        },
        input_shape: Some(entry.input.to_fields()),
        signature: Some(entry.input.signature(
            &format!("{SCRIPT_NAMESPACE}.{name}"),
            "struct(result: any, printed: str, run_id: str)",
        )),
        ..ToolSpec::new(
            script_tool_name(name),
            Origin {
                source: Source::Script,
                alias: Some(SCRIPT_NAMESPACE.to_owned()),
                original_name: name.clone(),
            },
        )
    };
    let handler = ScriptTool {
        scripts,
        name: name.clone(),
    };
    Ok((spec, Arc::new(handler)))
}
