//! `larkgate runs list` and `larkgate runs show RUN_ID`: run records, in the one shape the
//! `runs_list` and `run_get` tools answer.
//!
//! The same rule as those tools: a record is readable by whoever started it, by the principal
//! it ran as, and by admins; anyone else gets the same answer as for a run that does not
//! exist, and a listing leaves such runs out. It reads only the store, so it works beside a
//! running `larkgate serve`.

use std::io::Write;

use anyhow::Result;

use larkgate_scripts::{RunView, RunsFilter};

use super::context::StoreContext;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List runs, newest first: yours (started by you or run as you), or every run for an
    /// admin.
    List {
        /// Only runs of this script.
        #[arg(long)]
        script: Option<String>,
        /// Only runs that ran as this principal (`script:NAME` for published runs).
        #[arg(long)]
        principal: Option<String>,
        /// Only runs with this status: running, succeeded or failed.
        #[arg(long)]
        status: Option<String>,
        /// Only runs started within this long (`30m`, `2h`, `7d`).
        #[arg(long)]
        since: Option<humantime::Duration>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = larkgate_scripts::DEFAULT_RUNS as i64)]
        limit: i64,
        /// Print JSON (the runs_list tool's records).
        #[arg(long)]
        json: bool,
    },
    /// Print one run's record (script, kind, principal, status, result or error, stats).
    Show {
        /// The run id `larkgate run` printed.
        run_id: String,
    },
}

impl Command {
    /// Carries the command out on the store, writing what it reports to `out`.
    pub(crate) async fn run(self, context: &StoreContext, out: &mut impl Write) -> Result<()> {
        match self {
            Command::List {
                script,
                principal,
                status,
                since,
                limit,
                json,
            } => {
                let since_ms = since.map(|since| {
                    let ago = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
                    larkgate_store::now_ms().saturating_sub(ago)
                });
                let filter = RunsFilter {
                    script,
                    principal,
                    status,
                    since_ms,
                    limit: Some(limit),
                };
                let runs = larkgate_scripts::readable_runs(
                    context.store.as_ref(),
                    &context.actor,
                    &filter,
                )
                .await
                .map_err(|refusal| anyhow::anyhow!("{}", refusal.message))?;
                let runs: Vec<RunView> = runs.into_iter().map(RunView::from).collect();
                if json {
                    serde_json::to_writer_pretty(&mut *out, &runs)?;
                    writeln!(out)?;
                } else if runs.is_empty() {
                    writeln!(out, "no runs match")?;
                } else {
                    for run in runs {
                        let script = match (&run.script, run.version) {
                            (Some(name), Some(version)) => format!("{name} v{version}"),
                            (Some(name), None) => format!("{name} (draft)"),
                            (None, _) => "(unsaved draft)".to_owned(),
                        };
                        let outcome = run
                            .error_code
                            .as_deref()
                            .map(|code| format!(" ({code})"))
                            .unwrap_or_default();
                        writeln!(
                            out,
                            "{}  {:<9}  {:<24} as {:<16} {} ms, {} tool calls{outcome}",
                            run.run_id,
                            run.status,
                            script,
                            run.principal,
                            run.duration_ms,
                            run.tool_calls,
                        )?;
                    }
                }
                Ok(())
            }
            Command::Show { run_id } => {
                let record =
                    larkgate_scripts::readable_run(context.store.as_ref(), &context.actor, &run_id)
                        .await
                        .map_err(|_| {
                            anyhow::anyhow!("there is no run {run_id:?} that you may read")
                        })?;
                serde_json::to_writer_pretty(&mut *out, &RunView::from(record))?;
                writeln!(out)?;
                Ok(())
            }
        }
    }
}
