//! The assembled platform: shared services, the registry and the pipeline.

use std::sync::Arc;

use larkgate_binding::{Limits, Map};
use larkgate_store::{Approval, AuditKind, Principal, Store, StoreError};

use crate::audit::{AuditEntry, AuditSink};
use crate::envelope::{Code, Refusal};
use crate::pipeline::{self, CallRequest, PipelineService};
use crate::policy::{Policy, ROLE_ADMIN};
use crate::ratelimit::{Clock, DEFAULT_MAX_KEYS, RateLimiter, TokioClock};
use crate::registry::{RegisteredTool, Registry, RegistryError, ToolTable};
use crate::session::SessionIdentity;
use crate::{builtin, capabilities};

/// Size limits the platform enforces on every call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Limits on argument and result values.
    pub values: Limits,
    /// The largest `arguments` object, in bytes of compact JSON.
    pub max_argument_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            values: Limits::default(),
            max_argument_bytes: 1024 * 1024,
        }
    }
}

/// What every step and handler shares.
#[derive(Debug)]
pub struct Services {
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// The operator's policy.
    pub policy: Policy,
    /// Where audit records go.
    pub audit: Arc<dyn AuditSink>,
    /// Rate limits from the policy.
    pub limiter: RateLimiter,
    /// Size limits.
    pub limits: CallLimits,
    /// Whether intents record the canonical arguments themselves, not only their hash.
    pub record_arguments: bool,
    /// Calls by tool and outcome, latencies, sessions, runs.
    pub metrics: crate::metrics::Metrics,
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Services {
    /// Whether `principal` may see `tool`: platform tools by their fixed roles, everything
    /// else by policy.
    pub fn may_see(&self, principal: &Principal, tool: &RegisteredTool) -> bool {
        match tool.spec.roles {
            Some(roles) => principal.roles.iter().any(|r| roles.contains(&r.as_str())),
            None => self.policy.may_see(principal, &tool.spec.name),
        }
    }

    /// Whether `principal` may call `tool`.
    pub fn may_call(&self, principal: &Principal, tool: &RegisteredTool) -> bool {
        match tool.spec.roles {
            Some(roles) => principal.roles.iter().any(|r| roles.contains(&r.as_str())),
            None => self.policy.may_call(principal, &tool.spec.name),
        }
    }

    /// Resolves a pending approval. No principal approves (or denies) its own call; only
    /// `approver` and `admin` principals resolve approvals at all. The resolution is audited.
    pub async fn resolve_approval(
        &self,
        approver: &Principal,
        id: &str,
        approve: bool,
    ) -> Result<Approval, Refusal> {
        let allowed = approver
            .roles
            .iter()
            .any(|r| r == crate::policy::ROLE_APPROVER || r == ROLE_ADMIN);
        if !allowed {
            return Err(Refusal::new(
                Code::Forbidden,
                format!("{} may not resolve approvals", approver.id),
            )
            .with_hint("approvals are resolved by principals with the approver or admin role"));
        }
        let approval = self
            .store
            .approval(id)
            .await
            .map_err(|e| Refusal::internal(e.to_string()))?
            .ok_or_else(|| {
                Refusal::new(
                    Code::NotFound,
                    format!("there is no approval with id {id:?}"),
                )
            })?;
        if approval.principal == approver.id {
            return Err(Refusal::new(
                Code::Forbidden,
                format!(
                    "{} may not resolve an approval of its own call",
                    approver.id
                ),
            )
            .with_hint("another approver must decide"));
        }
        let now = now_ms();
        let ttl_ms = i64::try_from(self.policy.approvals.ttl_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX);
        let resolved = self
            .store
            .resolve_approval(id, &approver.id, approve, now, now.saturating_add(ttl_ms))
            .await
            .map_err(|e| match e {
                StoreError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
                other => Refusal::internal(other.to_string()),
            })?;
        let event = AuditEntry {
            kind: Some(AuditKind::Event),
            principal: approver.id.clone(),
            tool: Some(resolved.tool.clone()),
            args_hash: Some(resolved.args_hash.clone()),
            code: Some(if approve { "approved" } else { "denied" }.to_owned()),
            detail: Some(format!(
                "approval {} for {} {}",
                resolved.id,
                resolved.principal,
                if approve { "approved" } else { "denied" }
            )),
            ..Default::default()
        };
        self.audit
            .record_event(event)
            .map_err(|e| Refusal::internal(format!("the resolution could not be audited: {e}")))?;
        Ok(resolved)
    }
}

/// The assembled platform.
#[derive(Clone, Debug)]
pub struct Platform {
    services: Arc<Services>,
    registry: Arc<ToolTable>,
    pipeline: PipelineService,
}

/// Builds a [`Platform`].
#[derive(Debug)]
pub struct PlatformBuilder {
    store: Arc<dyn Store>,
    audit: Arc<dyn AuditSink>,
    policy: Policy,
    limits: CallLimits,
    record_arguments: bool,
    clock: Box<dyn Clock>,
    max_rate_keys: usize,
    registry: Registry,
}

impl PlatformBuilder {
    /// Sets the policy (default: [`Policy::default`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the size limits.
    pub fn limits(mut self, limits: CallLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Records canonical arguments in intents.
    pub fn record_arguments(mut self, record: bool) -> Self {
        self.record_arguments = record;
        self
    }

    /// Sets the rate limiter's clock (default: tokio's).
    pub fn clock(mut self, clock: Box<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Registers an extra tool (upstream, script, or a test's).
    pub fn tool(
        mut self,
        spec: crate::registry::ToolSpec,
        handler: Arc<dyn crate::registry::ToolHandler>,
    ) -> Result<Self, RegistryError> {
        self.registry.register(spec, handler)?;
        Ok(self)
    }

    /// Assembles the platform.
    pub fn build(self) -> Platform {
        let services = Arc::new(Services {
            limiter: RateLimiter::new(&self.policy.rate_limits, self.clock, self.max_rate_keys),
            store: self.store,
            policy: self.policy,
            audit: self.audit,
            limits: self.limits,
            record_arguments: self.record_arguments,
            metrics: crate::metrics::Metrics::default(),
        });
        let registry = Arc::new(ToolTable::new(self.registry));
        Platform {
            pipeline: pipeline::build(Arc::clone(&services), Arc::clone(&registry)),
            services,
            registry,
        }
    }
}

impl Platform {
    /// A builder with the built-in capabilities and platform tools registered.
    pub fn builder(
        store: Arc<dyn Store>,
        audit: Arc<dyn AuditSink>,
    ) -> Result<PlatformBuilder, RegistryError> {
        let mut registry = Registry::new();
        capabilities::register(&mut registry)?;
        builtin::register(&mut registry)?;
        Ok(PlatformBuilder {
            store,
            audit,
            policy: Policy::default(),
            limits: CallLimits::default(),
            record_arguments: false,
            clock: Box::new(TokioClock::default()),
            max_rate_keys: DEFAULT_MAX_KEYS,
            registry,
        })
    }

    /// The shared services.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The tools in force now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.snapshot()
    }

    /// The table of tools, for replacing an upstream's tools as they change.
    pub fn tool_table(&self) -> &Arc<ToolTable> {
        &self.registry
    }

    /// The tools `identity` may see, as MCP listings.
    pub fn list(&self, identity: Option<&SessionIdentity>) -> Vec<rmcp::model::Tool> {
        let Some(identity) = identity else {
            return Vec::new();
        };
        self.registry
            .snapshot()
            .iter()
            .filter(|t| self.services.may_see(&identity.run.principal, t))
            .map(|t| t.to_mcp())
            .collect()
    }

    /// Runs one call through the pipeline.
    pub async fn call(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Map, Refusal> {
        use tower::ServiceExt;
        let request = CallRequest::new(identity, tool, arguments);
        match self.pipeline.clone().oneshot(request).await {
            Ok(response) => response.result,
            Err(never) => match never {},
        }
    }
}
