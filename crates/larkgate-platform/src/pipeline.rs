//! The one pipeline every call crosses, as tower layers, one file per step:
//!
//! ```text
//! audit_refusals.rs → authenticate.rs → authorize.rs → arguments.rs → conditions.rs
//!   → write_barrier.rs → rate_limit.rs → gate.rs → journal.rs (intent, consume approval,
//!   dispatch, outcome)
//!   → the tool's handler
//! ```
//!
//! A review run's call to a tool that may write leaves the path at the journal: the write
//! barrier marks it intercepted, the rate limit and the gate pass it, and the journal records
//! it as an intended write instead of dispatching it ([`crate::review`]).
//!
//! Each gating step is a [`Step`]: it reads and fills the typed [`CallRequest`] and either
//! passes the call on or refuses it. [`build`] assembles them; read top to bottom it is the
//! path of a call, and the order is precedence: a call that is both forbidden and over its
//! rate limit is refused as `forbidden`; a call refused by the rate limit never reaches the
//! gate, so it never burns an approval.

/// What every service of the pipeline declares alike: it answers a [`CallResponse`] (a refusal
/// is an answer, so the service itself never fails) and is always ready.
macro_rules! call_service {
    () => {
        type Response = CallResponse;
        type Error = std::convert::Infallible;
        type Future = BoxFuture;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), std::convert::Infallible>> {
            std::task::Poll::Ready(Ok(()))
        }
    };
}

mod arguments;
mod audit_refusals;
mod authenticate;
mod authorize;
mod conditions;
mod gate;
mod journal;
mod rate_limit;
mod write_barrier;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use larkgate_binding::Map;
use tower::{Layer, Service, ServiceBuilder};
use tracing::Instrument;

use crate::catalog::Catalog;
use crate::envelope::Refusal;
use crate::identity::SessionIdentity;
use crate::policy::TargetKind;
use crate::registry::{RegisteredTool, ToolTable};
use crate::services::Services;

pub use arguments::{Arguments, arguments_hash, canonical_arguments};
pub use audit_refusals::{AuditRefusals, AuditRefusalsLayer};
pub use authenticate::Authenticate;
pub use authorize::Authorize;
pub use conditions::{Conditions, facts};
pub use gate::Gate;
pub use journal::Journal;
pub use rate_limit::RateLimit;
pub use write_barrier::WriteBarrier;

/// The principal recorded for calls that authenticated as nobody.
pub const ANONYMOUS: &str = "anonymous";

/// One call on its way through the pipeline. Steps fill in what they learn.
#[derive(Debug)]
pub struct CallRequest {
    /// The tool name as the client sent it; for a resource read or a prompt get, how the
    /// audit and the logs name it (`resources/read <uri>`, `prompts/get <name>`).
    pub tool: String,
    /// What the call is made to.
    pub kind: TargetKind,
    /// The tool name, the resource's larkgate URI or the prompt's name, as the client sent it.
    pub target: String,
    /// The arguments as the client sent them.
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// The session's bound identity; `None` when nothing authenticated it.
    pub identity: Option<Arc<SessionIdentity>>,
    /// The resolved tool (after `authorize`).
    pub resolved: Option<Arc<RegisteredTool>>,
    /// The canonical arguments (after `arguments`).
    pub canonical: Option<Map>,
    /// SHA-256 (hex) of the canonical arguments' RFC 8785 JSON.
    pub args_hash: Option<String>,
    /// The policy rule that requires an approval for this call (after `conditions`).
    pub approval_rule: Option<String>,
    /// What conditions read of this call, made once by the first step that needs them
    /// ([`CallRequest::ensure_facts`]).
    pub facts: Option<crate::policy::FactValues>,
    /// The approval this call will consume (after `gate`).
    pub approval_id: Option<String>,
    /// A review run's call to a tool that may write (set by `write barrier`): the rate limit
    /// and the gate pass it untouched, and the journal records it as an intended write and
    /// answers a placeholder instead of dispatching it ([`crate::review`]).
    pub intercepted: bool,
    /// For a review run's call the approval gate held: what it said (the call is then
    /// intercepted and recorded with it, never made).
    pub review_gate: Option<crate::review::ReviewGate>,
    /// How the client waits for an approval's decision, for a call straight from a client
    /// (none for a script's calls, which are refused at once): the gate holds a gated call
    /// whose rule has a `wait_seconds` ([`crate::approvals::wait`]).
    pub waiting: Option<crate::approvals::wait::Waiting>,
    /// What the call may say to its client while it runs, and its client's cancellation
    /// ([`crate::Conversation::none`] when no client waits on it).
    pub conversation: crate::Conversation,
    /// For a completion (`completion/complete`) of a prompt's or resource template's
    /// argument: which argument, and what is known. It crosses the pipeline as a read of its
    /// target (the same may-read, rate limit and audit), and is refused where an approval
    /// would be needed (nobody approves a keystroke).
    pub completing: Option<crate::catalog::Completing>,
    /// For a subscription (`resources/subscribe`, or a resource URI of a
    /// `subscriptions/listen`): where the dispatch leaves what it subscribed to. It crosses
    /// the pipeline as a read of its URI, and needs no approval (it tells only that the
    /// resource changed; each read of it still waits for its approval).
    pub subscribing: Option<crate::catalog::Subscribing>,
}

impl CallRequest {
    /// A call as it arrives.
    pub fn new(
        identity: Option<Arc<SessionIdentity>>,
        tool: impl Into<String>,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Self {
        let tool = tool.into();
        CallRequest {
            target: tool.clone(),
            tool,
            kind: TargetKind::Tool,
            arguments,
            identity,
            resolved: None,
            canonical: None,
            args_hash: None,
            approval_rule: None,
            facts: None,
            approval_id: None,
            intercepted: false,
            review_gate: None,
            waiting: None,
            conversation: crate::Conversation::none(),
            completing: None,
            subscribing: None,
        }
    }

    /// A subscription to the updates of resource `target` (its larkgate URI), as it arrives;
    /// its dispatch leaves the subscription in `subscribing`.
    pub fn subscribe(
        identity: Option<Arc<SessionIdentity>>,
        target: impl Into<String>,
        subscribing: crate::catalog::Subscribing,
    ) -> Self {
        let target = target.into();
        CallRequest {
            tool: format!("resources/subscribe {target}"),
            kind: TargetKind::Resource,
            target,
            subscribing: Some(subscribing),
            ..CallRequest::new(identity, String::new(), None)
        }
    }

    /// A completion of `completing`'s argument of prompt `target` (its larkgate name) or
    /// resource template `target` (its larkgate text), as it arrives.
    pub fn complete(
        identity: Option<Arc<SessionIdentity>>,
        kind: TargetKind,
        target: impl Into<String>,
        completing: crate::catalog::Completing,
    ) -> Self {
        let target = target.into();
        CallRequest {
            tool: format!("completion/complete {target}"),
            kind,
            target,
            completing: Some(completing),
            ..CallRequest::new(identity, String::new(), None)
        }
    }

    /// A resource read (`target`: its larkgate URI; `arguments`: none) or a prompt get
    /// (`target`: its larkgate name; `arguments`: the prompt's) as it arrives.
    pub fn read(
        identity: Option<Arc<SessionIdentity>>,
        kind: TargetKind,
        target: impl Into<String>,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Self {
        let target = target.into();
        CallRequest {
            tool: format!("{} {target}", kind.method()),
            kind,
            target,
            ..CallRequest::new(identity, String::new(), arguments)
        }
    }

    /// Makes what conditions read of this call, once: for a tool call whose caller, tool and
    /// canonical arguments are known (after `arguments`), at the platform clock's time.
    pub fn ensure_facts(&mut self, services: &Services) {
        if self.facts.is_some() || self.kind != TargetKind::Tool {
            return;
        }
        let (Some(identity), Some(tool), Some(args)) =
            (&self.identity, &self.resolved, &self.canonical)
        else {
            return;
        };
        let now_ms = services.clock.now_ms();
        let facts = conditions::facts(
            args,
            &identity.run.principal,
            tool,
            &identity.run.chain,
            now_ms,
        );
        self.facts = Some(facts.values());
    }

    fn principal_id(&self) -> &str {
        self.identity
            .as_ref()
            .map_or(ANONYMOUS, |i| i.run.principal.id.as_str())
    }
}

/// How a call ended.
#[derive(Debug)]
pub struct CallResponse {
    /// The result, or the refusal.
    pub result: Result<crate::registry::ToolOutput, Refusal>,
    /// Whether the call was admitted (its intent written). Refusals before that are audited
    /// as refusals; after it, as the outcome.
    pub admitted: bool,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<CallResponse, Infallible>> + Send>>;

/// A gating step of the pipeline.
#[async_trait::async_trait]
pub trait Step: Send + Sync + 'static {
    /// Its name, for logs and the order test.
    const NAME: &'static str;
    /// Passes the call on (`Ok`) or refuses it.
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal>;
}

/// The tower layer of a [`Step`].
#[derive(Clone, Debug)]
pub struct StepLayer<T>(Arc<T>);

impl<T> StepLayer<T> {
    /// A layer running `step`.
    pub fn new(step: T) -> Self {
        StepLayer(Arc::new(step))
    }
}

impl<T, S> Layer<S> for StepLayer<T> {
    type Service = StepService<T, S>;
    fn layer(&self, inner: S) -> Self::Service {
        StepService {
            step: Arc::clone(&self.0),
            inner,
        }
    }
}

/// The service of a [`StepLayer`].
#[derive(Debug)]
pub struct StepService<T, S> {
    step: Arc<T>,
    inner: S,
}

impl<T, S: Clone> Clone for StepService<T, S> {
    fn clone(&self) -> Self {
        StepService {
            step: Arc::clone(&self.step),
            inner: self.inner.clone(),
        }
    }
}

impl<T, S> Service<CallRequest> for StepService<T, S>
where
    T: Step,
    S: Service<CallRequest, Response = CallResponse, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    call_service!();

    fn call(&mut self, mut request: CallRequest) -> Self::Future {
        let step = Arc::clone(&self.step);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            // A span per step, a sibling of the others under the call's span: it covers the
            // step's own check, not the steps after it.
            let span = tracing::info_span!("pipeline.step", otel.name = T::NAME);
            match step.check(&mut request).instrument(span).await {
                Ok(()) => inner.call(request).await,
                Err(refusal) => {
                    tracing::debug!(step = T::NAME, code = %refusal.code, tool = %request.tool, "refused");
                    Ok(CallResponse {
                        result: Err(refusal),
                        admitted: false,
                    })
                }
            }
        })
    }
}

/// The assembled pipeline, cheap to clone per call.
pub type PipelineService = tower::util::BoxCloneSyncService<CallRequest, CallResponse, Infallible>;

/// The pipeline as [`build`] assembled it: the service, and the names of its gating steps in
/// the order it runs them (read from the assembly itself, so they cannot drift from it).
#[derive(Clone, Debug)]
pub struct Pipeline {
    service: PipelineService,
    /// Shared, so that cloning the platform per request allocates nothing for it.
    steps: Arc<[&'static str]>,
}

impl Pipeline {
    /// The service a call goes through.
    pub fn service(&self) -> &PipelineService {
        &self.service
    }

    /// The gating steps, in the order they run: the precedence of refusals.
    pub fn steps(&self) -> &[&'static str] {
        &self.steps
    }
}

/// Records each step's name as its layer is assembled.
#[derive(Debug, Default)]
struct Order(Vec<&'static str>);

impl Order {
    fn step<T: Step>(&mut self, step: T) -> StepLayer<T> {
        self.0.push(T::NAME);
        StepLayer::new(step)
    }
}

/// Builds the pipeline. Read top to bottom, this is the path of a call; the layer order is
/// the precedence of refusals.
pub fn build(services: Arc<Services>, registry: Arc<ToolTable>, catalog: Arc<Catalog>) -> Pipeline {
    let mut order = Order::default();
    let service = ServiceBuilder::new()
        .layer(AuditRefusalsLayer::new(Arc::clone(&services)))
        .layer(order.step(Authenticate))
        .layer(order.step(Authorize {
            services: Arc::clone(&services),
            registry,
            catalog,
        }))
        .layer(order.step(Arguments {
            services: Arc::clone(&services),
        }))
        .layer(order.step(Conditions {
            services: Arc::clone(&services),
        }))
        .layer(order.step(WriteBarrier {
            services: Arc::clone(&services),
        }))
        .layer(order.step(RateLimit {
            services: Arc::clone(&services),
        }))
        .layer(order.step(Gate {
            services: Arc::clone(&services),
        }))
        .service(Journal::new(services));
    Pipeline {
        service: tower::util::BoxCloneSyncService::new(service),
        steps: order.0.into(),
    }
}
