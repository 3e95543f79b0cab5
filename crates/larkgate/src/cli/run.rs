//! `larkgate run FILE.star | --draft NAME | --script NAME [--arg k=v ...] [--args-json JSON]`.
//!
//! A file, or a saved draft (`--draft NAME`, only by its author), runs as a **draft** as the
//! actor (the operator, or `--as NAME`): read-only tools only. `--script NAME` runs the latest published version as `script:NAME` with the roles
//! captured from its author at publish time. Either way the run executes in a worker process
//! (this binary, re-executed) and its tool calls cross the whole pipeline through an in-memory
//! session. The result goes to stdout as JSON; printed lines and run stats to stderr; a
//! failure exits non-zero.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};
use larkgate_binding::Limits;
use larkgate_platform::platform::now_ms;
use larkgate_platform::{RunContext, RunKind};
use larkgate_script::{RunError, ScriptLimits, WorkerCommand, run_in_worker};
use larkgate_store::{Principal, PrincipalKind, Run, RunStats, RunStatus, Store};

use super::call::arguments_from;
use super::context::Context;
use super::script::{check, source_hash};

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["file", "draft", "script"])))]
pub(crate) struct Args {
    /// A Starlark file to run as a draft.
    file: Option<PathBuf>,
    /// Run your saved draft of this name (see `larkgate script save`).
    #[arg(long)]
    draft: Option<String>,
    /// Run the latest published version of this script instead.
    #[arg(long)]
    script: Option<String>,
    /// An argument for `main`, `key=value` (text for `str` parameters, JSON otherwise).
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    args: Vec<String>,
    /// All arguments as one JSON object.
    #[arg(long, value_name = "JSON")]
    args_json: Option<String>,
}

fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("run-{nanos:x}-{:x}", std::process::id())
}

pub(crate) async fn run(args: Args, context: &Context, out: &mut impl Write) -> anyhow::Result<()> {
    let (name, source, principal, kind, version) = match (&args.file, &args.draft, &args.script) {
        (Some(file), _, _) => {
            let source = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("script")
                .to_owned();
            (name, source, context.actor.clone(), RunKind::Draft, None)
        }
        (None, Some(name), _) => {
            // The same answer whether the draft is missing or someone else's.
            let draft = context
                .store
                .draft(name)
                .await?
                .filter(|d| d.author == context.actor.id)
                .with_context(|| {
                    format!(
                        "you ({}) have no draft named {name:?}; only a draft's author runs it \
                         (save one with `larkgate script save {name} FILE`)",
                        context.actor.id
                    )
                })?;
            (
                name.clone(),
                draft.source,
                context.actor.clone(),
                RunKind::Draft,
                None,
            )
        }
        (None, None, Some(name)) => {
            let versions = context.store.versions(name).await?;
            let latest = versions
                .last()
                .with_context(|| format!("{name:?} has no published version; publish it first"))?;
            let principal = Principal {
                id: format!("script:{name}"),
                kind: PrincipalKind::Script,
                roles: latest.author_roles.clone(),
            };
            (
                name.clone(),
                latest.source.clone(),
                principal,
                RunKind::Published,
                Some(latest.version),
            )
        }
        (None, None, None) => bail!("name a FILE, --draft NAME or --script NAME"),
    };
    let entry = check(&name, &source)?;
    let fields = entry.input.to_fields();
    let arguments = arguments_from(args.args_json.as_deref(), &args.args, Some(&fields))?;
    let id = run_id();
    let hash = source_hash(&source);
    let started = Instant::now();
    let mut record = Run {
        id: id.clone(),
        script: args.draft.clone().or_else(|| args.script.clone()),
        version,
        hash,
        kind: kind.as_str().to_owned(),
        principal: principal.id.clone(),
        status: RunStatus::Running,
        result: None,
        error_code: None,
        error: None,
        stats: RunStats::default(),
        started_at_ms: now_ms(),
        finished_at_ms: None,
    };
    context.store.start_run(record.clone()).await?;
    let run = RunContext {
        principal,
        run_id: Some(id.clone()),
        kind,
        depth: 1,
    };
    let (caller, teardown) = larkgate_session::connect(
        &context.platform,
        run,
        &format!("script-{kind}"),
        Limits::default(),
    )
    .await?;
    let command = WorkerCommand::current_exe()?;
    let limits = ScriptLimits::default();
    let report = run_in_worker(
        &command,
        &caller,
        &format!("{name}.star"),
        &source,
        &arguments,
        &limits,
        kind == RunKind::Draft,
    )
    .await;
    teardown.close().await;
    record.finished_at_ms = Some(now_ms());
    record.stats = RunStats {
        tool_calls: report.usage.tool_calls,
        paces: report.usage.paces,
        duration_ms: started.elapsed().as_millis() as u64,
        peak_memory_bytes: report.usage.peak_memory_bytes,
    };
    // What the script printed goes to stderr whether it succeeded or not.
    eprint!("{}", report.printed);
    let result = match report.outcome {
        Ok(value) => {
            record.status = RunStatus::Succeeded;
            record.result = Some(value.to_string());
            context.store.finish_run(record.clone()).await?;
            serde_json::to_writer_pretty(&mut *out, &value)?;
            writeln!(out)?;
            Ok(())
        }
        Err(error) => {
            record.status = RunStatus::Failed;
            record.error_code = Some(error.code().to_owned());
            record.error = Some(error.to_string());
            context.store.finish_run(record.clone()).await?;
            Err(run_failed(&error))
        }
    };
    eprintln!(
        "run {id}: {} as {}, {} tool calls, {} paces, {} ms, peak memory {}",
        record.status.as_str(),
        record.principal,
        record.stats.tool_calls,
        record.stats.paces,
        record.stats.duration_ms,
        record.stats.peak_memory_bytes.map_or_else(
            || "unknown".to_owned(),
            |b| format!("{:.1} MiB", b as f64 / 1048576.0)
        ),
    );
    result
}

fn run_failed(error: &RunError) -> anyhow::Error {
    anyhow::anyhow!("the run failed ({}): {error}", error.code())
}
