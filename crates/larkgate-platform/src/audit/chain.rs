//! The chain: each record's hash covers its fields and the previous record's hash, so an edit,
//! an insertion or a deletion anywhere shows. [`verify`] recomputes it from the store.

use larkgate_store::{AuditKind, AuditQuery, Store, StoreError};

use super::EventKind;
use super::checkpoint::{AcceptedKeys, Checkpoint};

pub use larkgate_store::{GENESIS_HASH, record_hash};

/// What [`verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// How many records were checked.
    pub records: u64,
    /// The first record that breaks the chain, and why.
    pub first_broken: Option<(u64, String)>,
    /// A head ahead of the last record: records were deleted from the end.
    pub head_mismatch: Option<String>,
    /// A head recorded elsewhere (`--head SEQ:HASH`) that the chain does not reach or does not
    /// match: records were removed and the stored head rolled back, or the chain rewritten.
    pub known_head_mismatch: Option<String>,
    /// Intents with no outcome (a call still running, or one whose outcome was lost).
    pub intents_without_outcome: Vec<u64>,
    /// How many signed checkpoints were checked ([`super::checkpoint`]).
    pub checkpoints: u64,
    /// The keys that signed them, in the order first seen.
    pub signing_keys: Vec<String>,
    /// The first checkpoint that does not hold, and why: a bad signature, a key not trusted,
    /// or a signed head the chain no longer has (a rewrite).
    pub bad_checkpoint: Option<(u64, String)>,
    /// How many checkpoints anchored outside the database were checked against the chain.
    pub anchored: u64,
    /// The first anchored checkpoint the chain does not hold, and why: the database is
    /// shorter than it (rolled back, or its tail removed), or differs from it (rewritten).
    pub bad_anchor: Option<(usize, String)>,
}

impl VerifyReport {
    /// Whether the chain is intact (open intents are reported but do not break it).
    pub fn intact(&self) -> bool {
        self.first_broken.is_none()
            && self.head_mismatch.is_none()
            && self.known_head_mismatch.is_none()
            && self.bad_checkpoint.is_none()
            && self.bad_anchor.is_none()
    }
}

/// Recomputes the whole chain in the store.
pub async fn verify(store: &dyn Store) -> Result<VerifyReport, StoreError> {
    verify_against(store, None).await
}

/// A head as recorded outside the store: a sequence number and that record's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownHead {
    /// The record's sequence number.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

impl std::str::FromStr for KnownHead {
    type Err = String;

    /// `SEQ:HASH`, or `SEQ HASH` as `larkgate audit head` prints it.
    fn from_str(text: &str) -> Result<Self, String> {
        let (seq, hash) = text
            .trim()
            .split_once([':', ' '])
            .ok_or_else(|| format!("{text:?} is not SEQ:HASH (as `larkgate audit head` prints)"))?;
        let seq = seq
            .parse()
            .map_err(|_| format!("{seq:?} is not a sequence number"))?;
        let hash = hash.trim();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{hash:?} is not a SHA-256 in hex"));
        }
        Ok(KnownHead {
            seq,
            hash: hash.to_ascii_lowercase(),
        })
    }
}

/// [`verify`], and also that the chain reaches `known` (a head recorded elsewhere) and still
/// holds it: a store whose tail was deleted and whose head was rolled back to match is
/// otherwise a valid, shorter chain.
pub async fn verify_against(
    store: &dyn Store,
    known: Option<&KnownHead>,
) -> Result<VerifyReport, StoreError> {
    verify_trusting(store, known, &[]).await
}

/// [`verify_against`], and every checkpoint's signature checked: under the key it names, and,
/// when `trusted` keys are given, only keys among them or announced (`next_key`) by a
/// checkpoint one of them signed.
pub async fn verify_trusting(
    store: &dyn Store,
    known: Option<&KnownHead>,
    trusted: &[String],
) -> Result<VerifyReport, StoreError> {
    verify_anchored(store, known, trusted, &[]).await
}

/// [`verify_trusting`], and each of `anchored` (checkpoints kept outside the database, in the
/// order they were anchored) checked: signed as it says (by a key accepted as in
/// [`verify_trusting`]) and held by the chain, which a database rolled back to an earlier
/// state, or rewritten, does not.
pub async fn verify_anchored(
    store: &dyn Store,
    known: Option<&KnownHead>,
    trusted: &[String],
    anchored: &[Checkpoint],
) -> Result<VerifyReport, StoreError> {
    let mut accepted = AcceptedKeys::new(trusted);
    // (the checkpoint's record, the position it signed, the hash it signed there)
    let mut claims: Vec<(u64, u64, String)> = Vec::new();
    let mut report = VerifyReport::default();
    let mut prev_hash = GENESIS_HASH.to_owned();
    let mut expected_seq = 1;
    let mut open_intents = std::collections::BTreeSet::new();
    let mut after = None;
    loop {
        let page = store
            .audit_records(AuditQuery {
                after_seq: after,
                limit: Some(10_000),
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        for record in &page {
            report.records += 1;
            if report.first_broken.is_none() {
                let problem = if record.seq != expected_seq {
                    Some(format!(
                        "expected sequence {expected_seq}, found {}: records are missing",
                        record.seq
                    ))
                } else if record.prev_hash != prev_hash {
                    Some("its previous hash does not match the record before it".to_owned())
                } else if record_hash(record) != record.hash {
                    Some("its contents do not match its hash: it was edited".to_owned())
                } else if record.kind == AuditKind::Outcome
                    && record.intent_seq.is_some_and(|intent| intent >= record.seq)
                {
                    Some("it is an outcome chained before its intent".to_owned())
                } else {
                    None
                };
                if let Some(problem) = problem {
                    report.first_broken = Some((record.seq, problem));
                }
            }
            if let Some(known) = known
                && known.seq == record.seq
                && known.hash != record.hash
            {
                report.known_head_mismatch = Some(format!(
                    "record {} does not have the hash recorded for it: the chain was rewritten \
                     at or before it",
                    record.seq
                ));
            }
            if record.kind == AuditKind::Event
                && record.code.as_deref() == Some(EventKind::Checkpoint.as_str())
            {
                report.checkpoints += 1;
                let checked = checked_checkpoint(record, &mut accepted);
                match checked {
                    Ok(checkpoint) => {
                        if !report.signing_keys.contains(&checkpoint.key) {
                            report.signing_keys.push(checkpoint.key.clone());
                        }
                        claims.push((record.seq, checkpoint.seq, checkpoint.hash));
                    }
                    Err(why) if report.bad_checkpoint.is_none() => {
                        report.bad_checkpoint = Some((record.seq, why));
                    }
                    Err(_) => {}
                }
            }
            match record.kind {
                AuditKind::Intent => {
                    open_intents.insert(record.seq);
                }
                AuditKind::Outcome => {
                    if let Some(intent) = record.intent_seq {
                        open_intents.remove(&intent);
                    }
                }
                AuditKind::Refusal | AuditKind::Event | AuditKind::Review => {}
            }
            expected_seq = record.seq + 1;
            prev_hash = record.hash.clone();
        }
    }
    let last_seq = expected_seq - 1;
    if let Some(known) = known
        && known.seq > last_seq
    {
        report.known_head_mismatch = Some(format!(
            "the chain ends at record {last_seq}, before the head recorded at {}: records were \
             removed",
            known.seq
        ));
    }
    match store.audit_head().await? {
        Some(head) if head.seq > last_seq => {
            report.head_mismatch = Some(format!(
                "the head is at sequence {} but the last record is {last_seq}: records were \
                 deleted from the end",
                head.seq
            ));
        }
        Some(head) if head.seq == last_seq && head.hash != prev_hash => {
            report.head_mismatch =
                Some(format!("the head's hash does not match record {last_seq}"));
        }
        None if last_seq > 0 => {
            report.head_mismatch = Some("records exist but the head is missing".to_owned());
        }
        _ => {}
    }
    report.intents_without_outcome = open_intents.into_iter().collect();
    // Each signed head must still be in the chain as it was signed.
    for (at, seq, hash) in claims {
        if report.bad_checkpoint.is_some() {
            break;
        }
        let holds = record_at(store, seq)
            .await?
            .is_some_and(|record| record.hash == hash);
        if !holds {
            report.bad_checkpoint = Some((
                at,
                format!(
                    "it signed record {seq} with a hash the chain no longer has there: the \
                     chain was rewritten at or before record {seq}"
                ),
            ));
        }
    }
    for (index, checkpoint) in anchored.iter().enumerate() {
        report.anchored += 1;
        let signed = checkpoint.verify().and_then(|()| {
            accepted
                .check(checkpoint)
                .map_err(|why| format!("it was {why}"))
        });
        let problem = match signed {
            Err(why) => Some(why),
            Ok(()) if checkpoint.seq > last_seq => Some(format!(
                "it signs record {} but the chain ends at record {last_seq}: the database is \
                 shorter than what was anchored (rolled back to an earlier copy, or its newest \
                 records removed)",
                checkpoint.seq
            )),
            Ok(()) => {
                let holds = record_at(store, checkpoint.seq)
                    .await?
                    .is_some_and(|record| record.hash == checkpoint.hash);
                (!holds).then(|| {
                    format!(
                        "the chain holds another record {} than the one anchored: the database \
                         differs from what was anchored (rewritten at or before it, or rolled \
                         back and grown again)",
                        checkpoint.seq
                    )
                })
            }
        };
        if let Some(problem) = problem {
            report.bad_anchor = Some((index + 1, problem));
            break;
        }
    }
    Ok(report)
}

/// The record at `seq`, if the chain has one there.
pub(super) async fn record_at(
    store: &dyn Store,
    seq: u64,
) -> Result<Option<larkgate_store::AuditRecord>, StoreError> {
    let page = store
        .audit_records(AuditQuery {
            after_seq: seq.checked_sub(1),
            limit: Some(1),
            ..Default::default()
        })
        .await?;
    Ok(page.into_iter().next().filter(|r| r.seq == seq))
}

/// The checkpoint `record` holds, checked on its own: it reads, its signature verifies, it
/// is its replica's and signs an earlier position, and its key is accepted; a rotation it
/// announces is accepted from then on.
fn checked_checkpoint(
    record: &larkgate_store::AuditRecord,
    accepted: &mut AcceptedKeys,
) -> Result<Checkpoint, String> {
    let checkpoint: Checkpoint = record
        .detail
        .as_deref()
        .and_then(|detail| serde_json::from_str(detail).ok())
        .ok_or_else(|| "it does not read as a checkpoint".to_owned())?;
    checkpoint.verify()?;
    if record.replica.as_deref() != Some(checkpoint.replica.as_str()) {
        return Err(format!(
            "it was signed for replica {:?} but chained by another",
            checkpoint.replica
        ));
    }
    if checkpoint.seq >= record.seq {
        return Err(format!(
            "it signs record {}, which is not before it",
            checkpoint.seq
        ));
    }
    accepted
        .accept(&checkpoint)
        .map_err(|why| format!("it was {why}"))?;
    Ok(checkpoint)
}
