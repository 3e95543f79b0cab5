//! The handles every pipeline step and handler shares: the store, the policy, the audit sink,
//! the rate limiter, the call limits, the metrics and the clock. Built once by
//! [`PlatformBuilder`](crate::PlatformBuilder). Only the policy and the rate limiter built from
//! it change while serving ([`Services::replace_policy`], a reload): a call reads them where
//! it needs them, so the next call gets the new ones and a call in flight is not disturbed.

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
    /// The operator's policy ([`Services::policy`]).
    pub(crate) policy: arc_swap::ArcSwap<Policy>,
    /// Where audit records go.
    pub audit: Arc<dyn AuditSink>,
    /// Rate limits from the policy ([`Services::limiter`]).
    pub(crate) limiter: arc_swap::ArcSwap<Limiter>,
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

impl Services {
    /// The operator's policy now, for the step at hand (a guard not to hold across a wait).
    pub fn policy(&self) -> arc_swap::Guard<Arc<Policy>> {
        self.policy.load()
    }

    /// The rate limiter of the policy now (held across a check that may wait for Redis,
    /// where a guard of [`Services::policy`]'s kind should not be held long).
    pub fn limiter(&self) -> Arc<Limiter> {
        self.limiter.load_full()
    }

    /// Serves `policy` from the next call on (it is validated already, as every policy is when
    /// it is read). The rate limits' budgets of each rule in both policies are kept.
    pub fn replace_policy(&self, policy: Policy) {
        self.audit.policy_in_force(&policy.version());
        let limiter = self.limiter().reconfigured(&policy.rate_limits);
        self.limiter.store(Arc::new(limiter));
        self.policy.store(Arc::new(policy));
    }
}
