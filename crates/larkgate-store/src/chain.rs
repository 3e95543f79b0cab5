//! How records join the audit chain: the hash every record carries, and how a replica's
//! journaled records are linked after the chain's head ([`crate::AuditStore::chain_audit`]).
//!
//! Each larkgate process (a *replica*: one data directory) numbers its records in its own
//! journal (`local_seq`). The chain's global sequence and hashes are assigned only when a batch
//! of them reaches the store, under the store's lock on the chain, so any number of replicas
//! append to one chain without a lock per record. Both stores link with [`link`]; they differ
//! only in how they lock, look up and insert.
//!
//! What linking guarantees, whatever order batches, replays and replicas arrive in:
//! - **exactly once**: a record whose `(replica, local_seq)` the chain already holds is a replay
//!   and is skipped; a forwarded entry (the audit inbox) is chained by the one replica whose
//!   transaction deletes it from the inbox, and skipped by any other that also took it;
//! - **an outcome after its intent**: a replica's records are linked in its local order, and an
//!   outcome's intent (named by its local sequence in the journal) is translated to the
//!   intent's global sequence, which is always lower.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{AuditHead, AuditRecord};

/// The hash before the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The fields a record's hash covers, in a fixed order. The replica fields are left out when
/// absent, so records chained before replicas were named keep their hashes.
#[derive(Serialize)]
struct HashInput<'a> {
    seq: u64,
    at_ms: i64,
    kind: &'a str,
    principal: &'a str,
    run_id: &'a Option<String>,
    run_kind: &'a Option<String>,
    session: &'a Option<String>,
    tool: &'a Option<String>,
    args_hash: &'a Option<String>,
    args: &'a Option<String>,
    code: &'a Option<String>,
    intent_seq: Option<u64>,
    duration_us: Option<u64>,
    detail: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local_seq: Option<u64>,
    prev_hash: &'a str,
}

/// The hash a record should carry.
pub fn record_hash(record: &AuditRecord) -> String {
    let input = HashInput {
        seq: record.seq,
        at_ms: record.at_ms,
        kind: record.kind.as_str(),
        principal: &record.principal,
        run_id: &record.run_id,
        run_kind: &record.run_kind,
        session: &record.session,
        tool: &record.tool,
        args_hash: &record.args_hash,
        args: &record.args,
        code: &record.code,
        intent_seq: record.intent_seq,
        duration_us: record.duration_us,
        detail: &record.detail,
        replica: record.replica.as_deref(),
        local_seq: record.local_seq,
        prev_hash: &record.prev_hash,
    };
    // Serializing plain strings and integers cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// A record as a replica journals it, before it is chained: `local_seq` is set, `seq`,
/// `prev_hash` and `hash` are not yet, and an outcome's `intent_seq` is its intent's *local*
/// sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledAudit {
    /// The record.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// The inbox entry it adopted (a forwarded event), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<i64>,
}

/// The local sequences a batch needs looked up in the chain: its own (to skip replays) and the
/// intents its outcomes refer to.
pub(crate) fn local_seqs(entries: &[JournaledAudit]) -> Vec<u64> {
    let mut seqs: Vec<u64> = entries
        .iter()
        .flat_map(|e| [e.record.local_seq, intent_of(e)])
        .flatten()
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

/// The inbox entries a batch adopts, among the records the chain does not hold yet.
pub(crate) fn adopted_ids(entries: &[JournaledAudit], chained: &HashMap<u64, u64>) -> Vec<i64> {
    entries
        .iter()
        .filter(|e| !e.record.local_seq.is_some_and(|l| chained.contains_key(&l)))
        .filter_map(|e| e.adopted)
        .collect()
}

fn intent_of(entry: &JournaledAudit) -> Option<u64> {
    (entry.record.kind == crate::AuditKind::Outcome)
        .then_some(entry.record.intent_seq)
        .flatten()
}

/// Links `entries` (one replica's, in its local order) after `head`. `chained` maps the local
/// sequences the chain already holds from this replica to their global sequences; `deleted`
/// holds the inbox entries this transaction removed (an adopted entry not among them was
/// chained by another replica). Returns the records to insert, in order.
pub(crate) fn link(
    head: Option<AuditHead>,
    replica: &str,
    entries: Vec<JournaledAudit>,
    chained: &HashMap<u64, u64>,
    deleted: &HashSet<i64>,
) -> Vec<AuditRecord> {
    let (mut seq, mut prev_hash) = head.map_or((0, GENESIS_HASH.to_owned()), |h| (h.seq, h.hash));
    let mut global = chained.clone();
    let mut linked = Vec::with_capacity(entries.len());
    for JournaledAudit {
        mut record,
        adopted,
    } in entries
    {
        let Some(local) = record.local_seq else {
            continue;
        };
        if global.contains_key(&local) {
            continue;
        }
        if adopted.is_some_and(|id| !deleted.contains(&id)) {
            continue;
        }
        if record.kind == crate::AuditKind::Outcome {
            let intent = record.intent_seq;
            record.intent_seq = intent.and_then(|l| global.get(&l).copied());
            if intent.is_some() && record.intent_seq.is_none() {
                tracing::error!(
                    replica,
                    local,
                    "an outcome's intent is not in the audit chain; it is chained without one"
                );
            }
        }
        seq += 1;
        record.seq = seq;
        record.replica = Some(replica.to_owned());
        record.prev_hash = prev_hash;
        record.hash = record_hash(&record);
        prev_hash = record.hash.clone();
        global.insert(local, seq);
        linked.push(record);
    }
    linked
}

/// A replica's name: what a data directory is known by in the chain. Letters, digits, `-` and
/// `_`, 1 to 64 of them.
pub fn valid_replica(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuditKind;

    fn entry(
        local: u64,
        kind: AuditKind,
        intent: Option<u64>,
        adopted: Option<i64>,
    ) -> JournaledAudit {
        JournaledAudit {
            record: AuditRecord {
                seq: 0,
                at_ms: 1,
                kind,
                principal: "ada".into(),
                run_id: None,
                run_kind: None,
                session: None,
                tool: Some("kv_set".into()),
                args_hash: None,
                args: None,
                code: None,
                intent_seq: intent,
                duration_us: None,
                detail: None,
                replica: None,
                local_seq: Some(local),
                prev_hash: String::new(),
                hash: String::new(),
            },
            adopted,
        }
    }

    #[test]
    fn links_in_order_and_translates_intents() {
        let head = AuditHead {
            seq: 10,
            hash: "ab".repeat(32),
        };
        // Intent 4 was chained earlier as global 7; intent 5 comes in this batch.
        let chained = HashMap::from([(4, 7)]);
        let entries = vec![
            entry(5, AuditKind::Intent, None, None),
            entry(6, AuditKind::Outcome, Some(4), None),
            entry(7, AuditKind::Outcome, Some(5), None),
        ];
        let linked = link(Some(head.clone()), "r1", entries, &chained, &HashSet::new());
        assert_eq!(
            linked.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [11, 12, 13]
        );
        assert_eq!(linked[0].prev_hash, head.hash);
        assert_eq!(linked[1].prev_hash, linked[0].hash);
        assert_eq!(linked[1].intent_seq, Some(7));
        assert_eq!(linked[2].intent_seq, Some(11));
        assert!(linked.iter().all(|r| r.hash == record_hash(r)));
        assert!(linked.iter().all(|r| r.replica.as_deref() == Some("r1")));
    }

    #[test]
    fn skips_replays_and_entries_another_replica_adopted() {
        let chained = HashMap::from([(1, 1)]);
        let deleted = HashSet::from([20]);
        let entries = vec![
            entry(1, AuditKind::Intent, None, None),
            entry(2, AuditKind::Event, None, Some(20)),
            entry(3, AuditKind::Event, None, Some(21)),
            entry(4, AuditKind::Outcome, Some(1), None),
        ];
        let linked = link(None, "r1", entries, &chained, &deleted);
        assert_eq!(
            linked.iter().map(|r| r.local_seq).collect::<Vec<_>>(),
            [Some(2), Some(4)]
        );
        assert_eq!(linked[0].prev_hash, GENESIS_HASH);
        assert_eq!(linked[1].intent_seq, Some(1));
    }

    #[test]
    fn replica_fields_change_the_hash_only_when_present() {
        let mut record = entry(3, AuditKind::Intent, None, None).record;
        record.local_seq = None;
        let unnamed = record_hash(&record);
        record.replica = Some("r1".into());
        record.local_seq = Some(3);
        assert_ne!(record_hash(&record), unnamed);
    }

    #[test]
    fn replica_names() {
        for good in ["a", "r1", "eu-west_2", &"x".repeat(64)] {
            assert!(valid_replica(good), "{good}");
        }
        for bad in ["", "a b", "a/b", "../x", "r1;", "é", &"x".repeat(65)] {
            assert!(!valid_replica(bad), "{bad}");
        }
    }
}
