//! `authenticate`: a call needs an identity. Over HTTP the edge verified the bearer token and
//! bound the principal to the request; in-memory and stdio sessions were bound when they were
//! opened. A call that reaches the pipeline without one is refused here, before anything about
//! the tool is looked up.

use crate::envelope::{Code, Refusal};

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct Authenticate;

#[async_trait::async_trait]
impl Step for Authenticate {
    const NAME: &'static str = "authenticate";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        if request.identity.is_none() {
            return Err(
                Refusal::new(Code::Unauthenticated, "this call is not authenticated")
                    .with_hint("connect with a valid larkgate token"),
            );
        }
        Ok(())
    }
}
