//! Waiting for a decision inside the call.
//!
//! A `require` rule with `wait_seconds` ([`crate::policy::ApprovalRule`]) lets a gated call
//! whose client waits be held open while its approval is pending, instead of being refused
//! `approval_required` at once. The gate ([`super::admit`]) makes (or finds) the request as
//! for any gated call; [`until_decided`] then holds the call:
//!
//! - **approved**: the gate admits the call again (as any call with an approval is admitted),
//!   it runs, and its answer is the tool's;
//! - **denied**: `approval_denied`, as a call made after the decision would be;
//! - **time's up** (`wait_seconds` from the first time the call was held): `approval_required`
//!   with the approval id, as without a wait; the request stays pending;
//! - **cancelled by the client**: the request is withdrawn (status `withdrawn`, an audit
//!   event), so no approver is asked to decide a call nobody waits for;
//! - **the server stops**: `approval_required` at once, the request left pending, so a stop is
//!   never held up by a wait.
//!
//! How the client is kept informed depends on its revision. On 2025-11-25, a client that asked
//! for progress (`_meta.progressToken`) is sent `notifications/progress` when the wait starts
//! and every [`PROGRESS_EVERY`] ("waiting for an approver: approval ID, asked HH:MM UTC"). On
//! 2026-07-28, which has no sessions, a long wait is cut into rounds ([`Rounds`]): each holds
//! the request at most a tenth of the wait (the official SDKs retry such an answer ten times
//! by default), then answers `input_required` with only a `requestState`, which the client
//! echoes on its retry (the revision's "still waiting" answer; any replica may take the retry).
//! Progress is sent in either revision when the client asked for it.
//!
//! Who learns of a decision, and when: a decision made in this process (the approval tools,
//! the console) wakes its waiting calls at once ([`crate::decisions::Decisions::told`]). One made through
//! another process reaches them through the store: PostgreSQL notifies every replica as the
//! decision commits ([`larkgate_store::Change::Approvals`]), and each still reads the approval
//! every [`crate::decisions::POLL_TOLD`] in case a notification was lost; SQLite, which cannot
//! notify, is read every [`crate::decisions::POLL_UNTOLD`].
//!
//! Threat model: the `requestState` a client echoes is untrusted. It carries only when the
//! wait began (`larkgate-wait:v1:<approval id>:<deadline ms>`); the approval the call is held
//! for is always found again from the call itself (principal, tool, arguments, chain), and a
//! deadline later than `wait_seconds` from now is cut to it. A forged state can at most hold
//! the forger's own request for one more round, which calling again would do as well. A held
//! call holds one connection and no worker, so one principal may hold at most
//! `max_waiting_per_principal` calls at once in a process (default 10): a call beyond them is
//! answered `approval_required` at once, and a principal cannot fill the connection cap with
//! held calls.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use larkgate_store::ApprovalStatus;

use crate::audit::{AuditEntry, EventKind};
use crate::envelope::{Code, Refusal};
use crate::services::Services;

use super::GatedCall;

/// How often a waiting client that asked for progress is told the wait goes on.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Into how many rounds a 2026-07-28 wait is cut at most.
pub const ROUNDS: u32 = 10;

/// How the client of a call waits: what ends its wait early, how it is told how the wait goes,
/// and whether its wait is cut into rounds. Made by the edge that took the call.
pub struct Waiting {
    /// Finishes when the client cancels the call (or goes away).
    pub cancelled: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Where progress goes, when the client asked for it.
    pub progress: Option<Box<dyn Progress>>,
    /// For a 2026-07-28 client: rounds, and the state it echoed from the last one.
    pub rounds: Option<Rounds>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("progress", &self.progress.is_some())
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

/// A 2026-07-28 wait: held a round at a time.
#[derive(Clone, Debug, Default)]
pub struct Rounds {
    /// The `requestState` the client echoed, if this is a retry.
    pub echoed: Option<String>,
}

/// Tells a waiting client how its wait goes.
#[async_trait::async_trait]
pub trait Progress: Send + Sync {
    /// `progress` seconds waited of `total`, and what is waited for.
    async fn tell(&self, progress: f64, total: f64, message: String);
}

/// The `requestState` of a round that ended with the wait still going.
fn state(approval_id: &str, deadline_ms: i64) -> String {
    format!("larkgate-wait:v1:{approval_id}:{deadline_ms}")
}

/// The deadline an echoed state carries, if it is one of ours.
fn echoed_deadline(echoed: &str) -> Option<i64> {
    let rest = echoed.strip_prefix("larkgate-wait:v1:")?;
    let (_, deadline) = rest.rsplit_once(':')?;
    deadline.parse().ok()
}

/// `ms` (Unix milliseconds) as `HH:MM UTC`.
fn clock_time(ms: i64) -> String {
    let minutes = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02} UTC", minutes / 60, minutes % 60)
}

/// How long this call is held now.
#[derive(Debug, PartialEq, Eq)]
struct Round {
    /// When the whole wait ends (Unix ms, the platform's clock).
    deadline_ms: i64,
    /// How long this round holds the call.
    hold: Duration,
    /// Whether the wait ends with this round (else it answers a state to go on with).
    last: bool,
}

impl Round {
    /// The round a call starts at `now_ms`: the wait ends `wait` from now, or at the deadline
    /// an echoed state names if that is sooner (never later: the state is the client's). A
    /// 2026-07-28 round holds at most a tenth of the wait (at least 1 s). `None` when the wait
    /// is over.
    fn now(rounds: Option<&Rounds>, wait: Duration, now_ms: i64) -> Option<Round> {
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let latest = now_ms.saturating_add(wait_ms);
        let deadline_ms = rounds
            .and_then(|r| r.echoed.as_deref())
            .and_then(echoed_deadline)
            .map_or(latest, |echoed| echoed.min(latest));
        let left = Duration::from_millis(u64::try_from(deadline_ms - now_ms).ok()?);
        if left.is_zero() {
            return None;
        }
        let round = match rounds {
            Some(_) => (wait / ROUNDS).max(Duration::from_secs(1)),
            None => left,
        };
        Some(Round {
            deadline_ms,
            hold: left.min(round),
            last: left <= round,
        })
    }
}

/// Holds a gated call whose request is pending (`asked`, the gate's `approval_required`)
/// until it is decided, the wait's time is up, the client cancels or the server stops: see the
/// module documentation. `Ok` is the approval that admits the call.
pub async fn until_decided(
    services: &Services,
    call: &GatedCall<'_>,
    asked: Refusal,
    mut waiting: Waiting,
    wait: Duration,
) -> Result<String, Refusal> {
    let Some(mut id) = asked.approval_id.clone() else {
        return Err(asked);
    };
    let decisions = &services.decisions;
    let store = services.store.as_ref();
    let poll = decisions.poll_interval(store);
    let mut told = decisions.watch();
    let mut stopping = decisions.stopping();
    if *stopping.borrow_and_update() {
        return Err(asked);
    }
    // Each held call keeps a connection busy: one principal holds at most so many at once, and
    // a call beyond them is answered at once, as without a wait.
    let most = services.policy().approvals.max_waiting_per_principal;
    let Some(_held) = decisions.hold(call.principal, most) else {
        return Err(Refusal {
            hint: Some(format!(
                "{most} calls of yours already wait for a decision here, as many as may at \
                 once; this one was not held: call again once the request (id {id}) is decided"
            )),
            ..asked
        });
    };
    let now_ms = services.clock.now_ms();
    let Some(Round {
        deadline_ms,
        hold,
        last,
    }) = Round::now(waiting.rounds.as_ref(), wait, now_ms)
    else {
        return Err(asked);
    };
    let started = tokio::time::Instant::now();
    let ends = started + hold;
    let asked_at = store
        .approval(&id)
        .await
        .ok()
        .flatten()
        .map_or(now_ms, |a| a.created_at_ms);
    let total = wait.as_secs_f64();
    let waited_before = total - (deadline_ms - now_ms) as f64 / 1000.0;
    let mut next_progress = started;
    loop {
        if let Some(progress) = &waiting.progress
            && tokio::time::Instant::now() >= next_progress
        {
            let waited = waited_before + started.elapsed().as_secs_f64();
            progress
                .tell(
                    waited.floor(),
                    total,
                    format!(
                        "waiting for an approver: approval {id}, asked {}",
                        clock_time(asked_at)
                    ),
                )
                .await;
            next_progress += PROGRESS_EVERY;
        }
        let wake =
            (tokio::time::Instant::now() + poll)
                .min(ends)
                .min(if waiting.progress.is_some() {
                    next_progress
                } else {
                    ends
                });
        tokio::select! {
            () = &mut waiting.cancelled => {
                return Err(withdraw(services, call.principal, &id).await);
            }
            _ = stopping.changed() => return Err(asked_again(asked, &id)),
            _ = told.changed() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
        let status = match store.approval(&id).await {
            Ok(Some(approval)) => approval.status,
            Ok(None) => ApprovalStatus::Expired,
            Err(error) => return Err(Refusal::store("the approval could not be read", error)),
        };
        if status != ApprovalStatus::Pending {
            // Decided (or expired, or withdrawn by another of its callers): the gate says what
            // that means for this call, as it would for the call made now.
            match super::admit(services, call).await {
                Ok(admitted) => return Ok(admitted),
                Err(refusal)
                    if refusal.code == Code::ApprovalRequired && refusal.approval_id.is_some() =>
                {
                    // Asked anew (another call held for the same request used its approval, or
                    // it expired): wait on for the new request, and tell the client its id.
                    id = refusal.approval_id.clone().unwrap_or_default();
                    next_progress = tokio::time::Instant::now();
                }
                Err(refusal) => return Err(refusal),
            }
        }
        if tokio::time::Instant::now() >= ends {
            let refusal = asked_again(asked, &id);
            return Err(if last {
                refusal
            } else {
                Refusal {
                    wait_state: Some(Box::new(state(&id, deadline_ms))),
                    ..refusal
                }
            });
        }
    }
}

/// The gate's `approval_required`, for the request `id` (a new one if the first was asked
/// anew while the call waited).
fn asked_again(asked: Refusal, id: &str) -> Refusal {
    if asked.approval_id.as_deref() == Some(id) {
        return asked;
    }
    Refusal {
        approval_id: Some(id.to_owned()),
        ..Refusal::new(
            Code::ApprovalRequired,
            format!("this call needs an approval (id {id}); none was decided while it waited"),
        )
        .with_hint(format!(
            "an approver runs `larkgate approvals approve {id}`; then call again with the same \
             arguments"
        ))
    }
}

/// The client cancelled its waiting call: its request is withdrawn (if it is still pending)
/// and recorded so. The refusal is what the call's audit record says; the client, gone, is not
/// told.
async fn withdraw(services: &Services, principal: &str, id: &str) -> Refusal {
    let now_ms = services.clock.now_ms();
    let withdrawn = services
        .store
        .withdraw_approval(id, principal, now_ms)
        .await;
    let refusal = |message: String| Refusal {
        approval_id: Some(id.to_owned()),
        ..Refusal::new(Code::ApprovalRequired, message)
    };
    match withdrawn {
        Ok(true) => {
            services.decisions.told();
            let event = AuditEntry {
                kind: Some(larkgate_store::AuditKind::Event),
                principal: principal.to_owned(),
                code: Some(EventKind::Withdrawn.into()),
                detail: Some(format!(
                    "approval {id} withdrawn: its caller cancelled the call that waited for it"
                )),
                ..Default::default()
            };
            if let Err(error) = services.audit.record_event(event) {
                tracing::error!(%error, approval = id, "the withdrawal could not be audited");
            }
            refusal(format!(
                "the caller cancelled the call while it waited for an approver; its request \
                 (id {id}) was withdrawn"
            ))
        }
        Ok(false) => refusal(format!(
            "the caller cancelled the call while it waited for an approver (request {id}, \
             no longer pending)"
        )),
        Err(error) => {
            tracing::warn!(%error, approval = id, "a cancelled call's request could not be withdrawn; it expires as any pending request does");
            refusal(format!(
                "the caller cancelled the call while it waited for an approver (request {id})"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_carries_its_deadline_and_nothing_else_is_read_as_one() {
        assert_eq!(
            echoed_deadline(&state("appr-1", 1_700_000_000_000)),
            Some(1_700_000_000_000)
        );
        for hostile in [
            "",
            "larkgate-wait:v1:",
            "larkgate-wait:v1:id:soon",
            "larkgate-wait:v2:id:5",
            "wait:v1:id:5",
            "larkgate-wait:v1:id:99999999999999999999999",
        ] {
            assert_eq!(echoed_deadline(hostile), None, "{hostile:?}");
        }
    }

    #[test]
    fn a_round_holds_a_tenth_of_the_wait_and_an_echoed_deadline_only_shortens_it() {
        let wait = Duration::from_secs(120);
        let echoed = |deadline: i64| Rounds {
            echoed: Some(state("a", deadline)),
        };
        let round = |rounds: Option<&Rounds>, now| Round::now(rounds, wait, now);
        let table = [
            // (a retry's state, now, the round)
            (None, 0, Some((120_000, 120, true))),
            (Some(Rounds::default()), 0, Some((120_000, 12, false))),
            (Some(echoed(120_000)), 110_000, Some((120_000, 10, true))),
            (Some(echoed(120_000)), 100_000, Some((120_000, 12, false))),
            // A forged deadline far away is cut to the wait from now.
            (Some(echoed(i64::MAX)), 5_000, Some((125_000, 12, false))),
            // Past, or now: the wait is over.
            (Some(echoed(120_000)), 120_000, None),
            (Some(echoed(-5)), 0, None),
        ];
        for (rounds, now, expected) in table {
            let expected = expected.map(|(deadline_ms, seconds, last)| Round {
                deadline_ms,
                hold: Duration::from_secs(seconds),
                last,
            });
            assert_eq!(round(rounds.as_ref(), now), expected, "{rounds:?} at {now}");
        }
        // A short wait still holds a round of a second.
        let short = Round::now(Some(&Rounds::default()), Duration::from_secs(2), 0).unwrap();
        assert_eq!((short.hold, short.last), (Duration::from_secs(1), false));
    }

    #[test]
    fn the_time_of_asking_is_said_in_utc() {
        assert_eq!(clock_time(0), "00:00 UTC");
        assert_eq!(
            clock_time(1_764_979_200_000 + 13 * 3_600_000 + 7 * 60_000),
            "13:07 UTC"
        );
    }
}
