//! `write barrier`: a draft run may call only tools classified read-only. The classification
//! is the registry's (fail closed: a tool whose read-only status is unknown is a write; an
//! upstream's `readOnlyHint` counts here, and nowhere else). A review run's call to any other
//! tool is not refused but intercepted: recorded as an intended write, never made
//! ([`crate::review`]).

use crate::envelope::{Code, Refusal};
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
        if read_only {
            return Ok(());
        }
        if kind == Some(RunKind::Review) {
            request.intercepted = true;
            return Ok(());
        }
        if kind == Some(RunKind::Draft) {
            return Err(Refusal::new(
                Code::WriteBarrier,
                format!(
                    "a draft run may call only read-only tools, and {} may write",
                    request.tool
                ),
            )
            .with_hint("publish the script to run it with write access"));
        }
        Ok(())
    }
}
