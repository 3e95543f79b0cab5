//! `authorize`: the tool must exist and be visible to the caller (else `not_found`, one text
//! for both, so a refusal reveals nothing) and callable by it (else `forbidden`). The
//! decisions themselves are [`crate::access`]'s; this step resolves the tool for the steps
//! after it.
//!
//! A resource read or prompt get is resolved from the [`Catalog`] instead, after the policy's
//! resource or prompt patterns admit what was asked for; anything they do not admit is
//! answered exactly as what nobody listed (`not_found`): resources and prompts have no
//! "visible but not callable" grant.
//!
//! A request through a virtual server (`/mcp/NAME`) is held to what the server serves as well
//! ([`crate::servers`]): what it does not serve is `not_found`, as what nobody listed.
//!
//! A published script's run is held to the upstream tools its version was published against
//! ([`access::within_published_tools`]): another upstream tool, reached by a name computed at
//! run time, is `forbidden`.

use std::sync::Arc;

use crate::access;
use crate::catalog::{self, Catalog, NotResolved};
use crate::envelope::{Code, Refusal};
use crate::policy::TargetKind;
use crate::registry::ToolTable;
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct Authorize {
    /// The platform's services.
    pub services: Arc<Services>,
    /// The tools.
    pub registry: Arc<ToolTable>,
    /// The upstreams' resources and prompts.
    pub catalog: Arc<Catalog>,
}

#[async_trait::async_trait]
impl Step for Authorize {
    const NAME: &'static str = "authorize";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let Some(identity) = &request.identity else {
            return Err(Refusal::new(
                Code::Unauthenticated,
                "this call is not authenticated",
            ));
        };
        let principal = &identity.run.principal;
        let policy = self.services.policy();
        if request.kind != TargetKind::Tool {
            let target = &request.target;
            let server = identity.server.as_deref();
            let admitted = match request.kind {
                TargetKind::Resource => {
                    policy.may_read_resource(principal, target)
                        && server.is_none_or(|s| s.serves_resource(target))
                }
                _ => {
                    policy.may_get_prompt(principal, target)
                        && server.is_none_or(|s| s.serves_prompt(target))
                }
            };
            let resolved = match (admitted, &request.completing, request.kind) {
                (false, _, _) => Err(NotResolved::Missing),
                // A completion names a template itself, not a URI made from one.
                (true, Some(_), TargetKind::Resource) => self.catalog.resolve_template(target),
                (true, _, kind) => self.catalog.resolve(kind, target),
            };
            let resolved = resolved.map_err(|why| catalog::not_found(request.kind, target, why))?;
            request.resolved = Some(Arc::new(resolved.dispatch(
                request.kind,
                request.completing.clone(),
                request.subscribing.clone(),
            )));
            return Ok(());
        }
        let registry = self.registry.snapshot();
        let Some(tool) = registry.get(&request.tool) else {
            return Err(Refusal::not_found(&request.tool).decided_by("no tool has this name"));
        };
        // The caller is told the same as for a tool that does not exist; the operator's audit
        // tells the two apart.
        if !access::reachable(identity.run.kind, &tool.spec) {
            return Err(Refusal::not_found(&request.tool)
                .decided_by("the tool is for people's own sessions, not script runs"));
        }
        if !access::may_see(&policy, principal, &tool.spec) {
            return Err(Refusal::not_found(&request.tool).decided_by(format!(
                "the roles: no role of {} lists or calls it, and no allow rule names it",
                principal.id
            )));
        }
        if let Some(server) = &identity.server
            && !server.serves_tool(&tool.spec.name, &tool.spec.origin)
        {
            return Err(Refusal::not_found(&request.tool).decided_by(format!(
                "the server {}: its patterns do not serve it",
                server.name()
            )));
        }
        if !access::may_call(&policy, principal, &tool.spec) {
            return Err(Refusal::new(
                Code::Forbidden,
                format!("{} may not call {}", principal.id, request.tool),
            )
            .with_hint("ask an administrator for a role that allows it"));
        }
        let published = identity.run.upstream_tools.as_deref();
        if !access::within_published_tools(published, &tool.spec) {
            return Err(Refusal::new(
                Code::Forbidden,
                format!(
                    "this published script did not refer to {} when it was published, so it \
                     may not call it",
                    request.tool
                ),
            )
            .with_hint(
                "name the tool in the script's source (or call it in a review run) and \
                 publish a new version",
            ));
        }
        request.resolved = Some(Arc::clone(tool));
        Ok(())
    }
}
