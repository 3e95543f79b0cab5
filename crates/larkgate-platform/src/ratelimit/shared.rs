//! Rate limits shared by every replica: the same GCRA as [`super::RateLimiter`], its state in
//! Redis.
//!
//! One check is one Lua script, run atomically by Redis: it reads Redis's own clock (`TIME`),
//! decides every rule that counts the call, and charges them only if all allow it (so a call
//! refused by one rule costs nothing in another, as in-process). Each key holds one number,
//! the key's theoretical arrival time in microseconds of Redis's clock, and expires when it
//! has fully replenished, so Redis holds only keys with information in them. So the budgets
//! are exact across any number of replicas, whatever their own clocks say.
//!
//! Keys are `PREFIX` `rl:` RULE `:` SCOPE: RULE is a digest of the rule (replicas with the
//! same rule share its budgets; a changed rule starts afresh), SCOPE the principal and, for a
//! per-tool rule, the tool, each with its length in front (no two calls' keys collide, whatever
//! their names hold).
//!
//! ## Threat model
//!
//! - Callers choose tool names and (through their principal) nothing else of a key; names go
//!   to Redis as arguments of a script, never as command text, so they cannot run commands.
//!   Names are bounded before they get here (tool names by the pipeline, principals by the
//!   store), so keys are too.
//! - Redis is trusted like the database: whoever can write to it can grant budgets.
//! - Redis unreachable or too slow (longer than the timeout): the call is refused
//!   ([`WhenUnreachable::FailClosed`], the default) with a message that says so, or admitted
//!   against this process's own budgets ([`WhenUnreachable::Local`]), which then hold per
//!   replica, not in total. Either way the failure is counted
//!   (`larkgate_ratelimit_unreachable_total`) and logged once, then every 30 s.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use sha2::Digest;

use super::{Counted, Key, Limited, RateLimiter, Refused};
use crate::failing::Failing;
use crate::policy::RateLimitRule;

/// What a check does when Redis cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenUnreachable {
    /// Refuse the call (`rate_limited`, saying why): no call goes uncounted.
    #[default]
    FailClosed,
    /// Count it against this process's own budgets instead.
    Local,
}

/// Where the shared budgets are and how to reach them.
#[derive(Clone, Debug)]
pub struct SharedSettings {
    /// The Redis client (nothing connected yet).
    client: redis::Client,
    /// Put in front of every key (several larkgates can share one Redis).
    pub prefix: String,
    /// What a check does when Redis cannot be reached.
    pub when_unreachable: WhenUnreachable,
    /// How long a check may wait for Redis (connecting included).
    pub timeout: Duration,
}

impl SharedSettings {
    /// Settings for the Redis at `url` (`redis://[:PASSWORD@]HOST[:PORT][/DB]`, the password
    /// already expanded), with the prefix `larkgate:`, failing closed, and a 1 s timeout. A
    /// URL that is not a Redis URL is an error that does not repeat it (it may hold a
    /// password).
    pub fn new(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| {
            format!(
                "the rate limits' Redis URL is not one larkgate can use ({:?})",
                e.kind()
            )
        })?;
        Ok(SharedSettings {
            client,
            prefix: "larkgate:".to_owned(),
            when_unreachable: WhenUnreachable::FailClosed,
            timeout: Duration::from_secs(1),
        })
    }
}

/// One rule as the script sees it.
#[derive(Debug)]
struct SharedRule {
    /// A digest of the rule, in its keys.
    id: String,
    /// Microseconds between calls.
    interval_us: u64,
    /// How far ahead of now the arrival time may run (the burst), in microseconds.
    tolerance_us: u64,
}

/// The check, atomically in Redis. KEYS: one per rule that counts the call; ARGV: each one's
/// interval and tolerance in microseconds. Answers 0 when admitted (and charged), else the
/// microseconds until the call would be admitted.
const CHECK: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  if tat - now > tolerance then
    local w = tat - tolerance - now
    if w > wait then wait = w end
  end
  tats[i] = tat
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  local new = tats[i] + tonumber(ARGV[2 * i - 1])
  redis.call('SET', key, string.format('%.0f', new), 'PX', math.floor((new - now) / 1000) + 1)
end
return 0
";

/// Budgets in Redis. See the module documentation.
#[derive(Debug)]
pub struct SharedLimiter {
    /// The rules' matching and keys, and the budgets of [`WhenUnreachable::Local`].
    local: RateLimiter,
    rules: Vec<SharedRule>,
    connection: tokio::sync::OnceCell<redis::aio::ConnectionManager>,
    script: redis::Script,
    settings: SharedSettings,
    unreachable: Counter,
    failing: Mutex<Failing>,
}

impl SharedLimiter {
    /// A limiter for `rules` (the same as `local`'s) in the Redis `settings` names. Nothing
    /// connects until the first check.
    pub fn new(rules: &[RateLimitRule], local: RateLimiter, settings: SharedSettings) -> Self {
        let rules = rules
            .iter()
            .map(|rule| {
                let (interval, tolerance) = super::pacing(rule);
                let digest = sha2::Sha256::digest(format!("{rule:?}").as_bytes());
                SharedRule {
                    id: hex::encode(&digest[..8]),
                    interval_us: interval.as_micros().max(1) as u64,
                    tolerance_us: tolerance.as_micros() as u64,
                }
            })
            .collect();
        SharedLimiter {
            local,
            rules,
            connection: tokio::sync::OnceCell::new(),
            script: redis::Script::new(CHECK),
            settings,
            unreachable: Counter::default(),
            failing: Mutex::new(Failing::default()),
        }
    }

    /// A limiter for `rules` on the same Redis (its connection, when made, shared), the same
    /// count of unreachable checks: a budget's key is its rule's digest, so an unchanged rule
    /// keeps its budgets.
    pub fn reconfigured(&self, rules: &[RateLimitRule]) -> Self {
        let mut limiter =
            SharedLimiter::new(rules, self.local.reconfigured(rules), self.settings.clone());
        limiter.connection = tokio::sync::OnceCell::new_with(self.connection.get().cloned());
        limiter.unreachable = self.unreachable.clone();
        limiter
    }

    /// Checks that fell back or were refused because Redis could not be reached.
    pub fn unreachable(&self) -> Counter {
        self.unreachable.clone()
    }

    /// [`super::RateLimiter::check_target`], in Redis.
    pub async fn check_target(&self, call: Counted<'_>) -> Result<(), Refused> {
        let matching = self.local.matching(call);
        if matching.is_empty() {
            return Ok(());
        }
        let outcome = tokio::time::timeout(self.settings.timeout, self.run(&matching)).await;
        let outcome = match outcome {
            Ok(Ok(wait_us)) => Ok(wait_us),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!(
                "no answer within {} ms",
                self.settings.timeout.as_millis()
            )),
        };
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(wait_us) => {
                failing.note(
                    Ok::<(), String>(()),
                    |_, _| {},
                    || {
                        tracing::info!(target: crate::failing::RECOVERED, "the shared rate limits are reachable again");
                    },
                );
                match u64::try_from(wait_us) {
                    Ok(0) | Err(_) => Ok(()),
                    Ok(wait_us) => Err(Refused::Budget(Limited {
                        retry_after: Duration::from_micros(wait_us),
                    })),
                }
            }
            Err(error) => {
                self.unreachable.inc();
                let fallback = self.settings.when_unreachable;
                failing.note(
                    Err(error),
                    |error, failed| {
                        tracing::error!(
                            %error,
                            failed_checks_since_last_logged = failed,
                            ?fallback,
                            "the shared rate limits (Redis) could not be reached"
                        );
                    },
                    || {},
                );
                drop(failing);
                match fallback {
                    WhenUnreachable::FailClosed => Err(Refused::Unreachable(Limited {
                        retry_after: Duration::from_secs(1),
                    })),
                    WhenUnreachable::Local => {
                        self.local.check_target(call).map_err(Refused::Budget)
                    }
                }
            }
        }
    }

    async fn run(&self, matching: &[(usize, Key)]) -> redis::RedisResult<i64> {
        let connection = self
            .connection
            .get_or_try_init(|| {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.settings.timeout))
                    .set_response_timeout(Some(self.settings.timeout));
                redis::aio::ConnectionManager::new_with_config(self.settings.client.clone(), config)
            })
            .await?;
        let mut invocation = self.script.prepare_invoke();
        for (index, key) in matching {
            let rule = &self.rules[*index];
            invocation
                .key(self.key(rule, key))
                .arg(rule.interval_us)
                .arg(rule.tolerance_us);
        }
        invocation.invoke_async(&mut connection.clone()).await
    }

    /// A budget's key (see the module documentation).
    fn key(&self, rule: &SharedRule, key: &Key) -> String {
        let prefix = &self.settings.prefix;
        match key {
            Key::Principal(principal) => {
                format!("{prefix}rl:{}:p:{}:{principal}", rule.id, principal.len())
            }
            Key::PrincipalTool(principal, tool) => format!(
                "{prefix}rl:{}:pt:{}:{principal}:{tool}",
                rule.id,
                principal.len()
            ),
        }
    }
}
