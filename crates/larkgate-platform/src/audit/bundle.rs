//! Bundles: a range of the audit chain in one file that another machine checks with no
//! larkgate store — every record's hash, every checkpoint's signature, and that the range's
//! last record is signed, so the whole range is (each record's hash covers the one before).
//!
//! # Format (`larkgate-audit-bundle-v1`), JSON lines
//!
//! ```text
//! {"bundle":"larkgate-audit-bundle-v1","from":F,"prev_hash":"<hash before record F>"}
//! {"record":{...}}        one per record F..=T, in order, as the chain holds them
//! {"checkpoint":{...}}    the checkpoint that signs record T
//! {"end":T,"records":N,"keys":["<public key>",...]}
//! ```
//!
//! `docs/operations.md` says how a record's hash and a checkpoint's signed text are made, with
//! a verifier in Python.
//!
//! # Threat model
//!
//! A bundle is checked by someone who trusts neither the operator's database nor the bundle's
//! sender, only the public keys they hold (`--key`):
//!
//! - **an edited, inserted or removed record** breaks the hashes or the sequence;
//! - **a range rewritten with valid hashes** no longer matches the signed record `T`, nor
//!   the positions the checkpoints inside it sign;
//! - **a bundle spliced from two ranges** has a gap in the sequence or a record whose previous
//!   hash is not the one before it, and one range's checkpoint does not sign the other's head;
//! - **a checkpoint signed by an attacker's key** names a key the verifier did not give, nor
//!   one of theirs announced (a rotation);
//! - **a bundle that does not join the one before it** (`--previous`): its first record's
//!   previous hash is not the previous bundle's last hash.
//!
//! The `keys` line is informative only: the verifier's keys decide.

use std::io::Write;

use larkgate_store::{AuditKind, AuditQuery, AuditRecord, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::EventKind;
use super::chain::{GENESIS_HASH, record_at, record_hash};
use super::checkpoint::{AcceptedKeys, Checkpoint};

/// The format's name, the header's `bundle`.
pub const FORMAT: &str = "larkgate-audit-bundle-v1";

/// Where a range starts or ends: a record's sequence, or a time (the first record at or after
/// it, the last at or before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// A sequence number.
    Seq(u64),
    /// Unix milliseconds.
    AtMs(i64),
}

impl std::str::FromStr for Bound {
    type Err = String;

    /// A sequence number (`1200`), or an RFC 3339 time (`2026-12-01T00:00:00Z`).
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(seq) = text.parse::<u64>() {
            return Ok(Bound::Seq(seq));
        }
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| Bound::AtMs(t.timestamp_millis()))
            .map_err(|_| {
                format!(
                    "{text:?} is neither a record's sequence number nor an RFC 3339 time \
                     (2026-12-01T00:00:00Z)"
                )
            })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    bundle: String,
    from: u64,
    prev_hash: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct End {
    end: u64,
    records: u64,
    keys: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    Record(AuditRecord),
    Checkpoint(Checkpoint),
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    /// The first record.
    pub from: u64,
    /// The last record (signed by the bundle's checkpoint).
    pub to: u64,
    /// Its hash.
    pub last_hash: String,
    /// The keys that signed its checkpoints.
    pub keys: Vec<String>,
}

/// Why an export could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The range asked for is not one the chain can give.
    #[error("{0}")]
    Range(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The bundle could not be written.
    #[error("the bundle could not be written: {0}")]
    Write(#[from] std::io::Error),
}

const PAGE: usize = 10_000;

/// The checkpoint a record holds, when it is one.
fn checkpoint_in(record: &AuditRecord) -> Option<Checkpoint> {
    (record.kind == AuditKind::Event
        && record.code.as_deref() == Some(EventKind::Checkpoint.as_str()))
    .then_some(record.detail.as_deref())
    .flatten()
    .and_then(|detail| serde_json::from_str(detail).ok())
}

/// Writes the records `from..=to` to `out` as a bundle, `to` moved on to the next position a
/// checkpoint signs (so that the last record is signed); `to` absent is the last signed
/// position. Records are streamed: memory holds one page and those after `to` up to its
/// checkpoint.
pub async fn export(
    store: &dyn Store,
    from: Bound,
    to: Option<Bound>,
    out: &mut dyn Write,
) -> Result<Exported, ExportError> {
    let Some(head) = store.audit_head().await? else {
        return Err(ExportError::Range("the audit chain is empty".into()));
    };
    let from_seq = match from {
        Bound::Seq(0) => return Err(ExportError::Range("records are numbered from 1".into())),
        Bound::Seq(seq) if seq > head.seq => {
            return Err(ExportError::Range(format!(
                "the chain ends at record {}, before {seq}",
                head.seq
            )));
        }
        Bound::Seq(seq) => seq,
        Bound::AtMs(at) => first_at_or_after(store, at)
            .await?
            .ok_or_else(|| ExportError::Range("no record is at or after that time".into()))?,
    };
    // The requested end; `None`: whatever the last checkpoint signs.
    let wanted = match to {
        None => None,
        Some(Bound::Seq(seq)) if seq < from_seq => {
            return Err(ExportError::Range(format!(
                "--to {seq} is before --from {from_seq}"
            )));
        }
        Some(Bound::Seq(seq)) => Some(seq.min(head.seq)),
        Some(Bound::AtMs(at)) => Some(
            last_at_or_before(store, at)
                .await?
                .ok_or_else(|| ExportError::Range("no record is at or before that time".into()))?,
        ),
    };
    if wanted.is_some_and(|w| w < from_seq) {
        return Err(ExportError::Range("the range holds no record".into()));
    }
    let prev_hash = match from_seq {
        1 => GENESIS_HASH.to_owned(),
        seq => record_at(store, seq - 1)
            .await?
            .map(|r| r.hash)
            .unwrap_or_default(),
    };
    let header = Header {
        bundle: FORMAT.into(),
        from: from_seq,
        prev_hash,
    };
    writeln!(out, "{}", json(&header))?;
    // Records not yet written: those past the requested end, until a checkpoint signs one.
    let mut held: Vec<AuditRecord> = Vec::new();
    let mut written = 0u64;
    let mut keys: Vec<String> = Vec::new();
    // The last signed position within the range, for `to` absent and for the message.
    let mut last_signed: Option<Checkpoint> = None;
    let mut after = Some(from_seq - 1);
    let mut end: Option<Checkpoint> = None;
    'pages: loop {
        let page = store
            .audit_records(AuditQuery {
                after_seq: after,
                limit: Some(PAGE),
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        for record in page {
            let checkpoint = checkpoint_in(&record);
            let seq = record.seq;
            held.push(record);
            if let Some(checkpoint) = checkpoint
                && checkpoint.seq >= from_seq
            {
                if !keys.contains(&checkpoint.key) {
                    keys.push(checkpoint.key.clone());
                }
                let signed = checkpoint.seq;
                if wanted.is_some_and(|w| signed >= w) {
                    end = Some(checkpoint);
                    break 'pages;
                }
                // Everything up to what it signs is in the bundle whatever comes next.
                let upto = held.iter().take_while(|r| r.seq <= signed).count();
                for record in held.drain(..upto) {
                    writeln!(out, "{}", json(&Line::Record(record)))?;
                    written += 1;
                }
                // Replicas sign as they chain, so a later checkpoint may sign an earlier
                // position than the one before it: the bundle ends at the furthest signed.
                if last_signed.as_ref().is_none_or(|last| signed > last.seq) {
                    last_signed = Some(checkpoint);
                }
            }
            if wanted.is_none() && seq >= head.seq {
                break 'pages;
            }
        }
        // Past the requested end, records are held only until a checkpoint signs them.
        if wanted.is_some_and(|w| after.unwrap_or(0) > w) && held.len() > 4 * PAGE {
            break;
        }
    }
    let end = match (end, wanted, last_signed) {
        (Some(end), _, _) => end,
        (None, None, Some(last)) => last,
        (None, wanted, last) => {
            let upto = wanted.unwrap_or(head.seq);
            return Err(ExportError::Range(format!(
                "record {upto} is not signed by a checkpoint yet (one follows records within \
                 [audit] checkpoint_seconds, 60 s by default, of a serving larkgate){}",
                match last {
                    Some(last) => format!("; record {} is: export --to {}", last.seq, last.seq),
                    None => String::new(),
                }
            )));
        }
    };
    for record in held.into_iter().take_while(|r| r.seq <= end.seq) {
        writeln!(out, "{}", json(&Line::Record(record)))?;
        written += 1;
    }
    if !keys.contains(&end.key) {
        keys.push(end.key.clone());
    }
    writeln!(out, "{}", json(&Line::Checkpoint(end.clone())))?;
    writeln!(
        out,
        "{}",
        json(&End {
            end: end.seq,
            records: written,
            keys: keys.clone(),
        })
    )?;
    Ok(Exported {
        from: from_seq,
        to: end.seq,
        last_hash: end.hash,
        keys,
    })
}

fn json(value: &impl Serialize) -> String {
    // Records and checkpoints are strings and integers: they always serialize.
    serde_json::to_string(value).unwrap_or_default()
}

/// Scans the chain for the first record at or after `at_ms`.
async fn first_at_or_after(store: &dyn Store, at_ms: i64) -> Result<Option<u64>, StoreError> {
    let mut found = None;
    scan(store, |r| {
        if r.at_ms >= at_ms {
            found = Some(r.seq);
            return false;
        }
        true
    })
    .await?;
    Ok(found)
}

/// Scans the chain for the last record at or before `at_ms`.
async fn last_at_or_before(store: &dyn Store, at_ms: i64) -> Result<Option<u64>, StoreError> {
    let mut found = None;
    scan(store, |r| {
        if r.at_ms <= at_ms {
            found = Some(r.seq);
        }
        true
    })
    .await?;
    Ok(found)
}

async fn scan(
    store: &dyn Store,
    mut each: impl FnMut(&AuditRecord) -> bool,
) -> Result<(), StoreError> {
    let mut after = None;
    loop {
        let page = store
            .audit_records(AuditQuery {
                after_seq: after,
                limit: Some(PAGE),
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.seq);
        for record in &page {
            if !each(record) {
                return Ok(());
            }
        }
    }
}

/// What [`verify_bundle`] found in an intact bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleReport {
    /// The first record.
    pub from: u64,
    /// The last record, signed by the bundle's checkpoint.
    pub to: u64,
    /// The hash of the record before the first.
    pub prev_hash: String,
    /// The last record's hash (what the next bundle joins).
    pub last_hash: String,
    /// How many checkpoints were checked (those inside the range, and the last).
    pub checkpoints: u64,
    /// The keys that signed them.
    pub keys: Vec<String>,
}

/// Checks a bundle's text with the keys the verifier holds (at least one), and, given the
/// bundle before it, that this one starts where that one ended. Why it does not hold, if not:
/// the line and what is wrong there.
pub fn verify_bundle(
    text: &str,
    trusted: &[String],
    previous: Option<&BundleReport>,
) -> Result<BundleReport, String> {
    if trusted.is_empty() {
        return Err(
            "give the public keys you hold (--key, as `larkgate audit key` printed them): a \
             bundle's own keys prove nothing"
                .into(),
        );
    }
    let mut accepted = AcceptedKeys::new(trusted);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (_, first) = lines.next().ok_or("the bundle is empty")?;
    let header: Header =
        serde_json::from_str(first).map_err(|e| format!("line 1 is not a bundle's header: {e}"))?;
    if header.bundle != FORMAT {
        return Err(format!(
            "line 1: the format {:?} is not {FORMAT}",
            header.bundle
        ));
    }
    if header.from == 0 {
        return Err("line 1: records are numbered from 1".into());
    }
    if header.from == 1 && header.prev_hash != GENESIS_HASH {
        return Err("line 1: the first record of the chain follows the genesis hash".into());
    }
    if let Some(previous) = previous {
        if header.from != previous.to + 1 {
            return Err(format!(
                "it starts at record {} but the previous bundle ends at {}: they do not join",
                header.from, previous.to
            ));
        }
        if header.prev_hash != previous.last_hash {
            return Err(format!(
                "its record {} does not follow the previous bundle's last record (another \
                 hash before it): they do not join",
                header.from
            ));
        }
    }
    let mut report = BundleReport {
        from: header.from,
        to: 0,
        prev_hash: header.prev_hash.clone(),
        last_hash: String::new(),
        checkpoints: 0,
        keys: Vec::new(),
    };
    let mut hashes: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    let mut prev_hash = header.prev_hash;
    let mut expected = header.from;
    let mut records = 0u64;
    let mut signed_end: Option<Checkpoint> = None;
    let mut end: Option<End> = None;
    for (number, line) in lines {
        if end.is_some() {
            return Err(format!("line {number}: lines after the bundle's end"));
        }
        if signed_end.is_some() {
            end = Some(
                serde_json::from_str(line)
                    .map_err(|e| format!("line {number} is not the bundle's end: {e}"))?,
            );
            continue;
        }
        let parsed: Line = serde_json::from_str(line)
            .map_err(|e| format!("line {number} is neither a record nor a checkpoint: {e}"))?;
        match parsed {
            Line::Record(record) => {
                let problem = if record.seq != expected {
                    Some(format!(
                        "record {} where record {expected} belongs: records are missing, added \
                         or spliced in from elsewhere",
                        record.seq
                    ))
                } else if record.prev_hash != prev_hash {
                    Some(format!(
                        "record {} does not follow the record before it (spliced, or the \
                         chain rewritten)",
                        record.seq
                    ))
                } else if record_hash(&record) != record.hash {
                    Some(format!(
                        "record {} does not match its hash: it was edited",
                        record.seq
                    ))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(format!("line {number}: {problem}"));
                }
                if let Some(checkpoint) = checkpoint_in(&record) {
                    check_signed(&checkpoint, &mut accepted, &mut report)
                        .map_err(|why| format!("line {number}: the checkpoint {why}"))?;
                    if checkpoint.seq >= record.seq {
                        return Err(format!(
                            "line {number}: the checkpoint signs record {}, not before it",
                            checkpoint.seq
                        ));
                    }
                    if let Some(hash) = hashes.get(&checkpoint.seq)
                        && *hash != checkpoint.hash
                    {
                        return Err(format!(
                            "line {number}: the checkpoint signed record {} with another hash \
                             than the bundle holds: the range was rewritten",
                            checkpoint.seq
                        ));
                    }
                }
                hashes.insert(record.seq, record.hash.clone());
                prev_hash = record.hash;
                expected += 1;
                records += 1;
            }
            Line::Checkpoint(checkpoint) => {
                check_signed(&checkpoint, &mut accepted, &mut report)
                    .map_err(|why| format!("line {number}: the last checkpoint {why}"))?;
                signed_end = Some(checkpoint);
            }
        }
    }
    let (Some(signed), Some(end)) = (signed_end, end) else {
        return Err("the bundle ends early: its last checkpoint or its end line is missing".into());
    };
    let last = expected - 1;
    if records == 0 || signed.seq != last || signed.hash != prev_hash {
        return Err(format!(
            "the last checkpoint signs record {} but the bundle's records end at {last} with \
             another hash: the range is not covered by its signature (spliced or cut)",
            signed.seq
        ));
    }
    if end.end != last || end.records != records {
        return Err(format!(
            "the end line says records to {} ({} of them) but the bundle holds {records}, to \
             {last}",
            end.end, end.records
        ));
    }
    report.to = last;
    report.last_hash = prev_hash;
    Ok(report)
}

/// A checkpoint's signature verified and its key accepted (given, or announced by an
/// accepted key: a rotation), then counted.
fn check_signed(
    checkpoint: &Checkpoint,
    accepted: &mut AcceptedKeys,
    report: &mut BundleReport,
) -> Result<(), String> {
    checkpoint.verify()?;
    accepted
        .accept(checkpoint)
        .map_err(|why| format!("was {why}"))?;
    if !report.keys.contains(&checkpoint.key) {
        report.keys.push(checkpoint.key.clone());
    }
    report.checkpoints += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_sequences_or_times() {
        assert_eq!("12".parse::<Bound>(), Ok(Bound::Seq(12)));
        assert_eq!(
            "1970-01-01T00:00:01Z".parse::<Bound>(),
            Ok(Bound::AtMs(1000))
        );
        assert_eq!(
            "1970-01-01T01:00:01+01:00".parse::<Bound>(),
            Ok(Bound::AtMs(1000))
        );
        for bad in ["", "-1", "yesterday", "2026-12-01"] {
            let refused = bad.parse::<Bound>().unwrap_err();
            assert!(refused.contains("RFC 3339"), "{bad}: {refused}");
        }
    }
}
