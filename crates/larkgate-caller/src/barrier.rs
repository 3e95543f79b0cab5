//! The write barrier's decision, in one function: a draft run may call only read-only tools; a
//! review run's call to any other tool is intercepted (recorded as an intended write, never
//! made); every other call passes.
//!
//! The platform's pipeline step (`pipeline/write_barrier.rs`) decides every call with
//! [`write_barrier`], from the registry's classification of the tool. A script worker may
//! refuse a draft's call before it leaves the worker, from the listing's annotation (which the
//! registry wrote), and then answers with this function's refusal: the same code and the same
//! words as the pipeline, never a decision of its own. Whatever the worker lets through is
//! decided again by the pipeline, which is authoritative.
//!
//! Threat model: a script that tries to write while it runs as a draft. The classification
//! fails closed (a tool whose read-only status is unknown is a write), so an unknown tool
//! cannot pass as read-only here or in the pipeline.

use crate::{Code, Envelope, RunKind};

/// What the write barrier does with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// The call goes on.
    Pass,
    /// A review run's write: recorded as intended, not made.
    Intercept,
    /// A draft run's write: refused with this envelope (code `write_barrier`).
    Refuse(Envelope),
}

/// The barrier's decision for a call of `tool` in a run of `kind` (`None`: not from a run),
/// where `read_only` is whether the tool is classified read-only.
pub fn write_barrier(kind: Option<RunKind>, tool: &str, read_only: bool) -> Barrier {
    if read_only {
        return Barrier::Pass;
    }
    match kind {
        Some(RunKind::Review) => Barrier::Intercept,
        Some(RunKind::Draft) => Barrier::Refuse(Envelope {
            code: Code::WriteBarrier,
            category: Code::WriteBarrier.category(),
            message: format!("a draft run may call only read-only tools, and {tool} may write"),
            hint: Some("publish the script to run it with write access".to_owned()),
            retry_after_seconds: None,
            approval_id: None,
            correlation_id: None,
        }),
        Some(RunKind::Published) | Some(RunKind::Direct) | None => Barrier::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every kind of run against a read-only tool and a write: only a draft's write is refused,
    // only a review's is intercepted.
    #[test]
    fn only_a_drafts_write_is_refused_and_only_a_reviews_intercepted() {
        let kinds = [
            None,
            Some(RunKind::Direct),
            Some(RunKind::Published),
            Some(RunKind::Draft),
            Some(RunKind::Review),
        ];
        for kind in kinds {
            assert_eq!(
                write_barrier(kind, "kv_get", true),
                Barrier::Pass,
                "{kind:?}"
            );
            let write = write_barrier(kind, "kv_set", false);
            match kind {
                Some(RunKind::Draft) => {
                    let Barrier::Refuse(envelope) = write else {
                        panic!("a draft's write passed: {write:?}");
                    };
                    assert_eq!(envelope.code, Code::WriteBarrier);
                    assert!(envelope.message.contains("kv_set"), "{}", envelope.message);
                    assert!(envelope.hint.is_some());
                }
                Some(RunKind::Review) => assert_eq!(write, Barrier::Intercept),
                _ => assert_eq!(write, Barrier::Pass, "{kind:?}"),
            }
        }
    }
}
