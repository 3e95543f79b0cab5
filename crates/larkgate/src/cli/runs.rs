//! `larkgate runs show RUN_ID`: a run's record as JSON.
//!
//! A record is readable by an admin and by the principal it ran as (for a published run,
//! `script:NAME`); anyone else gets the same answer as for a run that does not exist.

use std::io::Write;

use anyhow::bail;
use larkgate_platform::policy::ROLE_ADMIN;
use larkgate_store::Store;

use super::context::Context;

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
    context: &Context,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        Command::Show { run_id } => {
            let record = context
                .store
                .run(&run_id)
                .await?
                .filter(|r| context.actor_has(ROLE_ADMIN) || r.principal == context.actor.id);
            let Some(record) = record else {
                bail!("there is no run {run_id:?} that you may read");
            };
            serde_json::to_writer_pretty(&mut *out, &record)?;
            writeln!(out)?;
            Ok(())
        }
    }
}
