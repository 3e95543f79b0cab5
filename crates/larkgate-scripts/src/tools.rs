//! The script lifecycle as MCP tools: the platform tools (`script_save_draft`,
//! `script_run_draft`, `script_publish`, `script_list`, `script_history`, `run_get`) and one
//! `script__<name>` tool per published script.
//!
//! Platform tools are visible and callable by fixed roles (see [`super`]), whatever the policy
//! says; `script_publish` only from a person's own session, never from a script run. Script
//! tools are ordinary tools under the policy (`script__*` patterns), classified write, so a
//! draft run cannot call them.

use std::sync::{Arc, Weak};

use larkgate_platform::access::{AUTHORS, PUBLISHERS, READERS};
use larkgate_platform::identity::CallContext;
use larkgate_platform::registry::{RegistryError, ToolHandler, ToolSpec};
use larkgate_platform::typed::{Annotations, CapabilityInfo, Declared, HandlerFn, TypedCapability};
use schemars::JsonSchema;
use serde::Serialize;

use super::{Scripts, upgrade};

mod run;
mod views;

pub(crate) use run::script_tool;
use run::{RunDraft, run_draft_spec};
pub use views::RunView;
use views::{
    DraftView, History, ListInput, NameInput, PublishInput, PublishOutput, RunIdInput,
    RunsListInput, RunsListOutput, SaveDraftInput, SavedDraft, ScriptList,
};

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
    Ok(capability(info, roles, handler)?.into_tool())
}

fn capability<I, O>(
    info: CapabilityInfo,
    roles: &'static [&'static str],
    handler: HandlerFn<I, O>,
) -> Result<TypedCapability<I, O>, RegistryError>
where
    I: serde::de::DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + Send + 'static,
{
    let declared = Declared::new(info).map_err(RegistryError::shape(info.name))?;
    Ok(TypedCapability::new(declared, handler).platform(roles))
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
    // Publishing changes what others run: a person's act, like an approval. No script run
    // reaches it (`people_only`), whatever roles its author had: a published script whose
    // author is a publisher must not publish, at its caller's request, a draft nobody chose.
    let s = scripts.clone();
    tools.push(
        capability(
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
        )?
        .people_only()
        .into_tool(),
    );
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
