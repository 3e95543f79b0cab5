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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most addresses tracked at once.
pub const MAX_TRACKED: usize = 10_000;

/// The window failures are counted in.
const WINDOW: Duration = Duration::from_secs(60);

/// Failures per address in the current window.
#[derive(Debug)]
pub struct FailureThrottle {
    limit: u32,
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureThrottle {
    /// At most `limit` failures per address and minute.
    pub fn new(limit: u32) -> Self {
        FailureThrottle {
            limit,
            windows: Mutex::new(HashMap::new()),
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

    /// Counts one failed authentication from `address`.
    pub fn failed(&self, address: IpAddr) {
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
    fn the_table_of_addresses_stays_bounded() {
        let throttle = FailureThrottle::new(1);
        for i in 0..(MAX_TRACKED as u32 + 500) {
            throttle.failed(IpAddr::from(i.to_be_bytes()));
        }
        assert!(throttle.tracked() <= MAX_TRACKED, "{}", throttle.tracked());
    }
}
