//! A background task's failure that lasts (the store unreachable for a minute) logged as an
//! operator wants it: once when it starts, then at most every 30 s while it lasts (with how
//! many attempts failed meanwhile), and once when it ends; not once per attempt.
//!
//! A failure is logged as a warning or an error; its end is an `info` event of the target
//! [`RECOVERED`], which `serve` and `stdio` let through by default (their filter is warnings
//! only otherwise), so that an operator who read the failure also reads that it ended.

use std::time::{Duration, Instant};

/// The target of the line that says a failure ended.
pub const RECOVERED: &str = "larkgate_recovered";

/// How often a lasting failure is logged again.
const REPEAT: Duration = Duration::from_secs(30);

/// The state of one repeated task's failures. See the module documentation.
#[derive(Debug, Default)]
pub struct Failing {
    /// When the failure was last logged, and attempts failed since.
    since: Option<(Instant, u64)>,
}

impl Failing {
    /// Notes an attempt's outcome; `log` writes a failure (with the attempts failed since the
    /// last line) when it is time to, `recovered` once when the failure ends.
    pub fn note<E>(
        &mut self,
        outcome: Result<(), E>,
        log: impl FnOnce(&E, u64),
        recovered: impl FnOnce(),
    ) {
        match (outcome, &mut self.since) {
            (Ok(()), None) => {}
            (Ok(()), Some(_)) => {
                self.since = None;
                recovered();
            }
            (Err(error), None) => {
                log(&error, 0);
                self.since = Some((Instant::now(), 0));
            }
            (Err(error), Some((logged, failed))) => {
                *failed += 1;
                if logged.elapsed() >= REPEAT {
                    log(&error, *failed);
                    self.since = Some((Instant::now(), 0));
                }
            }
        }
    }

    /// Whether the last attempt failed.
    pub fn failing(&self) -> bool {
        self.since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_failure_is_logged_once_then_its_end_once() {
        let mut failing = Failing::default();
        let mut lines = Vec::new();
        for _ in 0..100 {
            failing.note(Err("down"), |e, n| lines.push(format!("{e} {n}")), || {});
        }
        assert!(failing.failing());
        failing.note(Ok::<(), &str>(()), |_, _| {}, || lines.push("back".into()));
        failing.note(Ok::<(), &str>(()), |_, _| {}, || lines.push("again".into()));
        assert_eq!(lines, ["down 0", "back"]);
        assert!(!failing.failing());
    }
}
