//! `rate limit`: the policy's GCRA budgets ([`crate::ratelimit`]). A call refused here never
//! reaches the gate, so it never burns an approval.

use std::sync::Arc;

use crate::envelope::{Code, Refusal};
use crate::policy::TargetKind;
use crate::ratelimit::{Counted, Refused};
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct RateLimit {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for RateLimit {
    const NAME: &'static str = "rate limit";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        if request.intercepted {
            // A review run's intended write is recorded, never made: nothing to count or approve.
            return Ok(());
        }
        if self.services.policy().reads_calls_of(&request.target) {
            request.ensure_facts(&self.services);
        }
        let principal = request.principal_id().to_owned();
        // A read's budget is kept per listed entry (its resource, or the template it matched).
        let key = match (&request.resolved, request.kind) {
            (Some(resolved), TargetKind::Resource | TargetKind::Prompt) => &resolved.spec.name,
            _ => &request.target,
        };
        self.services
            .limiter()
            .check_target(Counted {
                principal: &principal,
                kind: request.kind,
                name: &request.target,
                key,
                facts: request.facts.as_ref(),
            })
            .await
            .map_err(|refused| match refused {
                Refused::Budget(limited) => Refusal {
                    retry_after: Some(limited.retry_after),
                    ..Refusal::new(
                        Code::RateLimited,
                        format!("{principal} is calling {} too often", request.tool),
                    )
                    .with_hint("wait retry_after_seconds and call again")
                },
                Refused::Unreachable(limited) => Refusal {
                    retry_after: Some(limited.retry_after),
                    ..Refusal::new(
                        Code::RateLimited,
                        "the shared rate limits could not be checked (their store is \
                         unreachable), so the call was not admitted",
                    )
                    .with_hint(
                        "try again shortly; if it keeps happening, tell the operator (larkgate's \
                         log says why)",
                    )
                },
            })
    }
}
