//! `larkgate run FILE.star | --draft NAME | --script NAME [--arg k=v ...] [--args-json JSON]`.
//!
//! A file, or a saved draft (`--draft NAME`, only by its author), runs as a **draft** as the
//! actor (the operator, or `--as NAME`): read-only tools only. `--script NAME` runs the latest published version as `script:NAME` with the roles
//! captured from its author at publish time. `--review` runs a draft in review mode: calls to
//! tools that may write are recorded as intended writes instead of being made. Either way the run executes in a worker process
//! (this binary, re-executed) and its tool calls cross the whole pipeline through an in-memory
//! session. The result goes to stdout as JSON; printed lines and run stats to stderr; a
//! failure exits non-zero.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use larkgate_binding::Map;
use larkgate_platform::RunContext;

use super::call::arguments_from;
use super::context::Context;
use larkgate_scripts::{RunRequest, check};

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
    /// Review a draft by what it would change: calls to tools that may write are recorded
    /// and answered `{"intercepted": true, "tool": NAME, "write": N}` instead of being made,
    /// and listed after the run.
    #[arg(long, conflicts_with = "script")]
    review: bool,
}

pub(crate) async fn run(args: Args, context: &Context, out: &mut impl Write) -> anyhow::Result<()> {
    let scripts = &context.scripts;
    let actor = &context.actor;
    // The request, with its arguments bound once `main`'s parameters are known.
    let mut request = match (&args.file, &args.draft, &args.script) {
        (Some(file), _, _) => {
            let source = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("script")
                .to_owned();
            RunRequest::draft(actor, name, false, source, Map::new(), 1)
        }
        (None, Some(name), _) => {
            let draft = scripts
                .own_draft(actor, name)
                .await
                .with_context(|| format!("save a draft with `larkgate script save {name} FILE`"))?;
            RunRequest::draft(actor, name.clone(), true, draft.source, Map::new(), 1)
        }
        (None, None, Some(name)) => {
            // The operator starts it directly, as `larkgate call` would call its tool.
            let direct = RunContext::direct(actor.clone());
            scripts.published_run(name, Map::new(), &direct).await?
        }
        (None, None, None) => bail!("name a FILE, --draft NAME or --script NAME"),
    };
    if args.review {
        request = request.reviewing();
    }
    let fields = check(&request.name, &request.source)?.input.to_fields();
    request.arguments = arguments_from(args.args_json.as_deref(), &args.args, Some(&fields))?;
    let finished = scripts.run(request).await?;
    let record = &finished.record;
    // What the script printed goes to stderr whether it succeeded or not.
    eprint!("{}", finished.printed);
    eprintln!(
        "run {}: {} as {}, {} tool calls, {} paces, {} ms, peak memory {}",
        record.id,
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
    if let Some(writes) = finished.review.as_ref().map(|r| &r.intended_writes) {
        let count = writes.len();
        eprintln!(
            "review: {count} intended write{} (recorded, not made){}",
            if count == 1 { "" } else { "s" },
            if count == 0 { "" } else { ":" }
        );
        for (i, write) in writes.iter().enumerate() {
            eprintln!("  {}. {}", i + 1, write.call_text());
        }
    }
    match &finished.outcome {
        Ok(value) => {
            serde_json::to_writer_pretty(&mut *out, value)?;
            writeln!(out)?;
            Ok(())
        }
        Err(error) => Err(anyhow::anyhow!(
            "the run failed ({}): {error}",
            error.code()
        )),
    }
}
