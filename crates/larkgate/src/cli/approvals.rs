//! `larkgate approvals ...`: the same operations as the approval platform tools, as the local
//! operator or `--as` an approver. Nobody resolves an approval of their own call. They work
//! beside a running `larkgate serve`, which reads approvals at every call.

use std::io::Write;

use anyhow::Result;

use larkgate_platform::approvals::Decision;
use larkgate_platform::approvals::tools::{ApprovalView, ApprovalsListOutput};

use super::context::StoreContext;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List approval requests, newest first.
    List {
        /// Which ones: pending (default), approved, denied, used, expired, withdrawn, or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// At most this many (1 to 100).
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Only those after this point: the `--after` the page before printed.
        #[arg(long)]
        after: Option<String>,
        /// Print JSON (the approvals_list tool's answer: `approvals`, and `next`).
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Then keep printing new pending requests as they come, until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Approve a pending request: the requester may make that one call, once.
    Approve {
        /// The approval's id.
        id: String,
        /// Why: recorded with the approval and in the audit chain.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a pending request.
    Deny {
        /// The approval's id.
        id: String,
        /// Why: recorded with the approval and in the audit chain, and told to the caller.
        #[arg(long)]
        reason: Option<String>,
    },
}

impl Command {
    /// Whether it runs until interrupted (`list --watch`).
    pub(crate) fn runs_on(&self) -> bool {
        matches!(self, Command::List { watch: true, .. })
    }

    /// Carries the command out on the store, writing what it reports to `out`.
    pub(crate) async fn run(self, context: &StoreContext, out: &mut impl Write) -> Result<()> {
        match self {
            Command::List {
                status,
                limit,
                after,
                json,
                watch,
            } => {
                let pending_ttl = context.config.policy.approvals.pending_ttl_seconds;
                let now_ms = larkgate_store::now_ms();
                let page = larkgate_platform::approvals::list(
                    context.store.as_ref(),
                    pending_ttl,
                    &status,
                    after.as_deref(),
                    limit,
                    now_ms,
                )
                .await
                .map_err(|refusal| anyhow::anyhow!("{}", refusal.message))?;
                let (approvals, next) = (page.approvals, page.next);
                let mut seen: std::collections::HashSet<String> =
                    approvals.iter().map(|a| a.id.clone()).collect();
                if json {
                    // The approvals_list tool's answer.
                    let answer = ApprovalsListOutput {
                        approvals: approvals
                            .into_iter()
                            .map(|a| ApprovalView::listed(a, now_ms))
                            .collect(),
                        next,
                    };
                    serde_json::to_writer_pretty(&mut *out, &answer)?;
                    writeln!(out)?;
                } else if approvals.is_empty() {
                    let more = if after.is_some() { "more " } else { "" };
                    writeln!(out, "no {more}{status} approvals")?;
                } else {
                    for a in approvals {
                        writeln!(out, "{}", line(&a, now_ms))?;
                    }
                    if let Some(next) = next {
                        writeln!(
                            out,
                            "older ones: larkgate approvals list --status {status} --after {next}"
                        )?;
                    }
                }
                if watch {
                    watch_new(context, &mut seen, out).await?;
                }
            }
            Command::Approve { id, reason } => {
                let decision = Decision {
                    approve: true,
                    reason: reason.as_deref(),
                };
                resolve(context, &id, decision, out).await?;
            }
            Command::Deny { id, reason } => {
                let decision = Decision {
                    approve: false,
                    reason: reason.as_deref(),
                };
                resolve(context, &id, decision, out).await?;
            }
        }
        Ok(())
    }
}

/// How often `approvals list --watch` looks for new requests.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Prints each pending request not in `seen` as it comes, oldest first, until interrupted.
async fn watch_new(
    context: &StoreContext,
    seen: &mut std::collections::HashSet<String>,
    out: &mut impl Write,
) -> Result<()> {
    crate::logging::say("watching for new requests to approve (Ctrl-C to stop)");
    out.flush()?;
    let pending_ttl = context.config.policy.approvals.pending_ttl_seconds;
    let mut every = tokio::time::interval(WATCH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now_ms = larkgate_store::now_ms();
        let page = match larkgate_platform::approvals::list(
            context.store.as_ref(),
            pending_ttl,
            "pending",
            None,
            i64::from(larkgate_platform::approvals::MAX_PAGE),
            now_ms,
        )
        .await
        {
            Ok(page) => page,
            // The store may be busy or away for a moment: the next look says more.
            Err(refusal) => {
                tracing::warn!(message = %refusal.message, "new requests could not be read");
                continue;
            }
        };
        // Only the ones still pending are remembered: the set stays as small as the queue.
        let pending: std::collections::HashSet<String> =
            page.approvals.iter().map(|a| a.id.clone()).collect();
        for a in page.approvals.iter().rev() {
            if !seen.contains(&a.id) {
                writeln!(out, "{}", line(a, now_ms))?;
            }
        }
        out.flush()?;
        *seen = pending;
    }
}

/// One approval as `approvals list` prints it: id, status, who, the call, where it was made,
/// and for a pending request its age and how long it may still be decided.
fn line(a: &larkgate_store::Approval, now_ms: i64) -> String {
    // A call made inside script runs says whose runs they were.
    let via = if a.chain.through.is_empty() {
        String::new()
    } else {
        format!("  via {}", a.chain.through.join(" > "))
    };
    let script = a
        .details
        .script
        .as_deref()
        .map(|s| format!("  in {s}"))
        .unwrap_or_default();
    let when = match (a.status, a.expires_at_ms) {
        (larkgate_store::ApprovalStatus::Pending, Some(expires)) => format!(
            "  asked {} ago, expires in {}",
            duration(now_ms.saturating_sub(a.created_at_ms)),
            duration(expires.saturating_sub(now_ms))
        ),
        _ => String::new(),
    };
    format!(
        "{}  {:<8}  {:<16} {}({}){via}{script}{when}",
        a.id,
        a.status.as_str(),
        a.principal,
        a.tool,
        shown_arguments(a),
    )
}

/// `ms` in the largest whole unit: `42 s`, `5 min`, `3 h`.
fn duration(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min", seconds / 60),
        _ => format!("{} h", seconds / 3600),
    }
}

/// An approval's arguments as a call's: `key="important", token="<redacted>"`, or the start
/// of their hash for approvals made before larkgate recorded arguments. Every character that
/// would act on the terminal or hide is written as an escape, and values that show as other
/// values are named after them ([`larkgate_platform::display`]).
fn shown_arguments(approval: &larkgate_store::Approval) -> String {
    use larkgate_platform::display;
    let parsed = approval.details.arguments.as_deref().and_then(|text| {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text).ok()
    });
    match parsed {
        Some(arguments) => {
            let call = arguments
                .iter()
                .map(|(key, value)| {
                    format!("{}={}", display::escaped(key), display::json(value, false))
                })
                .collect::<Vec<_>>()
                .join(", ");
            let lookalikes = display::lookalikes(&serde_json::Value::Object(arguments), 10);
            let mut shown = call;
            if !lookalikes.is_empty() {
                shown = format!("{shown} [look-alikes: {}]", lookalikes.join("; "));
            }
            if !approval.details.arguments_whole() {
                shown = format!(
                    "{shown} [a preview: {} bytes in all; approving approves all of them]",
                    approval.details.arguments_bytes.unwrap_or_default()
                );
            }
            shown
        }
        None => format!(
            "arguments {}...",
            &approval.args_hash[..16.min(approval.args_hash.len())]
        ),
    }
}

async fn resolve(
    context: &StoreContext,
    id: &str,
    decision: Decision<'_>,
    out: &mut impl Write,
) -> Result<()> {
    let approve = decision.approve;
    // The platform's own rules (who may resolve, never one's own call, how long an approval
    // lasts), with the event recorded as any operator event is.
    let approval = larkgate_platform::approvals::resolve(
        context.store.as_ref(),
        context.events.as_ref(),
        &context.config.policy.approvals,
        &context.actor,
        id,
        decision,
        larkgate_store::now_ms(),
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
