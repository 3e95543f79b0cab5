//! The audit chain in PostgreSQL: replicas' batches linked after the head under the chain's
//! advisory lock and appended in one statement with the head moved in the same transaction, a
//! refusal of any chained record that would fork the chain, the inbox of entries forwarded by
//! processes that do not own a data directory, and the claim on a replica's name.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tokio_postgres::{NoTls, Row};

use super::PostgresStore;
use crate::AuditStore;
use crate::chain::{self, JournaledAudit};
use crate::rows::{self, AUDIT_COLUMNS, AUDIT_HEAD_COLUMNS, FORWARDED_COLUMNS};
use crate::{
    AuditChainClaim, AuditHead, AuditQuery, AuditRecord, ForwardedAudit, Result, StoreError, signed,
};

/// The chain's head as last written.
async fn read_head(client: &impl GenericClient) -> Result<Option<AuditHead>> {
    client
        .query_opt(
            &format!("SELECT {AUDIT_HEAD_COLUMNS} FROM audit_head WHERE id = 1"),
            &[],
        )
        .await?
        .as_ref()
        .map(rows::audit_head)
        .transpose()
}

/// Inserts chained records in one statement (a record already stored under its sequence is a
/// replay, unless it differs: see [`refuse_a_fork`]) and moves the head forward.
async fn insert(tx: &deadpool_postgres::Transaction<'_>, records: &[AuditRecord]) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    // The batch goes in as one statement: a column of values per field.
    let seqs: Vec<i64> = records.iter().map(|r| signed(r.seq)).collect();
    let at: Vec<i64> = records.iter().map(|r| r.at_ms).collect();
    let kinds: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
    let principals: Vec<&str> = records.iter().map(|r| r.principal.as_str()).collect();
    let text = |f: fn(&AuditRecord) -> &Option<String>| -> Vec<Option<&str>> {
        records.iter().map(|r| f(r).as_deref()).collect()
    };
    let run_ids = text(|r| &r.run_id);
    let run_kinds = text(|r| &r.run_kind);
    let sessions = text(|r| &r.session);
    let tools = text(|r| &r.tool);
    let args_hashes = text(|r| &r.args_hash);
    let args = text(|r| &r.args);
    let codes = text(|r| &r.code);
    let details = text(|r| &r.detail);
    let intents: Vec<Option<i64>> = records.iter().map(|r| r.intent_seq.map(signed)).collect();
    let durations: Vec<Option<i64>> = records.iter().map(|r| r.duration_us.map(signed)).collect();
    let prev_hashes: Vec<&str> = records.iter().map(|r| r.prev_hash.as_str()).collect();
    let hashes: Vec<&str> = records.iter().map(|r| r.hash.as_str()).collect();
    let replicas = text(|r| &r.replica);
    let local_seqs: Vec<Option<i64>> = records.iter().map(|r| r.local_seq.map(signed)).collect();
    let statement = tx
        .prepare_cached(&format!(
            "INSERT INTO audit ({AUDIT_COLUMNS}) \
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
                 $11::text[], $12::bigint[], $13::bigint[], $14::text[], $15::text[], \
                 $16::text[], $17::text[], $18::bigint[]) \
             ON CONFLICT (seq) DO NOTHING RETURNING seq"
        ))
        .await?;
    let inserted = tx
        .query(
            &statement,
            &[
                &seqs,
                &at,
                &kinds,
                &principals,
                &run_ids,
                &run_kinds,
                &sessions,
                &tools,
                &args_hashes,
                &args,
                &codes,
                &intents,
                &durations,
                &details,
                &prev_hashes,
                &hashes,
                &replicas,
                &local_seqs,
            ],
        )
        .await?;
    if inserted.len() < records.len() {
        refuse_a_fork(tx, records, &inserted).await?;
    }
    let last = records
        .iter()
        .max_by_key(|r| r.seq)
        .expect("records is not empty");
    // The head only moves forward: a replayed older batch leaves it alone.
    tx.execute(
        "INSERT INTO audit_head (id, seq, hash) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash \
         WHERE excluded.seq > audit_head.seq",
        &[&signed(last.seq), &last.hash],
    )
    .await?;
    Ok(())
}

/// Records whose sequence was already stored are a replay (skipped) only if what is stored is
/// the same record; another record there means two processes chained on one head, and the
/// batch is refused (it stays in its owner's journal) rather than silently dropped.
async fn refuse_a_fork(
    tx: &deadpool_postgres::Transaction<'_>,
    records: &[AuditRecord],
    inserted: &[Row],
) -> Result<()> {
    let inserted: std::collections::HashSet<i64> =
        inserted.iter().map(|row| row.get::<_, i64>(0)).collect();
    let skipped: Vec<i64> = records
        .iter()
        .map(|r| signed(r.seq))
        .filter(|seq| !inserted.contains(seq))
        .collect();
    let stored = tx
        .query(
            "SELECT seq, hash FROM audit WHERE seq = ANY($1)",
            &[&skipped],
        )
        .await?;
    let stored: std::collections::HashMap<i64, String> =
        stored.iter().map(|row| (row.get(0), row.get(1))).collect();
    for record in records {
        let seq = signed(record.seq);
        if let Some(hash) = stored.get(&seq).filter(|hash| **hash != record.hash) {
            return Err(StoreError::Invalid(format!(
                "audit record {seq} is already stored with another hash ({hash}, not {}): \
                 two larkgate processes have appended to one chain",
                record.hash
            )));
        }
    }
    Ok(())
}

/// The advisory lock (with the schema's hash) under which a batch is linked to the chain.
const CHAIN_LOCK: i32 = 1818325609;

/// What keeps a claim: the connection holding the advisory lock, and the task driving it.
/// Dropping it closes the connection, which releases the lock.
struct Held {
    _client: tokio_postgres::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait::async_trait]
impl AuditStore for PostgresStore {
    /// Claims the name `replica` in this schema with a session-level advisory lock on a connection
    /// of its own (not the pool's: the lock lives as long as that session). `None` if another
    /// process holds it.
    async fn claim_audit_replica(&self, replica: &str) -> Result<Option<AuditChainClaim>> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| StoreError::Unavailable(super::unavailable_reason(&e)))?;
        let task = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "the connection holding the audit chain's claim ended");
            }
        });
        let held = Held {
            _client: client,
            task,
        };
        let claimed: bool = held
            ._client
            .query_one(
                "SELECT pg_try_advisory_lock(1818325608, hashtext($1 || '/' || $2))",
                &[&self.schema, &replica],
            )
            .await?
            .try_get(0)?;
        Ok(claimed.then(|| AuditChainClaim::held(Box::new(held))))
    }

    /// Links a replica's batch after the head (see [`crate::chain`]) in one transaction that holds
    /// the schema's chain lock until it commits.
    async fn chain_audit(&self, replica: &str, entries: Vec<JournaledAudit>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }

        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&CHAIN_LOCK, &self.schema],
        )
        .await?;
        let locals: Vec<i64> = chain::local_seqs(&entries)
            .into_iter()
            .map(signed)
            .collect();
        let rows = tx
            .query(
                "SELECT local_seq, seq FROM audit WHERE replica = $1 AND local_seq = ANY($2)",
                &[&replica, &locals],
            )
            .await?;
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        let chained: HashMap<u64, u64> = rows
            .iter()
            .map(|row| Ok((unsigned(row.try_get(0)?), unsigned(row.try_get(1)?))))
            .collect::<Result<_>>()?;
        let adopted = chain::adopted_ids(&entries, &chained);
        let deleted: HashSet<i64> = if adopted.is_empty() {
            HashSet::new()
        } else {
            tx.query(
                "DELETE FROM audit_inbox WHERE id = ANY($1) RETURNING id",
                &[&adopted],
            )
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<std::result::Result<_, _>>()?
        };
        let head = read_head(&tx).await?;
        let records = chain::link(head, replica, entries, &chained, &deleted);
        insert(&tx, &records).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn audit_local_head(&self, replica: &str) -> Result<u64> {
        let client = self.client().await?;
        let last: Option<i64> = client
            .query_one(
                "SELECT MAX(local_seq) FROM audit WHERE replica = $1",
                &[&replica],
            )
            .await?
            .try_get(0)?;
        Ok(last.map_or(0, |l| u64::try_from(l).unwrap_or(0)))
    }

    async fn write_audit(&self, records: Vec<AuditRecord>, adopted: Vec<i64>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !adopted.is_empty() {
            tx.execute("DELETE FROM audit_inbox WHERE id = ANY($1)", &[&adopted])
                .await?;
        }
        insert(&tx, &records).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Commits one entry to the inbox. The trait's callers are synchronous (an audit sink), so
    /// this blocks: on a multi-threaded runtime it borrows the pool; anywhere else it uses a
    /// connection of its own on a thread of its own (the pool's connections are driven by a
    /// runtime this thread may be the one to drive).
    fn forward_audit(&self, at_ms: i64, entry: &str) -> Result<i64> {
        const INSERT: &str = "INSERT INTO audit_inbox (at_ms, entry) VALUES ($1, $2) RETURNING id";
        use tokio::runtime::{Handle, RuntimeFlavor};
        if let Ok(handle) = Handle::try_current()
            && handle.runtime_flavor() == RuntimeFlavor::MultiThread
        {
            return tokio::task::block_in_place(|| {
                handle.block_on(async {
                    let client = self.client().await?;
                    Ok(client
                        .query_one(INSERT, &[&at_ms, &entry])
                        .await?
                        .try_get(0)?)
                })
            });
        }
        let config = self.config.clone();
        std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<i64> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| StoreError::Task(e.to_string()))?;
                    runtime.block_on(async {
                        let (client, connection) = config
                            .connect(NoTls)
                            .await
                            .map_err(|e| StoreError::Unavailable(super::unavailable_reason(&e)))?;
                        tokio::spawn(connection);
                        Ok(client
                            .query_one(INSERT, &[&at_ms, &entry])
                            .await?
                            .try_get(0)?)
                    })
                })
                .join()
                .map_err(|_| StoreError::Task("forwarding an audit entry panicked".to_owned()))?
        })
    }

    async fn forwarded_audit(&self, limit: usize) -> Result<Vec<ForwardedAudit>> {
        let limit = signed(limit as u64);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {FORWARDED_COLUMNS} FROM audit_inbox ORDER BY id LIMIT $1"
            ))
            .await?;
        let rows = client.query(&statement, &[&limit]).await?;
        rows.iter().map(rows::forwarded).collect()
    }

    async fn audit_head(&self) -> Result<Option<AuditHead>> {
        read_head(&self.client().await?).await
    }

    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>> {
        let order = if query.newest { "DESC" } else { "ASC" };
        let client = self.client().await?;
        let limit = query.limit.map(|l| signed(l as u64));
        let rows = client
            .query(
                &format!(
                    "SELECT {AUDIT_COLUMNS} FROM audit \
                 WHERE ($1::bigint IS NULL OR seq > $1) AND ($2::text IS NULL OR principal = $2) \
                   AND ($3::text IS NULL OR tool = $3) \
                 ORDER BY seq {order} LIMIT $4"
                ),
                &[
                    &query.after_seq.map(signed),
                    &query.principal,
                    &query.tool,
                    &limit,
                ],
            )
            .await?;
        let mut records = rows.iter().map(rows::audit).collect::<Result<Vec<_>>>()?;
        if query.newest {
            records.reverse();
        }
        Ok(records)
    }
}
