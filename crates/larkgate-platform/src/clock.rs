//! Time, injected: the platform reads both of its clocks through [`Services`](crate::Services),
//! so a test moves time instead of waiting for it.
//!
//! - [`Clock`] is monotonic: the time since some start. Rate limits count with it.
//!   [`TokioClock`] follows tokio's clock (pausable with `tokio::time::pause()`).
//! - [`WallClock`] is the time of day in Unix milliseconds, the unit of every time the store
//!   keeps: approvals' requests, resolutions and expiries. [`SystemClock`] reads the system's.
//!
//! [`ManualClock`] is both, and stands still until it is moved: a test builds the platform
//! with it and calls [`ManualClock::advance`] to reach an expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic time source: the time since some fixed start.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time since the clock's start.
    fn now(&self) -> Duration;
}

/// The time of day, in Unix milliseconds.
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// Unix milliseconds now.
    fn now_ms(&self) -> i64;
}

/// Tokio's clock (pausable and advanceable in tests).
#[derive(Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

/// The system's time of day.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> i64 {
        larkgate_store::now_ms()
    }
}

/// A clock that stands still until [`advance`](ManualClock::advance)d: a [`WallClock`]
/// starting at the system's time when it was made, and a [`Clock`] starting at zero then.
/// Clones share one time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    start_ms: i64,
    elapsed_ns: Arc<AtomicU64>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::at(larkgate_store::now_ms())
    }
}

impl ManualClock {
    /// A clock whose time of day is `unix_ms` until it is moved.
    pub fn at(unix_ms: i64) -> Self {
        ManualClock {
            start_ms: unix_ms,
            elapsed_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock `by` on.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_ns.fetch_add(ns, Ordering::SeqCst);
    }

    fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::SeqCst))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        self.elapsed()
    }
}

impl WallClock for ManualClock {
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.start_ms.saturating_add(elapsed)
    }
}
