//! The PostgreSQL store: every operation of [`Store`] on a pool of connections to one schema
//! of one database, for deployments that keep larkgate's state in a database server (and, in
//! time, many replicas sharing it).
//!
//! - **Same meaning as SQLite.** Each operation does what the SQLite store's does, in a
//!   transaction where that one has one; the store test suite runs on both. Conflicts that
//!   SQLite settles with its single writer are settled here by constraints and single
//!   statements (one pending approval per call is a partial unique index; an approval is
//!   consumed by one conditional `UPDATE`; a script's next version is numbered under a row
//!   lock on its draft).
//! - **Connections.** `deadpool-postgres` keeps up to `pool_size` connections; each starts with
//!   `search_path` set to the schema and `lock_timeout` set to the busy timeout. A call that
//!   waits longer than that for a connection or a row lock is refused as busy
//!   ([`StoreError::is_busy`]); one that cannot reach the database as unavailable
//!   ([`StoreError::is_unavailable`]). A connection the server closed is dropped and replaced
//!   at the next checkout, so service resumes by itself when the database comes back.
//! - **Migrations** (`migrations.rs`) run at open under an advisory lock, and a schema newer
//!   than this larkgate is refused.
//! - **Any number of processes chain into one audit chain** ([`crate::AuditStore::chain_audit`]): each
//!   batch is linked after the head under a transaction-level advisory lock on the schema's
//!   chain, so the lock is held for one batch, never per record and never across a crash. A
//!   replica's name is held by one live process at a time ([`crate::AuditStore::claim_audit_replica`]: a
//!   session-level advisory lock on a connection of its own). A record appended already
//!   chained whose sequence is stored with another hash is refused (the chain forked), never
//!   skipped.
//! - **Changes reach every process** ([`Store::watch_changes`], `changes.rs`): a connection
//!   of its own listens for the notifications the triggers of migration 2 send, so a script
//!   published or an upstream changed through one replica is followed by the others at once.
//! - **No TLS** to the database yet: the URL is refused if it asks for it (see
//!   [`PostgresSettings::validate`]).
//!
//! The SQL lives in one file per section of the trait, as for SQLite.

mod approvals;
mod audit;
mod changes;
mod kv;
mod migrations;
mod principals;
mod scripts;
mod servers;
mod sessions;
pub mod settings;
/// Test schemas on a test server, for this crate's tests and the crates above (the `testing`
/// feature, which only their dev-dependencies turn on: never in a build of larkgate itself).
#[cfg(feature = "testing")]
pub mod testing;
mod upstreams;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::NoTls;

pub use migrations::{Migrated, SCHEMA_VERSION};
pub use settings::PostgresSettings;

use crate::{PoolStatus, Result, Store, StoreError};

/// The PostgreSQL implementation of [`Store`].
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    config: tokio_postgres::Config,
    schema: String,
    busy_timeout: Duration,
    described: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("at", &self.described)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects (checking the settings first), and brings the schema to this larkgate's
    /// version. A database that cannot be reached is [`StoreError::Open`], saying where and
    /// why.
    pub async fn open(settings: &PostgresSettings) -> Result<Self> {
        let store = Self::connect(settings)?;
        store.migrate().await?;
        Ok(store)
    }

    /// The pool, without touching the database (no migration, no connection yet).
    pub fn connect(settings: &PostgresSettings) -> Result<Self> {
        let described = settings.describe();
        let config = settings.validate().map_err(|reason| StoreError::Open {
            path: described.clone(),
            reason,
        })?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // A connection is checked with a round trip before it is handed out, so a
                // connection the server dropped (a restart, a failover) is replaced rather
                // than failing the call it was given to.
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(settings.busy_timeout))
            .create_timeout(Some(settings.connect_timeout))
            .recycle_timeout(Some(settings.connect_timeout))
            .build()
            .map_err(|e| StoreError::Open {
                path: described.clone(),
                reason: e.to_string(),
            })?;
        Ok(PostgresStore {
            pool,
            config,
            schema: settings.schema.clone(),
            busy_timeout: settings.busy_timeout,
            described,
        })
    }

    /// Applies pending migrations (see the module documentation).
    pub async fn migrate(&self) -> Result<Migrated> {
        self.migrate_to(SCHEMA_VERSION).await
    }

    /// Applies pending migrations up to `version` only: how tests make a schema as an older
    /// larkgate left it.
    #[doc(hidden)]
    pub async fn migrate_to(&self, version: i64) -> Result<Migrated> {
        let mut client = self.client().await.map_err(|e| self.open_error(e))?;
        migrations::run(&mut client, &self.schema, version).await
    }

    /// The schema's version as stored (0 for a schema larkgate has not used).
    pub async fn schema_version(&self) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT version FROM {}.larkgate_schema WHERE id = 1",
                    self.schema
                ),
                &[],
            )
            .await;
        match row {
            Ok(row) => Ok(row.map_or(0, |r| r.get(0))),
            // No such table: the schema was never migrated.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// A connection from the pool.
    async fn client(&self) -> Result<Object> {
        self.pool
            .get()
            .await
            .map_err(|error| pool_error(error, self.busy_timeout))
    }

    fn open_error(&self, error: StoreError) -> StoreError {
        StoreError::Open {
            path: self.described.clone(),
            reason: error.to_string(),
        }
    }
}

/// A pool failure as a store error: waiting too long for a free connection is busy (the
/// database works, larkgate is using every connection); failing to connect is unavailable.
fn pool_error(error: PoolError, busy_timeout: Duration) -> StoreError {
    match error {
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::Busy(format!(
            "no database connection became free within {} ms",
            busy_timeout.as_millis()
        )),
        PoolError::Timeout(_) => {
            StoreError::Unavailable("connecting to the database timed out".to_owned())
        }
        PoolError::Backend(error) => StoreError::Unavailable(unavailable_reason(&error)),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// Why a connection failed, in words an operator acts on (the driver's own text, whose cause
/// is an I/O error or the server's message; it never holds the password).
fn unavailable_reason(error: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    match (error.as_db_error(), error.source()) {
        (Some(db), _) => format!("the database refused: {}", db.message()),
        (None, Some(cause)) => format!("{error}: {cause}"),
        (None, None) => error.to_string(),
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.described.clone()
    }
    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }
    fn pool_status(&self) -> Option<PoolStatus> {
        let status = self.pool.status();
        Some(PoolStatus {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        })
    }
    fn shared_by_replicas(&self) -> bool {
        true
    }
    fn watch_changes(&self) -> Option<tokio::sync::broadcast::Receiver<crate::Change>> {
        Some(changes::listen(self))
    }
}
