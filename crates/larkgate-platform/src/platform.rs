//! The assembled platform: shared services, the registry and the pipeline.

use std::sync::Arc;

use larkgate_binding::Map;
use larkgate_store::Store;

use crate::audit::AuditSink;
use crate::catalog::Catalog;
use crate::clock::{Clock, SystemClock, TokioClock, WallClock};
use crate::envelope::Refusal;
use crate::identity::SessionIdentity;
use crate::pipeline::{self, CallRequest, Pipeline};
use crate::policy::Policy;
use crate::policy::TargetKind;
use crate::ratelimit::{DEFAULT_MAX_KEYS, RateLimiter};
use crate::registry::{Registry, RegistryError, ToolTable};
use crate::services::{CallLimits, Services};
use crate::{access, approvals, capabilities};

/// The assembled platform.
#[derive(Clone, Debug)]
pub struct Platform {
    services: Arc<Services>,
    registry: Arc<ToolTable>,
    catalog: Arc<Catalog>,
    pipeline: Pipeline,
    /// The calls of 2026-07-28 clients parked between rounds of questions.
    parked: Arc<crate::conversation::rounds::Desk<CallOutcome>>,
    /// The virtual servers served beside `/mcp`.
    servers: Arc<crate::servers::ServerTable>,
    /// The tools' documents for tool search, for the registry's current version.
    documents: Arc<crate::search::Documents>,
}

/// How a call ended: its output, or why it was refused.
pub type CallOutcome = Result<crate::registry::ToolOutput, Refusal>;

/// Builds a [`Platform`].
#[derive(Debug)]
pub struct PlatformBuilder {
    store: Arc<dyn Store>,
    audit: Arc<dyn AuditSink>,
    policy: Policy,
    limits: CallLimits,
    record_arguments: bool,
    clock: Box<dyn Clock>,
    wall_clock: Arc<dyn WallClock>,
    max_rate_keys: usize,
    shared_rate_limits: Option<crate::ratelimit::shared::SharedSettings>,
    registry: Registry,
    servers: crate::servers::Servers,
}

impl PlatformBuilder {
    /// Sets the policy (default: [`Policy::default`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the virtual servers (default: none; `/mcp` only).
    pub fn servers(mut self, servers: crate::servers::Servers) -> Self {
        self.servers = servers;
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

    /// Keeps the rate limits' budgets in Redis, shared by every process configured alike
    /// (default: in this process).
    pub fn shared_rate_limits(
        mut self,
        settings: crate::ratelimit::shared::SharedSettings,
    ) -> Self {
        self.shared_rate_limits = Some(settings);
        self
    }

    /// Sets the rate limiter's clock (default: tokio's).
    pub fn clock(mut self, clock: Box<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the time of day approvals go by (default: the system's).
    pub fn wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.wall_clock = clock;
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
            limiter: arc_swap::ArcSwap::from_pointee({
                let local =
                    RateLimiter::new(&self.policy.rate_limits, self.clock, self.max_rate_keys);
                match self.shared_rate_limits {
                    None => crate::ratelimit::Limiter::Local(local),
                    Some(settings) => crate::ratelimit::Limiter::Shared(Box::new(
                        crate::ratelimit::shared::SharedLimiter::new(
                            &self.policy.rate_limits,
                            local,
                            settings,
                        ),
                    )),
                }
            }),
            store: self.store,
            policy: {
                self.audit.policy_in_force(&self.policy.version());
                arc_swap::ArcSwap::from_pointee(self.policy)
            },
            audit: self.audit,
            limits: self.limits,
            record_arguments: self.record_arguments,
            metrics: crate::metrics::Metrics::default(),
            reviews: crate::review::Reviews::default(),
            clock: self.wall_clock,
            decisions: crate::decisions::Decisions::default(),
        });
        let registry = Arc::new(ToolTable::new(self.registry));
        let catalog = Arc::new(Catalog::default());
        Platform {
            pipeline: pipeline::build(
                Arc::clone(&services),
                Arc::clone(&registry),
                Arc::clone(&catalog),
            ),
            services,
            registry,
            catalog,
            parked: Arc::default(),
            servers: Arc::new(crate::servers::ServerTable::new(self.servers)),
            documents: Arc::default(),
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
        approvals::tools::register(&mut registry)?;
        Ok(PlatformBuilder {
            store,
            audit,
            policy: Policy::default(),
            limits: CallLimits::default(),
            record_arguments: false,
            clock: Box::new(TokioClock::default()),
            wall_clock: Arc::new(SystemClock),
            max_rate_keys: DEFAULT_MAX_KEYS,
            shared_rate_limits: None,
            registry,
            servers: crate::servers::Servers::default(),
        })
    }

    /// The shared services.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The virtual servers served beside `/mcp` ([`crate::servers`]).
    pub fn servers(&self) -> &Arc<crate::servers::ServerTable> {
        &self.servers
    }

    /// The pipeline's gating steps, in the order a call meets them.
    pub fn steps(&self) -> &[&'static str] {
        self.pipeline.steps()
    }

    /// The tools in force now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.snapshot()
    }

    /// The table of tools, for replacing an upstream's tools as they change.
    pub fn tool_table(&self) -> &Arc<ToolTable> {
        &self.registry
    }

    /// Logs, for each tool of the table that `which` selects, the policy's rules that name it and
    /// read an argument its input schema does not list: each refuses (gates, counts) every call
    /// of it, failing closed, until the rule or the tool changes. Called when an upstream's or
    /// the scripts' tools are replaced, so that a changed definition is noticed when it comes.
    pub fn warn_of_unfit_rules(&self, which: impl Fn(&crate::registry::ToolSpec) -> bool) {
        let policy = self.services().policy();
        for tool in self.registry.snapshot().iter().filter(|t| which(&t.spec)) {
            let Some(arguments) = &tool.arguments else {
                continue;
            };
            for unfit in policy.unfit_for(&tool.spec.name, arguments) {
                tracing::warn!(
                    tool = %tool.spec.name,
                    "{unfit}, which the tool's input schema does not list: it applies to every \
                     call of the tool (a rule refuses it) until the rule or the tool is changed"
                );
            }
        }
    }

    /// The calls of 2026-07-28 clients parked between rounds of questions
    /// ([`crate::conversation::rounds`]).
    pub fn parked(&self) -> &Arc<crate::conversation::rounds::Desk<CallOutcome>> {
        &self.parked
    }

    /// The upstreams' resources and prompts, for replacing an upstream's as they change.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The resources `identity` may read, as MCP listings.
    pub fn list_resources(&self, identity: Option<&SessionIdentity>) -> Vec<rmcp::model::Resource> {
        let Some(principal) = identity.map(|i| &i.run.principal) else {
            return Vec::new();
        };
        let policy = self.services.policy();
        let server = identity.and_then(|i| i.server.as_deref());
        let mut resources = self.catalog.resources(|uri| {
            policy.may_read_resource(principal, uri)
                && server.is_none_or(|s| s.serves_resource(uri))
        });
        if let Some(server) = server {
            for resource in &mut resources {
                resource.uri = server.shown_uri(&resource.uri);
            }
        }
        resources
    }

    /// The resource templates `identity` may read through, as MCP listings.
    pub fn list_resource_templates(
        &self,
        identity: Option<&SessionIdentity>,
    ) -> Vec<rmcp::model::ResourceTemplate> {
        let Some(principal) = identity.map(|i| &i.run.principal) else {
            return Vec::new();
        };
        let policy = self.services.policy();
        let server = identity.and_then(|i| i.server.as_deref());
        let mut templates = self.catalog.templates(|template| {
            policy.may_read_resource(principal, template)
                && server.is_none_or(|s| s.serves_resource(template))
        });
        if let Some(server) = server {
            for template in &mut templates {
                template.uri_template = server.shown_uri(&template.uri_template);
            }
        }
        templates
    }

    /// The prompts `identity` may get, as MCP listings.
    pub fn list_prompts(&self, identity: Option<&SessionIdentity>) -> Vec<rmcp::model::Prompt> {
        let Some(principal) = identity.map(|i| &i.run.principal) else {
            return Vec::new();
        };
        let policy = self.services.policy();
        let server = identity.and_then(|i| i.server.as_deref());
        let mut prompts = self.catalog.prompts(|name| {
            policy.may_get_prompt(principal, name) && server.is_none_or(|s| s.serves_prompt(name))
        });
        if let Some(server) = server {
            for prompt in &mut prompts {
                prompt.name = server.shown_prompt(&prompt.name);
            }
        }
        prompts
    }

    /// Reads resource `uri` (its larkgate URI) through the pipeline, as one call: authorized
    /// by the policy's resource patterns, rate limited, gated only where an approval pattern
    /// names it, audited. The value is the upstream's `{"contents": [...]}`.
    pub async fn read_resource(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        uri: &str,
    ) -> Result<Map, Refusal> {
        let request = CallRequest::read(identity, TargetKind::Resource, uri, None);
        self.dispatch(request).await.map(|output| output.value)
    }

    /// Gets prompt `name` (its larkgate name) with `arguments` through the pipeline, as
    /// [`Platform::read_resource`] reads. The value is the upstream's
    /// `{"description": ..., "messages": [...]}`.
    pub async fn get_prompt(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        name: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Map, Refusal> {
        let request = CallRequest::read(identity, TargetKind::Prompt, name, arguments);
        self.dispatch(request).await.map(|output| output.value)
    }

    /// Completes an argument of a federated prompt (its larkgate name) or resource template
    /// (its larkgate text) through the pipeline, as a read of it: the same policy patterns,
    /// rate limit and audit; refused where it would need an approval. The value is the
    /// upstream's `{"completion": {"values": [...], ...}}`, at most 100 values.
    pub async fn complete(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        kind: TargetKind,
        target: &str,
        completing: crate::catalog::Completing,
    ) -> Result<Map, Refusal> {
        let request = CallRequest::complete(identity, kind, target, completing);
        self.dispatch(request).await.map(|output| output.value)
    }

    /// Subscribes `identity` to the updates of resource `uri` (its larkgate URI) through the
    /// pipeline, as [`Platform::read_resource`] reads it (needing no approval: see
    /// [`CallRequest::subscribe`]), held by the upstream that listed it for as long as the
    /// answer is kept. Whoever relays its updates asks the policy again before each.
    pub async fn subscribe(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        uri: &str,
    ) -> Result<crate::catalog::Watched, Refusal> {
        let subscribing = crate::catalog::Subscribing::default();
        let request = CallRequest::subscribe(identity, uri, subscribing.clone());
        self.dispatch(request).await?;
        subscribing.take().ok_or_else(|| {
            Refusal::internal(
                "the subscription could not be made",
                "a subscription's dispatch left nothing",
            )
        })
    }

    /// Whether `identity` may read resource `uri` (its larkgate URI) now: what a relayed
    /// update of it is asked.
    pub fn may_read_resource(&self, identity: &SessionIdentity, uri: &str) -> bool {
        self.services
            .policy()
            .may_read_resource(&identity.run.principal, uri)
    }

    /// The tools `identity` may see, as MCP listings: every one, or, through a server with
    /// tool search, the search's own tools and the server's pinned ones ([`crate::search`]).
    pub fn list(&self, identity: Option<&SessionIdentity>) -> Vec<rmcp::model::Tool> {
        let Some(server) = identity
            .and_then(|i| i.server.as_deref())
            .filter(|s| s.tool_search())
        else {
            return self.visible(identity, |_| true);
        };
        let pinned = self.visible(identity, |name| server.pins(name));
        let search = crate::search::search_tools();
        search
            .into_iter()
            .chain(
                pinned
                    .into_iter()
                    .filter(|tool| !crate::search::is_search_tool(&tool.name)),
            )
            .collect()
    }

    /// Every tool `identity` may call through its server (with tool search: what its
    /// searches rank), as MCP listings under the names the server shows.
    pub fn served_tools(&self, identity: &SessionIdentity) -> Vec<rmcp::model::Tool> {
        self.visible(Some(identity), |_| true)
    }

    /// The answer to a `find_tools` call with `arguments` through a server with tool search:
    /// the best matches among every tool `identity` may see there.
    pub fn find_tools(
        &self,
        identity: Option<&SessionIdentity>,
        arguments: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> CallOutcome {
        let Some(identity) = identity else {
            return Err(Refusal::new(
                crate::envelope::Code::Unauthenticated,
                "this call is not authenticated",
            ));
        };
        let query = crate::search::Query::from_arguments(arguments)?;
        let registry = self.registry.snapshot();
        let documents = self.documents.of(&registry);
        let policy = self.services.policy();
        let (tools, documents): (Vec<_>, Vec<_>) = registry
            .iter()
            .filter(|t| {
                Self::sees(identity, &policy, t)
                    && !crate::search::is_search_tool(&Self::shown_name(identity, t))
            })
            .filter_map(|t| Some((t, documents.get(&t.spec.name)?)))
            .unzip();
        Ok(crate::search::find(&documents, &query, |position| {
            Self::shown(identity, tools[position])
        }))
    }

    /// The tools `identity` may see whose larkgate names `which` admits, as MCP listings under
    /// the names its server shows.
    fn visible(
        &self,
        identity: Option<&SessionIdentity>,
        which: impl Fn(&str) -> bool,
    ) -> Vec<rmcp::model::Tool> {
        let Some(identity) = identity else {
            return Vec::new();
        };
        let policy = self.services.policy();
        self.registry
            .snapshot()
            .iter()
            .filter(|t| which(&t.spec.name) && Self::sees(identity, &policy, t))
            .map(|t| Self::shown(identity, t))
            .collect()
    }

    /// Whether `identity` may see tool `t` (through its server, if any).
    fn sees(
        identity: &SessionIdentity,
        policy: &Policy,
        t: &crate::registry::RegisteredTool,
    ) -> bool {
        access::reachable(identity.run.kind, &t.spec)
            && access::may_see(policy, &identity.run.principal, &t.spec)
            && identity
                .server
                .as_deref()
                .is_none_or(|server| server.serves_tool(&t.spec.name, &t.spec.origin))
    }

    /// The name `identity`'s server shows tool `t` by.
    fn shown_name(identity: &SessionIdentity, t: &crate::registry::RegisteredTool) -> String {
        match &identity.server {
            Some(server) => server.shown_name(&t.spec.name, &t.spec.origin.original_name),
            None => t.spec.name.clone(),
        }
    }

    /// Tool `t` as `identity`'s server lists it.
    fn shown(identity: &SessionIdentity, t: &crate::registry::RegisteredTool) -> rmcp::model::Tool {
        let mut tool = t.to_mcp();
        if identity.server.is_some() {
            tool.name = Self::shown_name(identity, t).into();
        }
        tool
    }

    /// Runs one call through the pipeline.
    pub async fn call(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Map, Refusal> {
        self.call_for_client(identity, tool, arguments)
            .await
            .map(|output| output.value)
    }

    /// [`Platform::call`] for an MCP client: with the answer as MCP content where the tool
    /// passes one on (see [`crate::registry::ToolHandler::call_for_client`]).
    pub async fn call_for_client(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<crate::registry::ToolOutput, Refusal> {
        self.dispatch(CallRequest::new(identity, tool, arguments))
            .await
    }

    /// [`Platform::call_for_client`] in `conversation`: what the call says (an upstream's
    /// progress) reaches the client that made it, and the client's cancellation reaches the
    /// call.
    pub async fn call_in(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        conversation: crate::Conversation,
    ) -> Result<crate::registry::ToolOutput, Refusal> {
        let mut request = CallRequest::new(identity, tool, arguments);
        request.conversation = conversation;
        self.dispatch(request).await
    }

    /// [`Platform::call_for_client`] for a client that waits for an approval's decision as
    /// `waiting` says, where the call's `require` rule has a wait
    /// ([`crate::approvals::wait`]).
    pub async fn call_waiting(
        &self,
        identity: Option<std::sync::Arc<SessionIdentity>>,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        waiting: crate::approvals::wait::Waiting,
        conversation: crate::Conversation,
    ) -> Result<crate::registry::ToolOutput, Refusal> {
        let mut request = CallRequest::new(identity, tool, arguments);
        request.waiting = Some(waiting);
        request.conversation = conversation;
        self.dispatch(request).await
    }

    async fn dispatch(&self, request: CallRequest) -> Result<crate::registry::ToolOutput, Refusal> {
        use tower::ServiceExt;
        match self.pipeline.service().clone().oneshot(request).await {
            Ok(response) => response.result,
            Err(never) => match never {},
        }
    }
}
