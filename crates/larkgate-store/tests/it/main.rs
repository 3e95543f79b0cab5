//! Integration tests of the store: one suite, run on both backends. Each test that holds for
//! every store is written once against a [`Place`] and run twice by [`on_both!`]: on SQLite in
//! a temporary directory, and on PostgreSQL in a schema of its own (dropped after). Tests of
//! one backend's own mechanics (SQLite's file lock and schema rollbacks; PostgreSQL's pool,
//! advisory locks and lost connections) stand alone.

mod approvals;
mod audit;
mod crash;
mod kv;
mod locks;
mod postgres;
mod principals;
mod scripts;
mod servers;
mod sessions;
mod upstreams;

use std::sync::Arc;

use larkgate_store::postgres::testing::TestSchema;
use larkgate_store::{
    ApprovalDetails, ApprovalFor, ApprovalRequest, Draft, PostgresStore, SqliteStore, Store,
};

/// Where a test's store lives. Opening it again is what another process sharing the store
/// would see.
pub(crate) enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(TestSchema),
}

impl Place {
    pub(crate) fn sqlite() -> Place {
        Place::Sqlite(tempfile::tempdir().expect("temporary directory"))
    }

    pub(crate) async fn postgres() -> Place {
        Place::Postgres(TestSchema::create().await)
    }

    /// Opens the store (migrating it on first use).
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        match self {
            Place::Sqlite(dir) => Arc::new(SqliteStore::open(dir.path()).expect("store opens")),
            Place::Postgres(schema) => Arc::new(
                PostgresStore::open(&schema.settings())
                    .await
                    .expect("store opens"),
            ),
        }
    }

    /// Runs `sql` on the store's database from outside it, as another program would.
    pub(crate) async fn execute(&self, sql: &str) {
        match self {
            Place::Sqlite(dir) => {
                rusqlite::Connection::open(dir.path().join(larkgate_store::DATABASE_FILE))
                    .unwrap()
                    .execute_batch(sql)
                    .unwrap();
            }
            Place::Postgres(schema) => schema.execute(sql).await,
        }
    }
}

/// Runs each named `async fn NAME(place: Place)` of the module as two tests, `NAME::sqlite`
/// and `NAME::postgres`.
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::Place::sqlite()).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::Place::postgres().await).await
                }
            }
        )*
    };
}

/// A request for approval of `call`, asked at `now_ms`, with what the approver is shown.
pub(crate) fn asked<'a>(
    call: ApprovalFor<'a>,
    details: &'a ApprovalDetails,
    now_ms: i64,
) -> ApprovalRequest<'a> {
    ApprovalRequest {
        call,
        details,
        now_ms,
        caps: larkgate_store::PendingCaps {
            per_principal: 1000,
            total: 1000,
        },
    }
}

/// The first page of pending approvals, larger than any test makes.
pub(crate) fn pending_page() -> larkgate_store::ApprovalQuery {
    larkgate_store::ApprovalQuery {
        status: Some(larkgate_store::ApprovalStatus::Pending),
        after: None,
        limit: 1000,
    }
}

/// A draft `name` by `author`, saved at `at_ms`.
pub(crate) fn draft(name: &str, source: &str, author: &str, at_ms: i64) -> Draft {
    Draft {
        name: name.to_owned(),
        source: source.to_owned(),
        author: author.to_owned(),
        updated_at_ms: at_ms,
    }
}
