//! The handles every pipeline step and handler shares: the store, the policy, the audit sink,
//! the rate limiter, the call limits, the metrics and the clock. Built once by
//! [`PlatformBuilder`](crate::PlatformBuilder); read, never changed, for the platform's life.

use std::sync::Arc;

use larkgate_binding::Limits;
use larkgate_store::Store;

use crate::audit::AuditSink;
use crate::clock::WallClock;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::ratelimit::Limiter;
use crate::review::Reviews;

/// Size limits the platform enforces on every call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Limits on argument and result values.
    pub values: Limits,
    /// The largest `arguments` object, in bytes of compact JSON.
    pub max_argument_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            values: Limits::default(),
            max_argument_bytes: 1024 * 1024,
        }
    }
}

/// What every step and handler shares.
#[derive(Debug)]
pub struct Services {
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// The operator's policy.
    pub policy: Policy,
    /// Where audit records go.
    pub audit: Arc<dyn AuditSink>,
    /// Rate limits from the policy.
    pub limiter: Limiter,
    /// Size limits.
    pub limits: CallLimits,
    /// Whether intents record the canonical arguments themselves, not only their hash.
    pub record_arguments: bool,
    /// Calls by tool and outcome, latencies, sessions, runs.
    pub metrics: Metrics,
    /// The ledgers of review runs going on in this process.
    pub reviews: Reviews,
    /// The time of day approvals are requested, resolved and expire by.
    pub clock: Arc<dyn WallClock>,
    /// The approval decisions calls waiting for one watch.
    pub decisions: crate::decisions::Decisions,
}
