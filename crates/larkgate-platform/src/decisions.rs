//! The approval decisions this process knows of, for calls that wait for one
//! ([`crate::approvals::wait`]): told by this process's own resolutions and, on a store that
//! tells of changes made through other processes (PostgreSQL), by the store.

use std::sync::OnceLock;
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
}

impl Default for Decisions {
    fn default() -> Self {
        Decisions {
            told: watch::Sender::new(0),
            followed: OnceLock::new(),
            stopping: watch::Sender::new(false),
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
