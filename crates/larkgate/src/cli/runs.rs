//! `larkgate runs show RUN_ID`: a run's record as JSON.
//!
//! The same rule as the `run_get` tool: a record is readable by whoever started it, by the
//! principal it ran as, and by admins; anyone else gets the same answer as for a run that does
//! not exist. It reads only the store, so it works beside a running `larkgate serve`.

use std::io::Write;

use super::context::StoreContext;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Print one run's record (script, kind, principal, status, result or error, stats).
    Show {
        /// The run id `larkgate run` printed.
        run_id: String,
    },
}

pub(crate) async fn run(
    command: Command,
    context: &StoreContext,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        Command::Show { run_id } => {
            let record =
                larkgate_scripts::readable_run(context.store.as_ref(), &context.actor, &run_id)
                    .await
                    .map_err(|_| anyhow::anyhow!("there is no run {run_id:?} that you may read"))?;
            serde_json::to_writer_pretty(&mut *out, &record)?;
            writeln!(out)?;
            Ok(())
        }
    }
}
