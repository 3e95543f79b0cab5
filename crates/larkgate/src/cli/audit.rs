//! `larkgate audit ...`: read and verify the hash-chained audit log.

use std::io::Write;

use anyhow::{Context as _, bail};
use larkgate_platform::audit::bundle::{self, Bound, BundleReport};
use larkgate_platform::audit::checkpoint::Checkpoint;
use larkgate_platform::audit::checkpoint::decode_key;
use larkgate_platform::audit::verify_anchored;
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
        /// A file of checkpoints anchored outside the database (`[[audit.anchors]] file`, or
        /// the checkpoints' JSON lines from syslog or a webhook; repeatable): the chain must
        /// still hold every one, which a database rolled back to an earlier copy or rewritten
        /// does not.
        #[arg(long = "anchor", value_name = "FILE", conflicts_with = "bundle")]
        anchors: Vec<std::path::PathBuf>,
        /// Check a bundle (`larkgate audit export`) instead of the store: no data directory
        /// is needed, and --key is.
        #[arg(long, value_name = "FILE", conflicts_with = "head", requires = "keys")]
        bundle: Option<std::path::PathBuf>,
        /// With --bundle: the bundle before it, which this one must join.
        #[arg(long, value_name = "FILE", requires = "bundle")]
        previous: Option<std::path::PathBuf>,
    },
    /// Write a range of the chain to a file another machine verifies with `larkgate audit
    /// verify --bundle FILE --key KEY`, without larkgate's store: the records, the checkpoint
    /// that signs the last of them, and the keys that signed. The range ends at the next
    /// position a checkpoint signs at or after --to.
    Export {
        /// The first record: a sequence number, or an RFC 3339 time (the first record at or
        /// after it).
        #[arg(long, value_name = "SEQ|TIME", default_value = "1")]
        from: larkgate_platform::audit::bundle::Bound,
        /// The last record: a sequence number or an RFC 3339 time (the last record at or
        /// before it); by default, the last position a checkpoint signs.
        #[arg(long, value_name = "SEQ|TIME")]
        to: Option<larkgate_platform::audit::bundle::Bound>,
        /// Where to write it (it must not exist).
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
    },
    /// Print the public key this data directory signs checkpoints with, to keep where the
    /// database's keeper cannot change it.
    Key {
        /// Move to a new key: a checkpoint signed by the key in use announces it, so a
        /// verifier holding the old public key accepts the new one from there. With a serve
        /// running on this data directory, that serve rotates (it is sent SIGHUP).
        #[arg(long)]
        rotate: bool,
    },
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
        Command::Key { rotate: true } => rotate(context, out).await?,
        Command::Export {
            from,
            to,
            out: file,
        } => {
            let exported = export(store, from, to, &file).await?;
            writeln!(
                out,
                "wrote records {} to {} to {}, the last signed by {}; verify it anywhere with \
                 `larkgate audit verify --bundle {} --key KEY`",
                exported.from,
                exported.to,
                file.display(),
                exported.keys.last().map_or("", String::as_str),
                file.display()
            )?;
        }
        Command::Key { rotate: false } => match super::signing::load(&context.data_dir)? {
            Some(signer) => writeln!(out, "{}", signer.public_key())?,
            None => bail!(
                "{} has no audit signing key yet: `larkgate serve` makes one at its first \
                     start (unless [audit] checkpoints = false)",
                context.data_dir.display()
            ),
        },
        Command::Verify {
            bundle: Some(_), ..
        } => unreachable!("verified without a store"),
        Command::Verify {
            head,
            keys,
            anchors,
            bundle: None,
            previous: _,
        } => {
            for key in &keys {
                decode_key(key).map_err(anyhow::Error::msg)?;
            }
            let (anchored, origins) = read_anchors(&anchors)?;
            // A backup (or a store restored from one) holds the head it recorded then.
            let origin = store.backup_origin().await?;
            let head = head.or_else(|| origin.as_ref().map(super::backup::known));
            let report = verify_anchored(store, head.as_ref(), &keys, &anchored).await?;
            writeln!(out, "checked {} records", report.records)?;
            if report.checkpoints > 0 {
                writeln!(
                    out,
                    "checked {} signed {}, signed by {}{}",
                    report.checkpoints,
                    checkpoints_word(report.checkpoints),
                    report.signing_keys.join(", "),
                    if keys.is_empty() {
                        " (the keys they name: pass --key with the keys you hold to check \
                         that these are yours)"
                    } else {
                        " (keys you gave, or announced by them)"
                    }
                )?;
            }
            if report.anchored > 0 {
                writeln!(
                    out,
                    "checked {} {} anchored outside the database",
                    report.anchored,
                    checkpoints_word(report.anchored)
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
            if let Some((index, why)) = &report.bad_anchor {
                writeln!(
                    out,
                    "BROKEN against the anchors: the checkpoint anchored at {}: {why}",
                    origins[index - 1]
                )?;
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
            let last_anchored = anchored.iter().map(|c| c.seq).max();
            match (&head, last_anchored) {
                (Some(known), _) => {
                    writeln!(out, "it holds the head {}:{} given", known.seq, known.hash)?
                }
                (None, Some(anchored_seq)) => writeln!(
                    out,
                    "the anchors vouch for it up to record {anchored_seq}, the last they hold; \
                     nothing vouches for the records after it (a copy that lacks them verifies \
                     alike)"
                )?,
                (None, None) => writeln!(
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

/// "checkpoint" or "checkpoints", as `count` needs.
fn checkpoints_word(count: u64) -> &'static str {
    if count == 1 {
        "checkpoint"
    } else {
        "checkpoints"
    }
}

/// Whether `command` runs without a data directory (a bundle is checked on its own).
pub(crate) fn offline(command: &Command) -> bool {
    matches!(
        command,
        Command::Verify {
            bundle: Some(_),
            ..
        }
    )
}

/// `audit verify --bundle FILE --key KEY [--previous FILE]`: no store, no data directory.
pub(crate) fn run_offline(command: Command, out: &mut impl Write) -> anyhow::Result<()> {
    let Command::Verify {
        keys,
        bundle: Some(file),
        previous,
        ..
    } = command
    else {
        bail!("only `audit verify --bundle` runs without a data directory");
    };
    for key in &keys {
        decode_key(key).map_err(anyhow::Error::msg)?;
    }
    let check = |file: &std::path::Path, previous: Option<&BundleReport>| {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the bundle {}", file.display()))?;
        bundle::verify_bundle(&text, &keys, previous)
            .map_err(|why| anyhow::anyhow!("the bundle {} is BROKEN: {why}", file.display()))
    };
    let before = previous.as_deref().map(|p| check(p, None)).transpose()?;
    let report = check(&file, before.as_ref())?;
    writeln!(
        out,
        "the bundle {} is intact: records {} to {} ({} checkpoints, signed by {}), the last \
         record {}:{}",
        file.display(),
        report.from,
        report.to,
        report.checkpoints,
        report.keys.join(", "),
        report.to,
        report.last_hash
    )?;
    if let (Some(previous), Some(before)) = (&previous, &before) {
        writeln!(
            out,
            "it joins {} (records {} to {}, also intact)",
            previous.display(),
            before.from,
            before.to
        )?;
    }
    Ok(())
}

/// The checkpoints the anchor files hold, and where each was (`FILE line N`). A line's JSON
/// starts at its first `{`, so the system log's lines (`... larkgate-audit[PID]: {...}`) read
/// as they are; blank lines are skipped.
fn read_anchors(files: &[std::path::PathBuf]) -> anyhow::Result<(Vec<Checkpoint>, Vec<String>)> {
    let mut checkpoints = Vec::new();
    let mut origins = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the anchor file {}", file.display()))?;
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let origin = format!("{} line {}", file.display(), index + 1);
            let checkpoint = line
                .find('{')
                .and_then(|start| serde_json::from_str::<Checkpoint>(&line[start..]).ok())
                .ok_or_else(|| anyhow::anyhow!("{origin} is not an anchored checkpoint"))?;
            checkpoints.push(checkpoint);
            origins.push(origin);
        }
    }
    Ok((checkpoints, origins))
}

/// Writes a bundle to `file` (which must not exist), whole or not at all.
async fn export(
    store: &dyn Store,
    from: Bound,
    to: Option<Bound>,
    file: &std::path::Path,
) -> anyhow::Result<bundle::Exported> {
    if file.exists() {
        bail!("{} exists already: give a new file", file.display());
    }
    let mut partial = file.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let mut writer = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?,
    );
    let written = bundle::export(store, from, to, &mut writer).await;
    let finished = written.map_err(anyhow::Error::from).and_then(|exported| {
        let file = writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(exported)
    });
    match finished {
        Ok(exported) => {
            std::fs::rename(&partial, file)?;
            Ok(exported)
        }
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}

/// `audit key --rotate`: by this process when it owns the log, else by the serve that does.
async fn rotate(context: &StoreContext, out: &mut impl Write) -> anyhow::Result<()> {
    let Some(current) = super::signing::load(&context.data_dir)? else {
        bail!(
            "{} has no audit signing key yet, so there is none to rotate: `larkgate serve` \
             makes one at its first start",
            context.data_dir.display()
        );
    };
    let Some((every_records, every)) = context
        .config
        .audit
        .checkpoints()
        .map_err(anyhow::Error::msg)?
    else {
        bail!("[audit] checkpoints = false: no key signs, so none is rotated");
    };
    let old = current.public_key().to_owned();
    let next = super::signing::prepare_next(&context.data_dir)?;
    let announced = match &context.log {
        Some(log) => {
            log.set_checkpoints(larkgate_platform::audit::checkpoint::Checkpoints {
                signer: current,
                every_records,
                every,
            });
            super::signing::rotate_pending(&context.data_dir, log)
                .await?
                .map(|c| c.seq)
        }
        None => {
            // The serve rotates at its reload, after it has read its configuration again.
            super::reload::request(&context.data_dir, &mut std::io::sink())?;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let now = super::signing::load(&context.data_dir)?;
                if now.is_some_and(|s| s.public_key() == next) {
                    break None;
                }
                if std::time::Instant::now() > deadline {
                    bail!(
                        "the running serve did not rotate its key within 30 s (its log says \
                         why); the new key waits in {} for its next reload",
                        super::signing::NEXT_FILE
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    writeln!(
        out,
        "rotated the audit signing key: {old} announced {next}{}, which signs from now on; \
         keep both public keys: `audit verify --key {old}` accepts the new one from the \
         announcement on",
        announced.map_or(String::new(), |seq| format!(
            " in the checkpoint of record {seq}"
        ))
    )?;
    Ok(())
}
