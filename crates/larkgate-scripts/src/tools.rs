//! The script lifecycle as MCP tools: the platform tools (`script_save_draft`,
//! `script_run_draft`, `script_publish`, `script_list`, `script_history`, `run_get`) and one
//! `script__<name>` tool per published script.
//!
//! Platform tools are visible and callable by fixed roles (see [`super`]), whatever the policy
//! says; script tools are ordinary tools under the policy (`script__*` patterns), classified
//! write, so a draft run cannot call them.

use std::sync::{Arc, Weak};

use larkgate_binding::{Map, Value};
use larkgate_platform::access::{AUTHORS, PUBLISHERS, READERS};
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::identity::CallContext;
use larkgate_platform::registry::{
    Origin, RegistryError, SCRIPT_NAMESPACE, Source, ToolAnnotations, ToolHandler, ToolSpec,
    script_tool_name,
};
use larkgate_platform::review::IntendedWrite;
use larkgate_platform::typed::{Annotations, CapabilityInfo, Declared, HandlerFn, TypedCapability};
use larkgate_store::{Run, ScriptPin, ScriptVersion};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{RunRequest, Scripts, check, upgrade};

type Tool = (ToolSpec, Arc<dyn ToolHandler>);

fn annotations(read_only: bool, idempotent: bool) -> Annotations {
    Annotations {
        read_only,
        destructive: false,
        idempotent,
        open_world: false,
    }
}

fn typed<I, O>(
    info: CapabilityInfo,
    roles: &'static [&'static str],
    handler: HandlerFn<I, O>,
) -> Result<Tool, RegistryError>
where
    I: serde::de::DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + Send + 'static,
{
    let declared = Declared::new(info).map_err(|e| RegistryError::InvalidShape {
        name: info.name.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(TypedCapability::new(declared, handler)
        .platform(roles)
        .into_tool())
}

/// Input of `script_save_draft`.
#[derive(Debug, Deserialize, JsonSchema)]
struct SaveDraftInput {
    /// The script's name: a lowercase letter, then lowercase letters, digits and `_`.
    name: String,
    /// The Starlark source, with `def main(*, ...)`.
    source: String,
}

/// Output of `script_save_draft`.
#[derive(Debug, Serialize, JsonSchema)]
struct SavedDraft {
    /// The script's name.
    name: String,
    /// Its author (the caller).
    author: String,
    /// `main`'s signature.
    signature: String,
    /// `main`'s docstring.
    description: Option<String>,
    /// What the checks at save time found that does not refuse the save (`FILE:LINE:COLUMN:
    /// ...`): an unused assignment, a variable that may be unassigned.
    warnings: Vec<String>,
}

/// Input of `script_history`.
#[derive(Debug, Deserialize, JsonSchema)]
struct NameInput {
    /// The script's name.
    name: String,
}

/// Input of `script_publish`.
#[derive(Debug, Deserialize, JsonSchema)]
struct PublishInput {
    /// The draft's name.
    name: String,
    /// Only show what publishing would change (the diff and the review run's intended
    /// writes); publish nothing. Default false.
    dry_run: Option<bool>,
}

/// Output of `script_publish`: the version (as `script_history` lists one), and what was
/// shown of it.
#[derive(Debug, Serialize, JsonSchema)]
struct PublishOutput {
    /// Whether a version was published (false for a dry run).
    published: bool,
    /// The script's name.
    name: String,
    /// The version published (for a dry run: the version publishing would make).
    version: i64,
    /// The tool it is served as.
    tool: String,
    /// Who wrote it.
    author: String,
    /// The author's roles, captured at publish time (null for a dry run).
    author_roles: Option<Vec<String>>,
    /// Who published it (null for a dry run).
    publisher: Option<String>,
    /// SHA-256 of its source.
    hash: String,
    /// When (Unix ms; null for a dry run).
    published_at_ms: Option<i64>,
    /// The latest version before it, if any.
    previous_version: Option<i64>,
    /// A unified diff from the previous version's source (empty when unchanged; null for a
    /// first version).
    diff: Option<String>,
    /// The newest successful review run of exactly this source, with the calls it would have
    /// made to tools that may write; null when it was never reviewed.
    review: Option<crate::ReviewSummary>,
    /// The upstream tools the version refers to, with the definitions it is published against:
    /// its runs may call no other upstream tool, and it is suspended while one of these waits
    /// for an admin's review of a changed definition.
    upstream_tools: Vec<PinnedTool>,
}

/// An upstream tool a published version refers to.
#[derive(Debug, Serialize, JsonSchema)]
struct PinnedTool {
    /// The tool's name.
    tool: String,
    /// SHA-256 of its approved definition when the version was published.
    definition_sha256: String,
}

impl From<&ScriptPin> for PinnedTool {
    fn from(pin: &ScriptPin) -> Self {
        PinnedTool {
            tool: pin.tool.clone(),
            definition_sha256: pin.hash.clone(),
        }
    }
}

impl PublishOutput {
    fn new(version: Option<ScriptVersion>, preview: crate::PublishPreview) -> Self {
        let next = preview.previous_version.map_or(1, |v| v + 1);
        PublishOutput {
            published: version.is_some(),
            tool: script_tool_name(&preview.name),
            version: i64::from(version.as_ref().map_or(next, |v| v.version)),
            author_roles: version.as_ref().map(|v| v.author_roles.clone()),
            publisher: version.as_ref().map(|v| v.publisher.clone()),
            published_at_ms: version.as_ref().map(|v| v.published_at_ms),
            name: preview.name,
            author: preview.author,
            hash: preview.hash,
            previous_version: preview.previous_version.map(i64::from),
            diff: preview.diff,
            review: preview.review,
            upstream_tools: preview.pins.iter().map(PinnedTool::from).collect(),
        }
    }
}

/// A published version, as listed.
#[derive(Debug, Serialize, JsonSchema)]
struct VersionView {
    /// The script's name.
    name: String,
    /// The version number (1, 2, ...).
    version: i64,
    /// The tool it is served as.
    tool: String,
    /// Who wrote it.
    author: String,
    /// The author's roles, captured at publish time: the roles its runs carry.
    author_roles: Vec<String>,
    /// Who published it.
    publisher: String,
    /// SHA-256 of its source.
    hash: String,
    /// When (Unix ms).
    published_at_ms: i64,
    /// The upstream tools it was published against (null for a version published before
    /// larkgate recorded them).
    upstream_tools: Option<Vec<String>>,
}

impl From<ScriptVersion> for VersionView {
    fn from(v: ScriptVersion) -> Self {
        VersionView {
            tool: script_tool_name(&v.name),
            name: v.name,
            version: i64::from(v.version),
            author: v.author,
            author_roles: v.author_roles,
            publisher: v.publisher,
            hash: v.hash,
            published_at_ms: v.published_at_ms,
            upstream_tools: v
                .pins
                .map(|pins| pins.into_iter().map(|p| p.tool).collect()),
        }
    }
}

/// A draft, as listed.
#[derive(Debug, Serialize, JsonSchema)]
struct DraftView {
    /// The script's name.
    name: String,
    /// Its author.
    author: String,
    /// When it was last saved (Unix ms).
    updated_at_ms: i64,
}

/// Input of `script_list`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ListInput {}

/// Output of `script_list`.
#[derive(Debug, Serialize, JsonSchema)]
struct ScriptList {
    /// Every draft, by name.
    drafts: Vec<DraftView>,
    /// The latest version of every published script, by name.
    published: Vec<VersionView>,
}

/// Output of `script_history`.
#[derive(Debug, Serialize, JsonSchema)]
struct History {
    /// Every version, oldest first.
    versions: Vec<VersionView>,
}

/// Input of `runs_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
struct RunsListInput {
    /// Only runs of this script.
    script: Option<String>,
    /// Only runs that ran as this principal (`script:NAME` for published runs).
    principal: Option<String>,
    /// Only runs with this status: `running`, `succeeded` or `failed`.
    status: Option<String>,
    /// Only runs started at or after this time (Unix ms).
    since_ms: Option<i64>,
    /// At most this many (default 50, at most 1000).
    limit: Option<i64>,
}

/// Output of `runs_list`.
#[derive(Debug, Serialize, JsonSchema)]
struct RunsListOutput {
    /// The runs, newest first.
    runs: Vec<RunView>,
}

/// Input of `run_get`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RunIdInput {
    /// The run's id.
    run_id: String,
}

/// A run record: the one shape of `run_get`, `runs_list`, `larkgate runs show` and `larkgate
/// runs list --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RunView {
    /// The run's id.
    pub run_id: String,
    /// The script's name, for saved drafts and published scripts.
    pub script: Option<String>,
    /// The published version.
    pub version: Option<i64>,
    /// SHA-256 of the source that ran.
    pub hash: String,
    /// `draft`, `review` or `published`.
    pub kind: String,
    /// Who it ran as.
    pub principal: String,
    /// Who started it.
    pub started_by: Option<String>,
    /// `running`, `succeeded` or `failed`.
    pub status: String,
    /// `main`'s result, when it succeeded.
    pub result: Option<serde_json::Value>,
    /// The refusal or error code, when it failed.
    pub error_code: Option<String>,
    /// The error, when it failed.
    pub error: Option<String>,
    /// Tool calls made.
    pub tool_calls: i64,
    /// Times it waited out a `rate_limited` refusal.
    pub paces: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// The worker's peak resident memory.
    pub peak_memory_bytes: Option<i64>,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
    /// When it finished.
    pub finished_at_ms: Option<i64>,
    /// For a review run: the calls it would have made to tools that may write, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_writes: Option<Vec<IntendedWrite>>,
    /// For a review run: every tool it called, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools_called: Option<Vec<String>>,
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl From<Run> for RunView {
    fn from(run: Run) -> Self {
        let review = crate::review_of(&run);
        let (intended_writes, tools_called) = match review {
            Some(review) => (
                Some(review.intended_writes),
                Some(review.tools_called.into_iter().collect()),
            ),
            None => (None, None),
        };
        RunView {
            run_id: run.id,
            script: run.script,
            version: run.version.map(i64::from),
            hash: run.hash,
            kind: run.kind,
            principal: run.principal,
            started_by: run.started_by,
            status: run.status.as_str().to_owned(),
            result: run.result.and_then(|r| serde_json::from_str(&r).ok()),
            error_code: run.error_code,
            error: run.error,
            tool_calls: signed(run.stats.tool_calls),
            paces: signed(run.stats.paces),
            duration_ms: signed(run.stats.duration_ms),
            peak_memory_bytes: run.stats.peak_memory_bytes.map(signed),
            started_at_ms: run.started_at_ms,
            finished_at_ms: run.finished_at_ms,
            intended_writes,
            tools_called,
        }
    }
}

/// The platform tools of the lifecycle.
pub(crate) fn platform_tools(scripts: Weak<Scripts>) -> Result<Vec<Tool>, RegistryError> {
    let mut tools = Vec::new();
    let s = scripts.clone();
    tools.push(typed(
        CapabilityInfo {
            name: "script_save_draft",
            title: "Save a draft script",
            description: "Saves Starlark source as your draft NAME (created, or replaced if you \
                          wrote it), after checking that it parses and has a valid \
                          `def main(*, ...)`, that every name it uses is defined and every tool it names \
                          literally is one you may call, with keywords it takes (errors refuse the \
                          save; warnings are answered). Run it with script_run_draft; a publisher makes it \
                          a tool with script_publish.",
            annotations: annotations(false, true),
        },
        AUTHORS,
        Arc::new(move |ctx: CallContext, input: SaveDraftInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let actor = &ctx.identity.run.principal;
                let saved = scripts
                    .save_draft(actor, &input.name, &input.source)
                    .await?;
                Ok(SavedDraft {
                    name: saved.draft.name,
                    author: saved.draft.author,
                    signature: saved.signature,
                    description: saved.description,
                    warnings: saved.warnings,
                })
            })
        }),
    )?);
    tools.push((run_draft_spec(), Arc::new(RunDraft(scripts.clone()))));
    let s = scripts.clone();
    tools.push(typed(
        CapabilityInfo {
            name: "script_publish",
            title: "Publish a script",
            description: "Publishes the draft NAME as its next immutable version and serves it \
                          as the tool script__NAME. Its runs carry the draft author's roles as \
                          they are now; you are recorded as the publisher. Answers the diff \
                          from the previous version and the intended writes of the newest \
                          review run of exactly this source (script_run_draft with \
                          review=true); dry_run=true shows them without publishing.",
            annotations: annotations(false, false),
        },
        PUBLISHERS,
        Arc::new(move |ctx: CallContext, input: PublishInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let actor = &ctx.identity.run.principal;
                if input.dry_run == Some(true) {
                    let preview = scripts.publish_preview(actor, &input.name).await?;
                    return Ok(PublishOutput::new(None, preview));
                }
                let (version, preview) = scripts.publish(actor, &input.name).await?;
                Ok(PublishOutput::new(Some(version), preview))
            })
        }),
    )?);
    let s = scripts.clone();
    tools.push(typed(
        CapabilityInfo {
            name: "script_list",
            title: "List scripts",
            description: "Lists every draft and the latest version of every published script.",
            annotations: annotations(true, true),
        },
        READERS,
        Arc::new(move |_ctx: CallContext, _input: ListInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let drafts = scripts.drafts().await?;
                let published = scripts.published().await?;
                Ok(ScriptList {
                    drafts: drafts
                        .into_iter()
                        .map(|d| DraftView {
                            name: d.name,
                            author: d.author,
                            updated_at_ms: d.updated_at_ms,
                        })
                        .collect(),
                    published: published.into_iter().map(Into::into).collect(),
                })
            })
        }),
    )?);
    let s = scripts.clone();
    tools.push(typed(
        CapabilityInfo {
            name: "script_history",
            title: "Script history",
            description: "Lists every published version of NAME, oldest first, with its \
                          author, captured roles, publisher and source hash.",
            annotations: annotations(true, true),
        },
        READERS,
        Arc::new(move |_ctx: CallContext, input: NameInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let versions = scripts.history(&input.name).await?;
                Ok(History {
                    versions: versions.into_iter().map(Into::into).collect(),
                })
            })
        }),
    )?);
    let s = scripts.clone();
    tools.push(typed(
        CapabilityInfo {
            name: "runs_list",
            title: "List runs",
            description: "Lists run records, newest first: the runs you started and the runs \
                          that ran as you (an administrator's: every run), filtered by script, \
                          principal, status and start time.",
            annotations: annotations(true, true),
        },
        READERS,
        Arc::new(move |ctx: CallContext, input: RunsListInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let filter = crate::RunsFilter {
                    script: input.script,
                    principal: input.principal,
                    status: input.status,
                    since_ms: input.since_ms,
                    limit: input.limit,
                };
                let runs = scripts
                    .run_records(&ctx.identity.run.principal, &filter)
                    .await?;
                Ok(RunsListOutput {
                    runs: runs.into_iter().map(RunView::from).collect(),
                })
            })
        }),
    )?);
    let s = scripts;
    tools.push(typed(
        CapabilityInfo {
            name: "run_get",
            title: "Read a run",
            description: "Reads a run record: status, result or error, and what it used. You \
                          may read runs you started and runs that ran as you.",
            annotations: annotations(true, true),
        },
        READERS,
        Arc::new(move |ctx: CallContext, input: RunIdInput| {
            let scripts = s.clone();
            Box::pin(async move {
                let scripts = upgrade(&scripts)?;
                let run = scripts
                    .run_record(&ctx.identity.run.principal, &input.run_id)
                    .await?;
                Ok(RunView::from(run))
            })
        }),
    )?);
    Ok(tools)
}

fn object(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

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

fn run_draft_spec() -> ToolSpec {
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
struct RunDraft(Weak<Scripts>);

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
        let finished = scripts.run(request).await?;
        finished_output(finished)
    }
}

fn finished_output(finished: super::Finished) -> Result<Map, Refusal> {
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
        let request = scripts
            .published_run(&self.name, arguments, &context.identity.run)
            .await?;
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
