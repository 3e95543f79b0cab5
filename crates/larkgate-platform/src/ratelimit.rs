//! Rate limiting: GCRA per key, with a bounded key table.
//!
//! Each [`RateLimitRule`] allows `calls` per `period` with bursts of up to `burst`, keyed by
//! principal or by (principal, tool). GCRA keeps one number per key, its *theoretical arrival
//! time* (TAT): a call at `now` is allowed when `TAT - now <= (burst - 1) * interval`, and then
//! moves the TAT one interval on. A refused call learns exactly when it would be allowed.
//!
//! Why not `governor`: its keyed store can evict replenished keys but cannot refuse a *new*
//! key when the table is full, so memory would grow with the number of keys. Here the table
//! has a hard cap: when it is full, keys whose budget has fully replenished (indistinguishable
//! from a fresh key) are evicted; if none can be, the new key is refused as `rate_limited`
//! (fail closed) instead of growing the table.
//!
//! Time comes from an injected [`Clock`]; [`TokioClock`] follows tokio's clock, so tests drive
//! it with `tokio::time::pause()` and `advance()`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::policy::{FactValues, RateLimitRule, RateScope, TargetKind};

pub mod shared;

pub use crate::clock::{Clock, TokioClock};

/// The default cap on keys per rule.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// A refused call: when to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limited {
    /// How long until the call would be allowed.
    pub retry_after: Duration,
}

/// One rule's GCRA state.
#[derive(Debug)]
struct Bucket {
    rule: RateLimitRule,
    interval: Duration,
    tolerance: Duration,
    table: Mutex<Table>,
}

/// The keys of one rule and their TATs.
#[derive(Debug, Default)]
struct Table {
    tats: HashMap<Key, Duration>,
    /// A lower bound on the smallest TAT: before it, no key is evictable, so a full table
    /// refuses a new key without scanning.
    earliest: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Principal(String),
    PrincipalTool(String, String),
}

/// A rule's GCRA pacing: the time between calls, and how far ahead of now the theoretical
/// arrival time may run (the burst).
fn pacing(rule: &RateLimitRule) -> (Duration, Duration) {
    let interval = Duration::from_secs(rule.period_seconds) / rule.calls.max(1);
    let burst = rule.burst.unwrap_or(rule.calls).max(1);
    (interval, interval * (burst - 1))
}

/// A call as the rate limits count it.
#[derive(Clone, Copy, Debug)]
pub struct Counted<'a> {
    /// Who calls.
    pub principal: &'a str,
    /// What kind of target: the rules that count this kind of call apply.
    pub kind: TargetKind,
    /// The target's name: a tool or prompt name, a resource's larkgate URI.
    pub name: &'a str,
    /// What a `principal_tool` rule keeps one budget per (principal, key) of. For a tool or
    /// prompt it is its name; for a resource, the listed entry the URI was found by (the
    /// resource, or the template it matched), so that reading many URIs through one template
    /// cannot fill the key table.
    pub key: &'a str,
    /// What a rule's condition reads of the call (a tool call's, when a rule has one).
    pub facts: Option<&'a FactValues>,
}

/// Why a call was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A budget is spent: the call would be allowed after `retry_after`.
    Budget(Limited),
    /// The shared budgets (Redis) could not be reached, and the configuration says to refuse
    /// then ([`shared::WhenUnreachable::FailClosed`]).
    Unreachable(Limited),
}

/// The platform's rate limiter: budgets in this process, or shared by every replica in Redis.
#[derive(Debug)]
pub enum Limiter {
    /// Budgets in this process.
    Local(RateLimiter),
    /// Budgets in Redis.
    Shared(Box<shared::SharedLimiter>),
}

impl Limiter {
    /// A limiter for `rules` in the same place as this one, keeping the budgets spent under
    /// each rule that is in both (a reload that changes one rule does not refill the others).
    pub fn reconfigured(&self, rules: &[RateLimitRule]) -> Limiter {
        match self {
            Limiter::Local(local) => Limiter::Local(local.reconfigured(rules)),
            Limiter::Shared(shared) => Limiter::Shared(Box::new(shared.reconfigured(rules))),
        }
    }

    /// [`RateLimiter::check_target`], wherever the budgets are kept.
    pub async fn check_target(&self, call: Counted<'_>) -> Result<(), Refused> {
        match self {
            Limiter::Local(local) => local.check_target(call).map_err(Refused::Budget),
            Limiter::Shared(shared) => shared.check_target(call).await,
        }
    }
}

/// The rate limiter for a policy's rules.
#[derive(Debug)]
pub struct RateLimiter {
    buckets: Vec<Arc<Bucket>>,
    clock: Arc<dyn Clock>,
    max_keys: usize,
}

impl RateLimiter {
    /// A limiter for `rules` (already validated: positive numbers) on `clock`.
    pub fn new(rules: &[RateLimitRule], clock: Box<dyn Clock>, max_keys: usize) -> Self {
        RateLimiter {
            buckets: rules.iter().map(Bucket::new).collect(),
            clock: Arc::from(clock),
            max_keys: max_keys.max(1),
        }
    }

    /// A limiter for `rules` on the same clock, each rule that is also one of this limiter's
    /// keeping its budgets (each of this limiter's rules counts for at most one of `rules`).
    pub fn reconfigured(&self, rules: &[RateLimitRule]) -> Self {
        let mut kept: Vec<Option<&Arc<Bucket>>> = self.buckets.iter().map(Some).collect();
        let buckets = rules
            .iter()
            .map(|rule| {
                let same = kept
                    .iter_mut()
                    .find(|bucket| bucket.is_some_and(|b| b.rule == *rule))
                    .and_then(Option::take);
                same.map_or_else(|| Bucket::new(rule), Arc::clone)
            })
            .collect();
        RateLimiter {
            buckets,
            clock: Arc::clone(&self.clock),
            max_keys: self.max_keys,
        }
    }

    /// Checks one call of `tool` by `principal` against every matching rule, charging each
    /// only if all allow it. Refused: the longest wait among the rules that refuse.
    pub fn check(&self, principal: &str, tool: &str) -> Result<(), Limited> {
        self.check_target(Counted {
            principal,
            kind: TargetKind::Tool,
            name: tool,
            key: tool,
            facts: None,
        })
    }

    /// [`RateLimiter::check`] for a call of any kind: the rules that count the call's kind of
    /// calls to its name apply, and a `principal_tool` rule keeps one budget per (principal,
    /// key); see [`Counted`].
    pub fn check_target(&self, call: Counted<'_>) -> Result<(), Limited> {
        let now = self.clock.now();
        let matching: Vec<(&Bucket, Key)> = self
            .matching(call)
            .into_iter()
            .map(|(index, key)| (&*self.buckets[index], key))
            .collect();
        // First decide, then charge, so a call refused by one rule costs nothing in another.
        let mut wait = None;
        for (bucket, key) in &matching {
            if let Err(limited) = bucket.decide(key, now, self.max_keys) {
                wait = Some(wait.map_or(limited.retry_after, |w: Duration| {
                    w.max(limited.retry_after)
                }));
            }
        }
        if let Some(retry_after) = wait {
            return Err(Limited { retry_after });
        }
        for (bucket, key) in matching {
            bucket.charge(key, now);
        }
        Ok(())
    }

    /// The rules that count this call (by index), each with the key its budget is kept under.
    fn matching(&self, call: Counted<'_>) -> Vec<(usize, Key)> {
        let Counted {
            principal,
            kind,
            name,
            key,
            facts,
        } = call;
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.rule.counts_call(kind, name, facts))
            .map(|(index, b)| {
                let key = match b.rule.per {
                    RateScope::Principal => Key::Principal(principal.to_owned()),
                    RateScope::PrincipalTool => Key::PrincipalTool(
                        principal.to_owned(),
                        match kind {
                            TargetKind::Tool => key.to_owned(),
                            other => format!("{} {key}", other.method()),
                        },
                    ),
                };
                (index, key)
            })
            .collect()
    }

    /// The number of keys held across all rules (for tests and metrics).
    pub fn keys(&self) -> usize {
        self.buckets.iter().map(|b| b.lock().tats.len()).sum()
    }
}

impl Bucket {
    fn new(rule: &RateLimitRule) -> Arc<Self> {
        let (interval, tolerance) = pacing(rule);
        Arc::new(Bucket {
            rule: rule.clone(),
            interval,
            tolerance,
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table holds plain numbers; a panic elsewhere cannot leave it inconsistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn decide(&self, key: &Key, now: Duration, max_keys: usize) -> Result<(), Limited> {
        let mut table = self.lock();
        match table.tats.get(key) {
            Some(&tat) => {
                let tat = tat.max(now);
                if tat - now > self.tolerance {
                    return Err(Limited {
                        retry_after: tat - self.tolerance - now,
                    });
                }
                Ok(())
            }
            None => {
                if table.tats.len() >= max_keys {
                    if now >= table.earliest {
                        // Replenished keys carry no information: drop them.
                        table.tats.retain(|_, tat| *tat > now);
                        table.earliest = table.tats.values().min().copied().unwrap_or(now);
                    }
                    if table.tats.len() >= max_keys {
                        // Room appears when the earliest held key replenishes.
                        return Err(Limited {
                            retry_after: (table.earliest.saturating_sub(now))
                                .max(Duration::from_millis(1)),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    fn charge(&self, key: Key, now: Duration) {
        let mut table = self.lock();
        let tat = table.tats.get(&key).copied().unwrap_or(now).max(now) + self.interval;
        if table.tats.is_empty() || tat < table.earliest {
            table.earliest = tat;
        }
        table.tats.insert(key, tat);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::policy::Pattern;

    /// A clock the test moves by hand.
    #[derive(Debug, Default, Clone)]
    struct Manual(Arc<AtomicU64>);

    impl Manual {
        fn advance(&self, by: Duration) {
            self.0.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    impl Clock for Manual {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.0.load(Ordering::SeqCst))
        }
    }

    fn rule(
        per: RateScope,
        tools: &[&str],
        calls: u32,
        secs: u64,
        burst: Option<u32>,
    ) -> RateLimitRule {
        RateLimitRule {
            per,
            tools: Some(tools.iter().map(|t| Pattern::new(t).unwrap()).collect()),
            resources: None,
            prompts: None,
            calls,
            period_seconds: secs,
            burst,
            when: None,
        }
    }

    #[test]
    fn a_burst_of_n_is_allowed_and_the_next_call_waits_one_interval() {
        let clock = Manual::default();
        let limiter = RateLimiter::new(
            &[rule(RateScope::Principal, &["*"], 10, 1, Some(5))],
            Box::new(clock.clone()),
            100,
        );
        for i in 0..5 {
            assert_eq!(limiter.check("alice", "kv_get"), Ok(()), "call {i}");
        }
        assert_eq!(
            limiter.check("alice", "kv_get"),
            Err(Limited {
                retry_after: Duration::from_millis(100)
            })
        );
        clock.advance(Duration::from_millis(99));
        assert!(limiter.check("alice", "kv_get").is_err());
        clock.advance(Duration::from_millis(1));
        assert_eq!(limiter.check("alice", "kv_get"), Ok(()));
        assert!(
            limiter.check("bob", "kv_get").is_ok(),
            "other principals have their own budget"
        );
    }

    /// A reload keeps what was spent under a rule it keeps, and what it adds or changes starts
    /// with a full budget; a removed rule no longer counts.
    #[test]
    fn a_reconfigured_limiter_keeps_the_budgets_of_unchanged_rules_only() {
        let clock = Manual::default();
        let kept = rule(RateScope::Principal, &["kv_get"], 2, 60, None);
        let removed = rule(RateScope::Principal, &["kv_list"], 1, 60, None);
        let limiter = RateLimiter::new(&[kept.clone(), removed], Box::new(clock.clone()), 100);
        assert!(limiter.check("a", "kv_get").is_ok());
        assert!(limiter.check("a", "kv_get").is_ok());
        assert!(limiter.check("a", "kv_get").is_err());
        assert!(limiter.check("a", "kv_list").is_ok());
        assert!(limiter.check("a", "kv_list").is_err());

        let changed = rule(RateScope::Principal, &["kv_set"], 1, 60, None);
        let reloaded = limiter.reconfigured(&[changed, kept]);
        assert!(
            reloaded.check("a", "kv_get").is_err(),
            "the unchanged rule's spent budget was refilled"
        );
        assert!(
            reloaded.check("a", "kv_list").is_ok(),
            "a removed rule still counts"
        );
        assert!(reloaded.check("a", "kv_list").is_ok());
        assert!(reloaded.check("a", "kv_set").is_ok());
        assert!(reloaded.check("a", "kv_set").is_err());
        // The same clock: the kept budget refills on its schedule.
        clock.advance(Duration::from_secs(30));
        assert!(reloaded.check("a", "kv_get").is_ok());
    }

    #[test]
    fn per_tool_rules_apply_only_to_their_tools_and_refusals_charge_nothing() {
        let clock = Manual::default();
        let limiter = RateLimiter::new(
            &[
                rule(RateScope::PrincipalTool, &["kv_set"], 1, 10, None),
                rule(RateScope::Principal, &["*"], 3, 10, None),
            ],
            Box::new(clock.clone()),
            100,
        );
        assert!(limiter.check("a", "kv_set").is_ok());
        let refused = limiter.check("a", "kv_set").unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(10));
        // The refused kv_set did not spend the principal-wide budget: two calls remain.
        assert!(limiter.check("a", "kv_get").is_ok());
        assert!(limiter.check("a", "kv_get").is_ok());
        assert!(limiter.check("a", "kv_get").is_err());
    }

    #[test]
    fn the_key_table_stays_under_its_cap() {
        let clock = Manual::default();
        let cap = 1_000;
        let limiter = RateLimiter::new(
            &[rule(RateScope::PrincipalTool, &["*"], 1, 1, None)],
            Box::new(clock.clone()),
            cap,
        );
        let mut refused = 0;
        for i in 0..1_000_000 {
            if limiter.check(&format!("p{i}"), "t").is_err() {
                refused += 1;
            }
            if i % 100_000 == 99_999 {
                // Time passes: older keys replenish and become evictable.
                clock.advance(Duration::from_secs(2));
            }
            assert!(limiter.keys() <= cap);
        }
        assert!(refused > 0, "a full table of live keys refuses new ones");
        assert!(limiter.keys() <= cap);
        clock.advance(Duration::from_secs(2));
        assert!(
            limiter.check("newcomer", "t").is_ok(),
            "eviction makes room again"
        );
        assert!(limiter.keys() <= cap);
    }
}
