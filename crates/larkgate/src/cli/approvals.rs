//! `larkgate approvals ...`: the same operations as the approval platform tools, as the local
//! operator or `--as` an approver. Nobody resolves an approval of their own call. They work
//! beside a running `larkgate serve`, which reads approvals at every call.

use std::io::Write;

use super::context::StoreContext;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List approval requests, newest first.
    List {
        /// Which ones: pending (default), approved, denied, used, or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending request: the requester may make that one call, once.
    Approve {
        /// The approval's id.
        id: String,
    },
    /// Deny a pending request.
    Deny {
        /// The approval's id.
        id: String,
    },
}

pub(crate) async fn run(
    command: Command,
    context: &StoreContext,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        Command::List { status, json } => {
            let approvals = larkgate_platform::approvals::list(context.store.as_ref(), &status)
                .await
                .map_err(|refusal| anyhow::anyhow!("{}", refusal.message))?;
            if json {
                serde_json::to_writer_pretty(&mut *out, &approvals)?;
                writeln!(out)?;
            } else if approvals.is_empty() {
                writeln!(out, "no {status} approvals")?;
            } else {
                for a in approvals {
                    // A call made inside script runs says whose runs they were.
                    let via = if a.chain.through.is_empty() {
                        String::new()
                    } else {
                        format!("  via {}", a.chain.through.join(" > "))
                    };
                    writeln!(
                        out,
                        "{}  {:<8}  {:<16} {:<24} args {}{via}",
                        a.id,
                        a.status.as_str(),
                        a.principal,
                        a.tool,
                        &a.args_hash[..16.min(a.args_hash.len())]
                    )?;
                }
            }
        }
        Command::Approve { id } => resolve(context, &id, true, out).await?,
        Command::Deny { id } => resolve(context, &id, false, out).await?,
    }
    Ok(())
}

async fn resolve(
    context: &StoreContext,
    id: &str,
    approve: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // The platform's own rules (who may resolve, never one's own call, how long an approval
    // lasts), with the event recorded as any operator event is.
    let approval = larkgate_platform::approvals::resolve(
        context.store.as_ref(),
        context.events.as_ref(),
        context.config.policy.approvals.ttl_seconds,
        &context.actor,
        id,
        approve,
    )
    .await
    .map_err(|refusal| anyhow::anyhow!("{}", refusal.message))?;
    if approve {
        let via = if approval.chain.through.is_empty() {
            String::new()
        } else {
            format!(
                " in a run started by {}",
                approval.chain.through.join(" > ")
            )
        };
        writeln!(
            out,
            "approved {}: {} may call {} once with those arguments{via}",
            approval.id, approval.principal, approval.tool
        )?;
    } else {
        writeln!(
            out,
            "denied {}: {}'s call of {} will be refused",
            approval.id, approval.principal, approval.tool
        )?;
    }
    Ok(())
}
