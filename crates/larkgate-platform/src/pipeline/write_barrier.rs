//! `write barrier`: a draft run may call only tools classified read-only. The classification
//! is the registry's (fail closed: a tool whose read-only status is unknown is a write; an
//! upstream's `readOnlyHint` counts here, and nowhere else). A review run's call to any other
//! tool is not refused but intercepted: recorded as an intended write, never made
//! ([`crate::review`]).

use crate::envelope::{Code, Refusal};
use crate::identity::RunKind;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct WriteBarrier;

#[async_trait::async_trait]
impl Step for WriteBarrier {
    const NAME: &'static str = "write barrier";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let kind = request.identity.as_ref().map(|i| i.run.kind);
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
