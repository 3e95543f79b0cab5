//! `journal`: the innermost service. It writes the call's intent (if that fails, the call does
//! not run and is refused as `internal`), consumes the approval the gate found, runs the
//! handler, and writes the outcome — on one hash chain ([`crate::audit`]).
//!
//! A review run's intercepted call (see [`crate::review`]) is not dispatched: the journal
//! records it in the run's ledger, writes one `review` record (if that fails, the call is
//! refused as `internal`, as an intent would be), and answers the placeholder.

use std::sync::Arc;
use std::time::Instant;

use larkgate_binding::{Map, canonical_map_json};
use larkgate_store::AuditKind;
use tower::Service;
use tracing::Instrument;

use crate::approvals;
use crate::audit::{AuditCode, AuditEntry};
use crate::envelope::Refusal;
use crate::identity::{CallContext, SessionIdentity};
use crate::registry::{RegisteredTool, ToolOutput};
use crate::services::Services;

use super::{BoxFuture, CallRequest, CallResponse};

/// The service. See the module documentation.
#[derive(Clone, Debug)]
pub struct Journal {
    services: Arc<Services>,
}

impl Journal {
    /// The journal on `services`.
    pub fn new(services: Arc<Services>) -> Self {
        Journal { services }
    }
}

impl Service<CallRequest> for Journal {
    call_service!();

    fn call(&mut self, request: CallRequest) -> Self::Future {
        let services = Arc::clone(&self.services);
        let span = tracing::info_span!("pipeline.journal", otel.name = "journal");
        Box::pin(async move {
            Ok(journal_and_dispatch(services, request)
                .instrument(span)
                .await)
        })
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
                "the call did not run",
                format!(
                    "the pipeline reached dispatch incomplete for {}",
                    request.tool
                ),
            )),
            admitted: false,
        };
    };
    let base = AuditEntry {
        kind: None,
        principal: identity.run.principal.id.clone(),
        run_id: identity.run.run_id.clone(),
        run_kind: Some(identity.run.kind),
        session: Some(identity.label.clone()),
        tool: Some(request.tool.clone()),
        args_hash: request.args_hash.clone(),
        ..Default::default()
    };
    if request.intercepted {
        return CallResponse {
            result: intercept(&services, &request, &arguments, base),
            admitted: false,
        };
    }
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
            return CallResponse {
                result: Err(Refusal::internal(
                    "the audit record could not be written, so the call did not run",
                    format_args!("the intent of {} was not written: {error}", request.tool),
                )),
                admitted: false,
            };
        }
    };
    let started = Instant::now();
    if let Err(error) = services.audit.store_intent(intent_seq).await {
        // Configured to have every intent in the store before its call runs: the call does not
        // run, and its outcome says so (the intent reaches the store with it later).
        let refusal = Refusal::internal(
            "the audit record could not be stored, so the call did not run",
            format_args!("the intent of {} was not stored: {error}", request.tool),
        );
        let outcome = AuditEntry {
            kind: Some(AuditKind::Outcome),
            code: Some(AuditCode::Refusal(refusal.code)),
            intent_seq: Some(intent_seq),
            duration_us: Some(started.elapsed().as_micros() as u64),
            detail: Some(refusal.message.clone()),
            ..base
        };
        if let Err(error) = services.audit.append(outcome) {
            tracing::error!(%error, intent_seq, "outcome not written");
        }
        return CallResponse {
            result: Err(refusal),
            admitted: false,
        };
    }
    // What an upstream may ask the caller during the call, as the caller's roles say; what it
    // asks is audited as part of the call.
    let policy = services.policy();
    let principal = &identity.run.principal;
    let elicitation = !policy.may_be_asked(principal, &request.tool, false);
    request.conversation.bar(crate::conversation::Accepts {
        elicitation_form: elicitation,
        elicitation_url: elicitation,
        sampling: !policy.may_be_asked(principal, &request.tool, true),
    });
    drop(policy);
    request.conversation.witnessed_by(Arc::new(Questions {
        services: Arc::clone(&services),
        base: base.clone(),
        intent_seq,
    }));
    let dispatch = tracing::info_span!(
        "pipeline.dispatch",
        otel.name = format!("dispatch {}", request.tool),
        gen_ai.tool.name = %request.tool,
    );
    // Whether the approval the call ran under was given back: its call never reached the tool.
    let mut unspent = None;
    let result = async {
        match &request.approval_id {
            Some(id) => {
                let used_at_ms = services.clock.now_ms();
                match approvals::consume(services.store.as_ref(), id, used_at_ms).await {
                    Ok(()) => {
                        let result = run(
                            &services,
                            &identity,
                            &tool,
                            arguments,
                            &request.conversation,
                        )
                        .await;
                        if let Err(refusal) = &result
                            && !approvals::reached_the_tool(refusal)
                            && approvals::restore(services.store.as_ref(), id, used_at_ms).await
                        {
                            unspent = Some(id.clone());
                        }
                        result
                    }
                    Err(refusal) => Err(refusal),
                }
            }
            None => {
                run(
                    &services,
                    &identity,
                    &tool,
                    arguments,
                    &request.conversation,
                )
                .await
            }
        }
    }
    .instrument(dispatch)
    .await;
    let result = result.map_err(|refusal| match &unspent {
        Some(id) => {
            let hint = format!(
                "approval {id} is not spent: call again with the same arguments once the \
                 upstream is back"
            );
            Refusal {
                approval_id: Some(id.clone()),
                hint: Some(match refusal.hint.as_deref() {
                    Some(before) => format!("{before}; {hint}"),
                    None => hint,
                }),
                ..refusal
            }
        }
        None => refusal,
    });
    let outcome = AuditEntry {
        kind: Some(AuditKind::Outcome),
        code: Some(match &result {
            Ok(_) => AuditCode::Ok,
            Err(refusal) => AuditCode::Refusal(refusal.code),
        }),
        intent_seq: Some(intent_seq),
        duration_us: Some(started.elapsed().as_micros() as u64),
        detail: result.as_ref().err().map(|r| match &unspent {
            Some(id) => format!(
                "{} (approval {id} given back: the call did not reach the tool)",
                r.message
            ),
            None => r.message.clone(),
        }),
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

/// Audits each question an upstream asks the caller during a call (see
/// [`crate::conversation`]): one event per question, tied to the call's intent, saying which
/// kind it was, its message, and how it ended (the client's action or model, or why nobody
/// was asked). What was asked and answered in full is recorded only when arguments are.
struct Questions {
    services: Arc<Services>,
    base: AuditEntry,
    intent_seq: u64,
}

/// The most characters of a question's message in its audit event.
const MAX_QUESTION_SHOWN: usize = 200;

impl crate::conversation::Witness for Questions {
    fn asked(
        &self,
        kind: crate::conversation::Kind,
        question: &serde_json::Value,
        outcome: Result<serde_json::Value, &crate::conversation::Unasked>,
    ) {
        use crate::audit::EventKind;
        use crate::conversation::Kind;
        let (code, what) = match kind {
            Kind::Elicitation => (
                EventKind::Elicitation,
                format!(
                    "{} elicitation",
                    question["mode"].as_str().unwrap_or("form")
                ),
            ),
            Kind::Sampling => (EventKind::Sampling, "sampling".to_owned()),
        };
        let message = question["message"]
            .as_str()
            .map(|m| crate::bounded::cut(m, MAX_QUESTION_SHOWN).into_owned());
        let ended = match &outcome {
            Ok(answer) => match kind {
                Kind::Elicitation => format!(
                    "the client answered {}",
                    answer["action"].as_str().unwrap_or("without an action")
                ),
                Kind::Sampling => format!(
                    "the client's model {:?} answered",
                    crate::bounded::cut(answer["model"].as_str().unwrap_or("?"), 100)
                ),
            },
            Err(why) => why.to_string(),
        };
        let detail = match message {
            Some(message) => format!("{what} asked {message:?}: {ended}"),
            None => format!("{what} asked: {ended}"),
        };
        let args = self
            .services
            .record_arguments
            .then(|| serde_json::json!({"asked": question, "answered": outcome.ok()}).to_string());
        let event = AuditEntry {
            kind: Some(AuditKind::Event),
            code: Some(code.into()),
            intent_seq: Some(self.intent_seq),
            detail: Some(detail),
            args,
            ..self.base.clone()
        };
        if let Err(error) = self.services.audit.append(event) {
            tracing::error!(%error, intent_seq = self.intent_seq, "a question's event not written");
        }
    }
}

/// Records a review run's call to a tool that may write instead of making it.
fn intercept(
    services: &Services,
    request: &CallRequest,
    arguments: &Map,
    base: AuditEntry,
) -> Result<ToolOutput, Refusal> {
    let shown = approvals::shown_arguments(arguments, &services.policy().approvals.redact);
    let index = services.reviews.record(
        base.run_id.as_deref(),
        &request.tool,
        &shown.text,
        request.review_gate.as_ref(),
    )?;
    let record = AuditEntry {
        kind: Some(AuditKind::Review),
        args: services
            .record_arguments
            .then(|| canonical_map_json(arguments)),
        detail: Some(format!("intended write {index} of a review run, not made")),
        ..base
    };
    services.audit.append(record).map_err(|error| {
        Refusal::internal(
            "the audit record could not be written, so the call was not recorded",
            format_args!(
                "the review record of {} was not written: {error}",
                request.tool
            ),
        )
    })?;
    Ok(crate::review::placeholder(&request.tool, index).into())
}

async fn run(
    services: &Arc<Services>,
    identity: &Arc<SessionIdentity>,
    tool: &RegisteredTool,
    arguments: Map,
    conversation: &crate::Conversation,
) -> Result<ToolOutput, Refusal> {
    let context = CallContext {
        identity: Arc::clone(identity),
        services: Arc::clone(services),
        conversation: conversation.clone(),
    };
    tool.handler.call_for_client(&context, arguments).await
}
