//! Integration tests of the SQLite store, on real files in temporary directories.

mod approvals;
mod audit;
mod crash;
mod kv;
mod locks;
mod principals;
mod scripts;
mod upstreams;

use larkgate_store::SqliteStore;

/// A store in a fresh temporary directory (kept alive by the returned guard).
pub(crate) fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(dir.path()).expect("store opens");
    (dir, store)
}
