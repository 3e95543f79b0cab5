//! `larkgate audit ...`: read and verify the hash-chained audit log.

use std::io::Write;

use anyhow::bail;
use larkgate_platform::audit::checkpoint::decode_key;
use larkgate_platform::audit::verify_trusting;
use larkgate_platform::capabilities::rfc3339_from_ms;
use larkgate_store::{AuditQuery, AuditRecord, Store};

use super::context::StoreContext;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Recompute the chain: names the first broken record, deleted last records, and intents
    /// without an outcome. Exits non-zero when the chain is broken.
    Verify {
        /// A head recorded elsewhere, as `larkgate audit head` printed it (`SEQ:HASH` or
        /// `"SEQ HASH"`): the chain must still reach it and hold it, which a store whose tail
        /// was deleted and whose head was rolled back does not.
        #[arg(long, value_name = "SEQ:HASH")]
        head: Option<larkgate_platform::audit::KnownHead>,
        /// A public key you hold (as `larkgate audit key` printed it; repeatable): every
        /// checkpoint must be signed by one of them, or by a key one of them announced.
        #[arg(long = "key", value_name = "KEY")]
        keys: Vec<String>,
    },
    /// Print the public key this data directory signs checkpoints with, to keep where the
    /// database's keeper cannot change it.
    Key,
    /// Show the last records.
    Tail {
        /// How many.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
        /// Only this principal's records.
        #[arg(long)]
        principal: Option<String>,
        /// Only records of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Print the chain's head (sequence and hash), to anchor it somewhere else.
    Head,
}

fn line(r: &AuditRecord) -> String {
    let mut text = format!(
        "#{:<6} {} {:<8} {:<16}",
        r.seq,
        rfc3339_from_ms(r.at_ms),
        r.kind.as_str(),
        r.principal
    );
    if let Some(tool) = &r.tool {
        text.push_str(&format!(" {tool}"));
    }
    if let Some(code) = &r.code {
        text.push_str(&format!(" -> {code}"));
    }
    if let Some(run_kind) = &r.run_kind {
        text.push_str(&format!(" [{run_kind}]"));
    }
    if let Some(us) = r.duration_us {
        text.push_str(&format!(" {us}µs"));
    }
    if let Some(detail) = &r.detail {
        text.push_str(&format!(" ({detail})"));
    }
    text
}

/// Says on stderr that the records read are those a running larkgate has flushed so far. The
/// `audit` commands read the chain whole when this process owns the log: opening it replayed
/// whatever a crashed larkgate left in its journal. While a running larkgate holds the log, its
/// own flusher moves its records into the store (every 50 ms).
pub(crate) fn note_running_owner(context: &StoreContext) {
    if context.log.is_none() {
        eprintln!(
            "larkgate: a running larkgate holds this audit log; reading the records it has \
             flushed to the store so far"
        );
    }
}

pub(crate) async fn run(
    command: Command,
    context: &StoreContext,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let store: &dyn Store = context.store.as_ref();
    // Records appended by a running larkgate are moved into the store by its own flusher
    // (see [`open_log`]).
    match command {
        Command::Key => match super::signing::load(&context.data_dir)? {
            Some(signer) => writeln!(out, "{}", signer.public_key())?,
            None => bail!(
                "{} has no audit signing key yet: `larkgate serve` makes one at its first \
                     start (unless [audit] checkpoints = false)",
                context.data_dir.display()
            ),
        },
        Command::Verify { head, keys } => {
            for key in &keys {
                decode_key(key).map_err(anyhow::Error::msg)?;
            }
            // A backup (or a store restored from one) holds the head it recorded then.
            let origin = store.backup_origin().await?;
            let head = head.or_else(|| origin.as_ref().map(super::backup::known));
            let report = verify_trusting(store, head.as_ref(), &keys).await?;
            writeln!(out, "checked {} records", report.records)?;
            if report.checkpoints > 0 {
                writeln!(
                    out,
                    "checked {} signed checkpoints, signed by {}{}",
                    report.checkpoints,
                    report.signing_keys.join(", "),
                    if keys.is_empty() {
                        " (the keys they name: pass --key with the keys you hold to check \
                         that these are yours)"
                    } else {
                        " (keys you gave, or announced by them)"
                    }
                )?;
            }
            if !report.intents_without_outcome.is_empty() {
                writeln!(
                    out,
                    "intents without an outcome (running, or their outcome was lost): {:?}",
                    report.intents_without_outcome
                )?;
            }
            if let Some((seq, why)) = &report.first_broken {
                writeln!(out, "BROKEN at record {seq}: {why}")?;
            }
            if let Some(why) = &report.head_mismatch {
                writeln!(out, "BROKEN head: {why}")?;
            }
            if let Some(why) = &report.known_head_mismatch {
                writeln!(out, "BROKEN against the recorded head: {why}")?;
            }
            if let Some((seq, why)) = &report.bad_checkpoint {
                writeln!(out, "BROKEN checkpoint at record {seq}: {why}")?;
            }
            if !report.intact() {
                bail!("the audit chain is broken");
            }
            let last = store.audit_head().await?;
            let (seq, hash) = last.map_or((0, String::new()), |h| (h.seq, h.hash));
            writeln!(
                out,
                "the chain is intact from record 1 to record {seq} (head {seq}:{hash})"
            )?;
            if let Some(origin) = &origin {
                writeln!(
                    out,
                    "this store is a backup taken at {}, or was restored from one: it holds the \
                     head recorded then, record {}",
                    rfc3339_from_ms(origin.taken_at_ms),
                    origin.head.seq
                )?;
            }
            match &head {
                Some(known) => {
                    writeln!(out, "it holds the head {}:{} given", known.seq, known.hash)?
                }
                None => writeln!(
                    out,
                    "this vouches for nothing after record {seq}: a copy that lacks the newest \
                     records of the store it was taken from verifies alike; check it against a \
                     head recorded elsewhere, with --head SEQ:HASH (`larkgate audit head` prints \
                     one)"
                )?,
            }
        }
        Command::Tail {
            lines,
            principal,
            tool,
            json,
        } => {
            let records = store
                .audit_records(AuditQuery {
                    limit: Some(lines),
                    newest: true,
                    principal,
                    tool,
                    ..Default::default()
                })
                .await?;
            if records.is_empty() {
                eprintln!("larkgate: no audit records match");
            }
            for r in &records {
                if json {
                    writeln!(out, "{}", serde_json::to_string(r)?)?;
                } else {
                    writeln!(out, "{}", line(r))?;
                }
            }
        }
        Command::Head => match store.audit_head().await? {
            Some(head) => writeln!(out, "{} {}", head.seq, head.hash)?,
            None => writeln!(out, "0 {}", larkgate_platform::audit::GENESIS_HASH)?,
        },
    }
    Ok(())
}
