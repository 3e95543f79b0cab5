//! `audit refusals`: the outermost layer. Every refusal before admission becomes one audit
//! record (an admitted call's refusal is its outcome, written by [`super::journal`]); every
//! call is counted in the metrics by tool and outcome code, and in the in-flight gauge while it
//! runs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use larkgate_store::AuditKind;
use prometheus_client::metrics::gauge::Gauge;
use tower::{Layer, Service};

use crate::audit::{AuditCode, AuditEntry};
use crate::bounded::{MAX_MESSAGE_BYTES, MAX_TOOL_NAME_BYTES, cut};
use crate::envelope::{Code, Refusal};
use crate::policy::TargetKind;
use crate::services::Services;

use super::{BoxFuture, CallRequest, CallResponse};

/// The layer. See the module documentation.
#[derive(Clone, Debug)]
pub struct AuditRefusalsLayer {
    services: Arc<Services>,
}

impl AuditRefusalsLayer {
    /// The layer on `services`.
    pub fn new(services: Arc<Services>) -> Self {
        AuditRefusalsLayer { services }
    }
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
    call_service!();

    fn call(&mut self, request: CallRequest) -> Self::Future {
        let services = Arc::clone(&self.services);
        let mut inner = self.inner.clone();
        let principal = request.principal_id().to_owned();
        let identity = request.identity.clone();
        // What is recorded of the name: cut, marked and hashed past MCP's 128 bytes. A read's
        // name is its URI, bounded by the catalogue's own limit instead (a longer one is not
        // found there), and kept whole in the audit.
        let (tool, too_long) = match request.kind {
            TargetKind::Tool => (
                cut(&request.tool, MAX_TOOL_NAME_BYTES).into_owned(),
                request.tool.len() > MAX_TOOL_NAME_BYTES,
            ),
            _ => (
                cut(&request.tool, crate::catalog::MAX_URI_BYTES + 64).into_owned(),
                false,
            ),
        };
        // The metrics' label: a tool's or prompt's name, but only the method for a resource
        // read, whose URIs (through templates) are without number.
        let metric_name = match request.kind {
            TargetKind::Resource => request.kind.method().to_owned(),
            _ => cut(&request.tool, MAX_TOOL_NAME_BYTES).into_owned(),
        };
        Box::pin(async move {
            let started = Instant::now();
            let in_flight = InFlight::enter(&services.metrics.active_calls);
            // A name no tool can have is refused before any lookup.
            let response = if too_long {
                CallResponse {
                    result: Err(Refusal::not_found(&request.tool)),
                    admitted: false,
                }
            } else {
                inner.call(request).await?
            };
            drop(in_flight);
            let code = match &response.result {
                Ok(_) => "ok",
                Err(refusal) => refusal.code.as_str(),
            };
            // A tool that does not exist (or is invisible) gets no label of its own.
            let label = if code == Code::NotFound.as_str() && !response.admitted {
                "-"
            } else {
                metric_name.as_str()
            };
            services
                .metrics
                .record_call(label, code, started.elapsed().as_secs_f64());
            if let (false, Err(refusal)) = (response.admitted, &response.result) {
                let entry = AuditEntry {
                    kind: Some(AuditKind::Refusal),
                    principal,
                    run_id: identity.as_ref().and_then(|i| i.run.run_id.clone()),
                    run_kind: identity.as_ref().map(|i| i.run.kind),
                    session: identity.as_ref().map(|i| i.label.clone()),
                    tool: Some(tool),
                    code: Some(AuditCode::Refusal(refusal.code)),
                    detail: Some(audit_detail(refusal)),
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

/// What a refusal's audit record says: its message, and for the operator what decided it.
fn audit_detail(refusal: &Refusal) -> String {
    let message = cut(&refusal.message, MAX_MESSAGE_BYTES);
    match &refusal.decided_by {
        Some(decided) => format!("{message} (decided by {})", cut(decided, MAX_MESSAGE_BYTES)),
        None => message.into_owned(),
    }
}

/// One call counted in a gauge while it runs, however it ends (a dropped call included).
struct InFlight(Gauge);

impl InFlight {
    fn enter(gauge: &Gauge) -> Self {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
