//! The one pipeline every call crosses, as tower layers:
//!
//! ```text
//! audit refusals → authenticate → authorize → arguments → write barrier → rate limit
//!   → approval gate → journal (intent, consume approval, dispatch, outcome) → handler
//! ```
//!
//! Each gating step is a [`Step`]: it reads and fills the typed [`CallRequest`] and either
//! passes the call on or refuses it. The order is precedence: a call that is both forbidden
//! and over its rate limit is refused as `forbidden`; a call refused by the rate limit never
//! reaches the gate, so it never burns an approval.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use larkgate_binding::{Map, canonical_map_json, from_json_object};
use larkgate_store::{ApprovalStatus, AuditKind};
use sha2::{Digest, Sha256};
use tower::{Layer, Service, ServiceBuilder};

use crate::audit::AuditEntry;
use crate::envelope::{Code, Refusal, refuse_arguments};
use crate::platform::{Services, now_ms};
use crate::registry::{RegisteredTool, ToolTable};
use crate::session::{CallContext, RunKind, SessionIdentity};

/// The principal recorded for calls that authenticated as nobody.
pub const ANONYMOUS: &str = "anonymous";

/// One call on its way through the pipeline. Steps fill in what they learn.
#[derive(Debug)]
pub struct CallRequest {
    /// The tool name as the client sent it.
    pub tool: String,
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
    /// The approval this call will consume (after `gate`).
    pub approval_id: Option<String>,
}

impl CallRequest {
    /// A call as it arrives.
    pub fn new(
        identity: Option<Arc<SessionIdentity>>,
        tool: impl Into<String>,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Self {
        CallRequest {
            tool: tool.into(),
            arguments,
            identity,
            resolved: None,
            canonical: None,
            args_hash: None,
            approval_id: None,
        }
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
    /// The structured result, or the refusal.
    pub result: Result<Map, Refusal>,
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
    type Response = CallResponse;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: CallRequest) -> Self::Future {
        let step = Arc::clone(&self.step);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            match step.check(&mut request).await {
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

/// `authenticate`: a call needs an identity.
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

/// `authorize`: the tool must exist and be visible (else `not_found`, one text for both) and
/// callable (else `forbidden`).
#[derive(Debug)]
pub struct Authorize {
    /// The platform's services.
    pub services: Arc<Services>,
    /// The tools.
    pub registry: Arc<ToolTable>,
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
        let registry = self.registry.snapshot();
        let tool = registry.get(&request.tool);
        let Some(tool) = tool.filter(|t| self.services.may_see(principal, t)) else {
            return Err(Refusal::not_found(&request.tool));
        };
        if !self.services.may_call(principal, tool) {
            return Err(Refusal::new(
                Code::Forbidden,
                format!("{} may not call {}", principal.id, request.tool),
            )
            .with_hint("ask an administrator for a role that allows it"));
        }
        request.resolved = Some(Arc::clone(tool));
        Ok(())
    }
}

/// `arguments`: within the size cap, inside the value matrix and limits, and — for tools with
/// an input shape — bound to it. Produces the canonical arguments and their hash.
#[derive(Debug)]
pub struct Arguments {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for Arguments {
    const NAME: &'static str = "arguments";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let limits = &self.services.limits;
        let empty = serde_json::Map::new();
        let raw = request.arguments.as_ref().unwrap_or(&empty);
        let size = json_size(raw);
        if size > limits.max_argument_bytes {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!(
                    "the arguments are {size} bytes of JSON, over the limit of {} bytes",
                    limits.max_argument_bytes
                ),
            )
            .with_hint("send less data per call, or store it and pass a key"));
        }
        let map = from_json_object(raw, limits.values).map_err(|e| refuse_arguments(&e))?;
        let tool = request.resolved.as_ref().map(Arc::clone);
        let canonical = match tool.as_ref().and_then(|t| t.input.as_ref()) {
            Some(shape) => shape
                .bind_map(&request.tool, &map)
                .map_err(|e| refuse_arguments(&e))?,
            None => map,
        };
        request.args_hash = Some(arguments_hash(&canonical));
        request.canonical = Some(canonical);
        Ok(())
    }
}

/// SHA-256 (hex) of the RFC 8785 JSON of canonical arguments.
pub fn arguments_hash(canonical: &Map) -> String {
    hex::encode(Sha256::digest(canonical_map_json(canonical).as_bytes()))
}

/// The size of a JSON object's compact serialization, without building it.
fn json_size(object: &serde_json::Map<String, serde_json::Value>) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, object);
    counter.0
}

/// `write barrier`: a draft session may call only tools classified read-only.
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

/// `rate limit`: GCRA budgets from the policy.
#[derive(Debug)]
pub struct RateLimit {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for RateLimit {
    const NAME: &'static str = "rate limit";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let principal = request.principal_id().to_owned();
        self.services
            .limiter
            .check(&principal, &request.tool)
            .map_err(|limited| Refusal {
                retry_after: Some(limited.retry_after),
                ..Refusal::new(
                    Code::RateLimited,
                    format!("{principal} is calling {} too often", request.tool),
                )
                .with_hint("wait retry_after_seconds and call again")
            })
    }
}

/// `gate`: a tool that requires approval runs only with an approved, unexpired, unused
/// approval for exactly this {principal, tool, arguments hash}. It is checked here and
/// consumed at dispatch.
#[derive(Debug)]
pub struct Gate {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for Gate {
    const NAME: &'static str = "approval gate";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let operator_gated = request
            .resolved
            .as_ref()
            .is_some_and(|t| t.spec.requires_approval);
        if !operator_gated && !self.services.policy.requires_approval(&request.tool) {
            return Ok(());
        }
        let principal = request.principal_id().to_owned();
        let hash = request.args_hash.clone().unwrap_or_default();
        let store = &self.services.store;
        let resolved = store
            .resolved_approval(&principal, &request.tool, &hash)
            .await
            .map_err(|e| Refusal::internal(format!("approvals could not be read: {e}")))?;
        match resolved {
            Some(a)
                if a.status == ApprovalStatus::Approved
                    && a.expires_at_ms.is_some_and(|t| t > now_ms()) =>
            {
                request.approval_id = Some(a.id);
                Ok(())
            }
            Some(a) if a.status == ApprovalStatus::Denied => Err(Refusal {
                approval_id: Some(a.id.clone()),
                ..Refusal::new(
                    Code::ApprovalDenied,
                    format!(
                        "{} denied this call of {} with these arguments",
                        a.resolved_by.as_deref().unwrap_or("an approver"),
                        request.tool
                    ),
                )
            }),
            _ => {
                let pending = store
                    .pending_approval(&principal, &request.tool, &hash, now_ms())
                    .await
                    .map_err(|e| {
                        Refusal::internal(format!("approvals could not be written: {e}"))
                    })?;
                Err(Refusal {
                    approval_id: Some(pending.id.clone()),
                    ..Refusal::new(
                        Code::ApprovalRequired,
                        format!(
                            "calling {} with these arguments needs an approval (id {})",
                            request.tool, pending.id
                        ),
                    )
                    .with_hint(format!(
                        "an approver runs `larkgate approvals approve {}`; then call again with \
                         the same arguments",
                        pending.id
                    ))
                })
            }
        }
    }
}

/// The innermost service: writes the intent (or refuses with `internal`), consumes the
/// approval, runs the handler, writes the outcome.
#[derive(Clone, Debug)]
pub struct Journal {
    services: Arc<Services>,
}

impl Service<CallRequest> for Journal {
    type Response = CallResponse;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: CallRequest) -> Self::Future {
        let services = Arc::clone(&self.services);
        Box::pin(async move { Ok(journal_and_dispatch(services, request).await) })
    }
}

async fn journal_and_dispatch(services: Arc<Services>, request: CallRequest) -> CallResponse {
    let (Some(identity), Some(tool), Some(arguments)) = (
        request.identity.clone(),
        request.resolved.clone(),
        request.canonical.clone(),
    ) else {
        return CallResponse {
            result: Err(Refusal::internal(
                "the pipeline reached dispatch incomplete",
            )),
            admitted: false,
        };
    };
    let base = AuditEntry {
        kind: None,
        principal: identity.run.principal.id.clone(),
        run_id: identity.run.run_id.clone(),
        run_kind: Some(identity.run.kind.as_str().to_owned()),
        session: Some(identity.label.clone()),
        tool: Some(request.tool.clone()),
        args_hash: request.args_hash.clone(),
        ..Default::default()
    };
    if request.approval_id.is_some() {
        // The approval may have been resolved beside the gateway: its event comes first.
        services.audit.catch_up().await;
    }
    let intent = AuditEntry {
        kind: Some(AuditKind::Intent),
        args: services
            .record_arguments
            .then(|| canonical_map_json(&arguments)),
        // Which approval let it through, so the chain ties the call to its approver's decision.
        detail: request
            .approval_id
            .as_ref()
            .map(|id| format!("under approval {id}")),
        ..base.clone()
    };
    let intent_seq = match services.audit.append(intent) {
        Ok(seq) => seq,
        Err(error) => {
            tracing::error!(%error, tool = %request.tool, "intent not written; the call does not run");
            return CallResponse {
                result: Err(Refusal::internal(
                    "the audit record could not be written, so the call did not run",
                )),
                admitted: false,
            };
        }
    };
    let started = Instant::now();
    let result = match &request.approval_id {
        Some(id) => match services.store.consume_approval(id, now_ms()).await {
            Ok(true) => run(&services, &identity, &tool, arguments).await,
            Ok(false) => Err(Refusal::new(
                Code::ApprovalRequired,
                format!("approval {id} was used or expired before this call ran"),
            )
            .with_hint("ask an approver for a new approval")),
            Err(e) => Err(Refusal::internal(format!(
                "the approval could not be consumed: {e}"
            ))),
        },
        None => run(&services, &identity, &tool, arguments).await,
    };
    let outcome = AuditEntry {
        kind: Some(AuditKind::Outcome),
        code: Some(match &result {
            Ok(_) => "ok".to_owned(),
            Err(refusal) => refusal.code.as_str().to_owned(),
        }),
        intent_seq: Some(intent_seq),
        duration_us: Some(started.elapsed().as_micros() as u64),
        detail: result.as_ref().err().map(|r| r.message.clone()),
        ..base
    };
    if let Err(error) = services.audit.append(outcome) {
        // The call has run; its result stands. `audit verify` will show the open intent.
        tracing::error!(%error, intent_seq, "outcome not written");
    }
    CallResponse {
        result,
        admitted: true,
    }
}

async fn run(
    services: &Arc<Services>,
    identity: &Arc<SessionIdentity>,
    tool: &RegisteredTool,
    arguments: Map,
) -> Result<Map, Refusal> {
    let context = CallContext {
        identity: Arc::clone(identity),
        services: Arc::clone(services),
    };
    tool.handler.call(&context, arguments).await
}

/// The outermost layer: every refusal before admission becomes one audit record.
#[derive(Clone, Debug)]
pub struct AuditRefusalsLayer {
    services: Arc<Services>,
}

impl<S> Layer<S> for AuditRefusalsLayer {
    type Service = AuditRefusals<S>;
    fn layer(&self, inner: S) -> Self::Service {
        AuditRefusals {
            services: Arc::clone(&self.services),
            inner,
        }
    }
}

/// The service of [`AuditRefusalsLayer`].
#[derive(Clone, Debug)]
pub struct AuditRefusals<S> {
    services: Arc<Services>,
    inner: S,
}

impl<S> Service<CallRequest> for AuditRefusals<S>
where
    S: Service<CallRequest, Response = CallResponse, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = CallResponse;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: CallRequest) -> Self::Future {
        let services = Arc::clone(&self.services);
        let mut inner = self.inner.clone();
        let principal = request.principal_id().to_owned();
        let identity = request.identity.clone();
        let tool = request.tool.clone();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let in_flight = InFlight::enter(&services.metrics.active_calls);
            let response = inner.call(request).await?;
            drop(in_flight);
            let code = match &response.result {
                Ok(_) => "ok",
                Err(refusal) => refusal.code.as_str(),
            };
            // A tool that does not exist (or is invisible) gets no label of its own.
            let label = if code == Code::NotFound.as_str() && !response.admitted {
                "-"
            } else {
                tool.as_str()
            };
            services
                .metrics
                .record_call(label, code, started.elapsed().as_secs_f64());
            if let (false, Err(refusal)) = (response.admitted, &response.result) {
                let entry = AuditEntry {
                    kind: Some(AuditKind::Refusal),
                    principal,
                    run_id: identity.as_ref().and_then(|i| i.run.run_id.clone()),
                    run_kind: identity.as_ref().map(|i| i.run.kind.as_str().to_owned()),
                    session: identity.as_ref().map(|i| i.label.clone()),
                    tool: Some(tool),
                    code: Some(refusal.code.as_str().to_owned()),
                    detail: Some(refusal.message.clone()),
                    ..Default::default()
                };
                if let Err(error) = services.audit.append(entry) {
                    tracing::error!(%error, "a refusal could not be audited");
                }
            }
            Ok(response)
        })
    }
}

/// One call counted in a gauge while it runs, however it ends (a dropped call included).
struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl InFlight {
    fn enter(gauge: &prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The assembled pipeline, cheap to clone per call.
pub type PipelineService = tower::util::BoxCloneSyncService<CallRequest, CallResponse, Infallible>;

/// The names of the steps, in the order the pipeline runs them.
pub const STEPS: [&str; 6] = [
    Authenticate::NAME,
    Authorize::NAME,
    Arguments::NAME,
    WriteBarrier::NAME,
    RateLimit::NAME,
    Gate::NAME,
];

/// Builds the pipeline. The layer order here *is* the precedence of refusals.
pub fn build(services: Arc<Services>, registry: Arc<ToolTable>) -> PipelineService {
    let service = ServiceBuilder::new()
        .layer(AuditRefusalsLayer {
            services: Arc::clone(&services),
        })
        .layer(StepLayer::new(Authenticate))
        .layer(StepLayer::new(Authorize {
            services: Arc::clone(&services),
            registry,
        }))
        .layer(StepLayer::new(Arguments {
            services: Arc::clone(&services),
        }))
        .layer(StepLayer::new(WriteBarrier))
        .layer(StepLayer::new(RateLimit {
            services: Arc::clone(&services),
        }))
        .layer(StepLayer::new(Gate {
            services: Arc::clone(&services),
        }))
        .service(Journal { services });
    tower::util::BoxCloneSyncService::new(service)
}
