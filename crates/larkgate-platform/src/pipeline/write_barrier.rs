//! `write barrier`: a draft run may call only tools classified read-only; a review run's call to
//! any other tool is not refused but intercepted, recorded as an intended write and never made
//! ([`crate::review`]). The decision is [`larkgate_caller::barrier::write_barrier`]'s, from the
//! registry's classification (fail closed: a tool whose read-only status is unknown is a
//! write); this step is where it is authoritative.

use crate::envelope::Refusal;
use larkgate_caller::barrier::{Barrier, write_barrier};
use std::sync::Arc;

use crate::identity::RunKind;
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct WriteBarrier {
    /// The platform's services (a review run's ledger notes every tool it calls here, once the
    /// call is authorized: a later refusal by the rate limit or the gate does not hide it).
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for WriteBarrier {
    const NAME: &'static str = "write barrier";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let kind = request.identity.as_ref().map(|i| i.run.kind);
        if kind == Some(RunKind::Review) {
            let run_id = request
                .identity
                .as_ref()
                .and_then(|i| i.run.run_id.as_deref());
            self.services.reviews.called(run_id, &request.tool);
        }
        let read_only = request.resolved.as_ref().is_some_and(|t| t.spec.read_only);
        match write_barrier(kind, &request.tool, read_only) {
            Barrier::Pass => Ok(()),
            Barrier::Intercept => {
                request.intercepted = true;
                Ok(())
            }
            Barrier::Refuse(envelope) => {
                let refusal = Refusal::new(envelope.code, envelope.message);
                Err(match envelope.hint {
                    Some(hint) => refusal.with_hint(hint),
                    None => refusal,
                })
            }
        }
    }
}
