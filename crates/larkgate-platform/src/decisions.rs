//! The approval decisions this process knows of, for calls that wait for one
//! ([`crate::approvals::wait`]): told by this process's own resolutions and, on a store that
//! tells of changes made through other processes (PostgreSQL), by the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use larkgate_store::{Change, Store};
use tokio::sync::watch;

/// How often a store that tells of decisions (PostgreSQL) is read anyway, in case a
/// notification was lost.
pub const POLL_TOLD: Duration = Duration::from_secs(5);

/// How often a store that cannot tell of decisions (SQLite) is read while a call waits.
pub const POLL_UNTOLD: Duration = Duration::from_millis(250);

/// The decisions this process knows of, as a counter that moves with each: waiting calls
/// watch it and read their approval again when it moves.
#[derive(Debug)]
pub struct Decisions {
    told: watch::Sender<u64>,
    /// Whether the store tells of decisions made elsewhere; settled by the first wait, which
    /// starts following them.
    followed: OnceLock<bool>,
    stopping: watch::Sender<bool>,
    /// How many calls each principal has held here now.
    held: Arc<Mutex<HashMap<String, u64>>>,
}

impl Default for Decisions {
    fn default() -> Self {
        Decisions {
            told: watch::Sender::new(0),
            followed: OnceLock::new(),
            stopping: watch::Sender::new(false),
            held: Arc::default(),
        }
    }
}

impl Decisions {
    /// Tells the waiting calls that an approval was decided (or withdrawn).
    pub fn told(&self) {
        self.told.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Follows the decisions this process knows of: the value moves with each.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.told.subscribe()
    }

    /// A place for one more held call of `principal`, if it has fewer than `most` held here:
    /// given back when the returned guard is dropped.
    pub(crate) fn hold(&self, principal: &str, most: u64) -> Option<Held> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(principal.to_owned()).or_default();
        if *count >= most {
            return None;
        }
        *count += 1;
        Some(Held {
            held: Arc::clone(&self.held),
            principal: principal.to_owned(),
        })
    }

    /// How many calls are held here now, of every principal.
    pub fn held(&self) -> u64 {
        let held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.values().sum()
    }

    /// Whether the server stops (then no call waits).
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Ends every wait, now and from now on, with `approval_required` (the server stops: it
    /// holds no call for a decision).
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// How often a waiting call reads its approval: seldom where the store tells of decisions
    /// (the first call starts following them), often where it cannot.
    pub(crate) fn poll_interval(&self, store: &dyn Store) -> Duration {
        let followed = *self.followed.get_or_init(|| match store.watch_changes() {
            Some(mut changes) => {
                let told = self.told.clone();
                tokio::spawn(async move {
                    use tokio::sync::broadcast::error::RecvError;
                    loop {
                        match changes.recv().await {
                            Ok(Change::Approvals | Change::Everything)
                            | Err(RecvError::Lagged(_)) => {
                                told.send_modify(|n| *n = n.wrapping_add(1));
                            }
                            Ok(_) => {}
                            Err(RecvError::Closed) => return,
                        }
                    }
                });
                true
            }
            None => false,
        });
        if followed { POLL_TOLD } else { POLL_UNTOLD }
    }
}

/// One held call's place among its principal's ([`Decisions::hold`]).
#[derive(Debug)]
pub(crate) struct Held {
    held: Arc<Mutex<HashMap<String, u64>>>,
    principal: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.principal);
            }
        }
    }
}
