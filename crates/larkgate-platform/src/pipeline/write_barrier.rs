//! `write barrier`: a draft run may call only tools classified read-only. The classification
//! is the registry's (fail closed: a tool whose read-only status is unknown is a write; an
//! upstream's `readOnlyHint` counts here, and nowhere else).

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
        let draft = request
            .identity
            .as_ref()
            .is_some_and(|i| i.run.kind == RunKind::Draft);
        let read_only = request.resolved.as_ref().is_some_and(|t| t.spec.read_only);
        if draft && !read_only {
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
