//! The embedded SQLite store: one file, WAL, every write in a transaction.
//!
//! Durability: with WAL and `synchronous = NORMAL`, a committed transaction has been written
//! to the WAL file before the commit returns, so it survives the process being killed (it may
//! not survive the machine losing power before the next checkpoint; set
//! `synchronous = FULL` through [`SqliteStore::open_with`] for that).
//!
//! Every write, and every read but two, goes through one connection behind a mutex, on tokio's
//! blocking pool. The two reads every request makes (its token, its principal) go through a
//! second, read-only connection on the caller's own thread: see [`SqliteStore::read`].
//!
//! Each section of the store is implemented in a file of its own: `principals.rs` (principals
//! and tokens), `kv.rs`, `approvals.rs`, `scripts.rs` (drafts, versions and runs),
//! `upstreams.rs` (upstreams, pins and credentials), `sessions.rs`, `audit.rs` (the chain and
//! the inbox); `migrations.rs` keeps the schema.

mod approvals;
mod audit;
mod backup;
mod kv;
mod migrations;
mod principals;
mod scripts;
mod servers;
mod sessions;
mod upstreams;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};

use crate::{Result, Store, StoreError};

/// How hard SQLite works to keep a commit across a power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// Survives a process crash; the default.
    #[default]
    Normal,
    /// Also survives power loss, at the cost of an fsync per commit.
    Full,
}

/// The SQLite implementation of [`Store`].
#[derive(Clone, Debug)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
    /// Read-only, for the point reads of [`SqliteStore::read`].
    reader: Arc<Mutex<Connection>>,
    path: PathBuf,
}

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "larkgate.sqlite3";

/// How long a write waits for another connection's write lock before it is reported busy
/// ([`StoreError::is_busy`]), unless [`SqliteStore::set_busy_timeout`] says otherwise.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, and runs pending migrations.
    pub fn open(data_dir: &Path) -> Result<Self> {
        Self::open_with(data_dir, Synchronous::default())
    }

    /// [`SqliteStore::open`] with a chosen durability level.
    pub fn open_with(data_dir: &Path, synchronous: Synchronous) -> Result<Self> {
        let open_error = |reason: String| StoreError::Open {
            path: data_dir.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(data_dir).map_err(|e| open_error(e.to_string()))?;
        let path = data_dir.join(DATABASE_FILE);
        let mut connection = Connection::open(&path).map_err(|e| open_error(e.to_string()))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(
            None,
            "synchronous",
            match synchronous {
                Synchronous::Normal => "NORMAL",
                Synchronous::Full => "FULL",
            },
        )?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        migrations::run(&mut connection)?;
        // Opened after the migrations, so it sees the schema they made. It never waits for a
        // lock: `read` falls back to the blocking pool instead.
        let reader = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| open_error(e.to_string()))?;
        reader.busy_timeout(std::time::Duration::ZERO)?;
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            reader: Arc::new(Mutex::new(reader)),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets how long a write waits for another connection's write lock before it fails as busy
    /// (default [`BUSY_TIMEOUT`]). A test that reaches the timeout sets a short one.
    pub fn set_busy_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        Ok(self.lock().busy_timeout(timeout)?)
    }

    /// The schema's version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64> {
        Ok(self
            .lock()
            .pragma_query_value(None, "user_version", |row| row.get(0))?)
    }

    /// The writing connection, on the calling thread. A panic while holding the lock cannot
    /// leave a transaction half-applied (SQLite rolls it back), so a poisoned lock is safe to
    /// keep using.
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot leave a transaction half-applied (SQLite
            // rolls it back), so a poisoned lock is safe to keep using.
            let mut guard = connection
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Runs the point read `f` (one row by its key) on the read-only connection, on the
    /// calling thread, when it can do so without waiting; else as [`SqliteStore::with`] does.
    ///
    /// Every request reads its token and its principal, and a trip to the blocking pool and
    /// back costs more than such a read (two thread wake-ups; on two cores, a good part of a
    /// call). Why running it here cannot stall the runtime:
    /// - the reader never waits for a lock: its busy timeout is zero, and in WAL mode a
    ///   reader does not wait for writers anyway; a read that finds the database busy is
    ///   retried on the blocking pool, where waiting is allowed;
    /// - it never waits for another thread: the reader is taken only when free (`try_lock`);
    ///   when another request is reading, this one goes to the blocking pool;
    /// - `f` is a lookup by primary key, so its work is bounded by the depth of one index.
    ///
    /// Each read is its own transaction, started after the last commit of any connection, so
    /// it sees a revocation committed before it began: nothing is cached.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> Result<T> + Send + 'static,
    {
        if let Some(done) = self.read_here(&f) {
            return done;
        }
        self.with(f).await
    }

    /// [`SqliteStore::read`] on this thread: `None` when the reader is taken or the database
    /// was busy.
    fn read_here<T>(&self, f: &impl Fn(&mut Connection) -> Result<T>) -> Option<Result<T>> {
        let mut reader = match self.reader.try_lock() {
            Ok(guard) => guard,
            // A panic during a read leaves nothing half-applied.
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        match f(&mut reader) {
            Err(error) if error.is_busy() => None,
            done => Some(done),
        }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("SQLite database {}", self.path.display())
    }

    async fn ping(&self) -> Result<()> {
        self.with(|c| Ok(c.query_row("SELECT 1", [], |_| Ok(()))?))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        (dir, store)
    }

    fn one(c: &mut Connection) -> Result<i64> {
        Ok(c.query_row("SELECT 1", [], |row| row.get(0))?)
    }

    // A point read finding the database busy is not failed: it is made again on the blocking
    // pool, where it may wait within the busy timeout.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_that_finds_the_database_busy_is_made_again_where_it_may_wait() {
        let (_dir, store) = store();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&attempts);
        let read = store
            .read(move |c| {
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        None,
                    )
                    .into());
                }
                one(c)
            })
            .await;
        assert_eq!(read.unwrap(), 1);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);

        // Another failure is the answer: it is not made again.
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&attempts);
        let read = store
            .read(move |c| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(c.query_row("SELECT nothing FROM nowhere", [], |row| {
                    row.get::<_, i64>(0)
                })?)
            })
            .await;
        assert!(read.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    // While another request holds the reader, a read does not wait for it: it is made on the
    // blocking pool.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_while_the_reader_is_taken_goes_to_the_blocking_pool() {
        let (_dir, store) = store();
        // Another request reads: it holds the reader until told to let go.
        let (held, taken) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let reader = Arc::clone(&store.reader);
        let other = std::thread::spawn(move || {
            let _guard = reader.lock().unwrap();
            held.send(()).unwrap();
            released.recv().unwrap();
        });
        taken.recv().unwrap();
        let here = std::thread::current().id();
        let read = store
            .read(move |c| Ok((std::thread::current().id() != here, one(c)?)))
            .await
            .unwrap();
        release.send(()).unwrap();
        other.join().unwrap();
        assert_eq!(read, (true, 1), "made on another thread");
        let read = store
            .read(move |c| Ok((std::thread::current().id() == here, one(c)?)))
            .await
            .unwrap();
        assert_eq!(read, (true, 1), "made on the caller's thread");
    }

    // The reader cannot write, whatever a read is given.
    #[test]
    fn the_reader_cannot_write() {
        let (_dir, store) = store();
        let reader = store.reader.lock().unwrap();
        let refused = reader
            .execute("INSERT INTO kv (key, value) VALUES ('k', 'v')", [])
            .unwrap_err();
        assert!(refused.to_string().contains("readonly"), "{refused}");
    }
}
