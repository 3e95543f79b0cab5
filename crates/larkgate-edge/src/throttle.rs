//! Failed authentications, throttled per source address.
//!
//! ## Threat model
//!
//! Anyone who reaches `/mcp` can try tokens. Tokens are 256-bit random, so guessing is
//! hopeless, but every try costs a store lookup and a log line. After
//! [`FailureThrottle::limit`] failed authentications from one address within a minute, every
//! request from that address is refused (429, with when to retry) without touching the store,
//! until that minute is over. The address is the peer's, or the client's behind a trusted
//! proxy ([`super::address::ClientAddress`]); a client cannot choose it. Clients sharing an
//! address (a NAT) share the budget: a valid token from there is refused too while it is
//! spent, which is the price of not looking the token up.
//!
//! The table of addresses is bounded: past [`MAX_TRACKED`] addresses, the ones whose minute is
//! over are dropped, and if all are current the table is cleared (an attacker with that many
//! addresses gains a fresh budget, never unbounded memory).
//!
//! ## Sampled into the audit
//!
//! Failed authentications are audited as a sample an attacker cannot grow without bound: the
//! first failure of an address in its minute is recorded, at most [`AUDITED_PER_MINUTE`] in a
//! minute across all addresses, and each recorded one says how many went unrecorded since the
//! one before. So the chain shows that, when and from where tokens were tried, at a cost of at
//! most [`AUDITED_PER_MINUTE`] records a minute; the metric counts every one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most addresses tracked at once.
pub const MAX_TRACKED: usize = 10_000;

/// The most failed authentications audited in a minute, across all addresses.
pub const AUDITED_PER_MINUTE: u32 = 10;

/// The window failures are counted in.
const WINDOW: Duration = Duration::from_secs(60);

/// Failures per address in the current window.
#[derive(Debug)]
pub struct FailureThrottle {
    limit: u32,
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    sample: Mutex<Sample>,
}

/// Which failures the audit records (see the module documentation).
#[derive(Debug)]
struct Sample {
    started: Instant,
    recorded: u32,
    /// Failures not recorded since the last one that was.
    unrecorded: u64,
}

/// A failed authentication the audit records.
#[derive(Debug, PartialEq, Eq)]
pub struct Audited {
    /// Failures that went unrecorded since the last recorded one.
    pub unrecorded_before: u64,
}

impl FailureThrottle {
    /// At most `limit` failures per address and minute.
    pub fn new(limit: u32) -> Self {
        FailureThrottle {
            limit,
            windows: Mutex::new(HashMap::new()),
            sample: Mutex::new(Sample {
                started: Instant::now(),
                recorded: 0,
                unrecorded: 0,
            }),
        }
    }

    /// The failures allowed per address and minute.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// `Err(wait)` while `address` has spent its failures for this minute.
    pub fn check(&self, address: IpAddr) -> Result<(), Duration> {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        match windows.get(&address) {
            Some((started, failures)) if *failures >= self.limit => {
                let left = WINDOW.saturating_sub(started.elapsed());
                if left.is_zero() { Ok(()) } else { Err(left) }
            }
            _ => Ok(()),
        }
    }

    /// Counts one failed authentication from `address`; says whether the audit records it.
    pub fn failed(&self, address: IpAddr) -> Option<Audited> {
        let first_in_window = self.count(address) == 1;
        self.sampled(first_in_window)
    }

    /// A failure without an address (none was known): counted for the sample only.
    pub fn failed_unplaced(&self) -> Option<Audited> {
        self.sampled(true)
    }

    fn sampled(&self, candidate: bool) -> Option<Audited> {
        let mut sample = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        if sample.started.elapsed() >= WINDOW {
            sample.started = Instant::now();
            sample.recorded = 0;
        }
        if candidate && sample.recorded < AUDITED_PER_MINUTE {
            sample.recorded += 1;
            Some(Audited {
                unrecorded_before: std::mem::take(&mut sample.unrecorded),
            })
        } else {
            sample.unrecorded = sample.unrecorded.saturating_add(1);
            None
        }
    }

    /// Counts a failure of `address`; returns its failures in its current window.
    fn count(&self, address: IpAddr) -> u32 {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() >= MAX_TRACKED && !windows.contains_key(&address) {
            windows.retain(|_, (started, _)| started.elapsed() < WINDOW);
            if windows.len() >= MAX_TRACKED {
                windows.clear();
            }
        }
        let now = Instant::now();
        let entry = windows.entry(address).or_insert((now, 0));
        if entry.0.elapsed() >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
        entry.1
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_and_others_are_not() {
        let throttle = FailureThrottle::new(3);
        let attacker: IpAddr = "198.51.100.7".parse().unwrap();
        let other: IpAddr = "198.51.100.8".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(throttle.check(attacker), Ok(()));
            throttle.failed(attacker);
        }
        let wait = throttle.check(attacker).unwrap_err();
        assert!(wait <= WINDOW && wait > Duration::from_secs(50), "{wait:?}");
        assert_eq!(
            throttle.check(other),
            Ok(()),
            "another address has its own budget"
        );
    }

    #[test]
    fn the_audit_sample_is_one_per_address_and_bounded_per_minute() {
        let throttle = FailureThrottle::new(1_000);
        let attacker: IpAddr = "198.51.100.7".parse().unwrap();
        assert_eq!(
            throttle.failed(attacker),
            Some(Audited {
                unrecorded_before: 0
            })
        );
        for _ in 0..100 {
            assert_eq!(
                throttle.failed(attacker),
                None,
                "one record per address and minute"
            );
        }
        // Many addresses: only AUDITED_PER_MINUTE records in all, the first of them counting
        // what went unrecorded before it.
        let mut recorded = vec![Audited {
            unrecorded_before: 0,
        }];
        for i in 0..5_000u32 {
            recorded.extend(throttle.failed(IpAddr::from((0x0a00_0000 + i).to_be_bytes())));
        }
        assert_eq!(recorded.len(), AUDITED_PER_MINUTE as usize);
        assert_eq!(recorded[1].unrecorded_before, 100);
        assert_eq!(throttle.failed_unplaced(), None);
    }

    #[test]
    fn the_table_of_addresses_stays_bounded() {
        let throttle = FailureThrottle::new(1);
        for i in 0..(MAX_TRACKED as u32 + 500) {
            throttle.failed(IpAddr::from(i.to_be_bytes()));
        }
        assert!(throttle.tracked() <= MAX_TRACKED, "{}", throttle.tracked());
    }
}
