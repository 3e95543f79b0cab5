//! What a server asks larkgate's client during a call (an elicitation, a sampling request),
//! passed to the client of the call it is about, which answers (see
//! [`larkgate_platform::conversation`]'s `asking` for what reaches a client and what does
//! not).
//!
//! The operator says per upstream what it may ask ([`MayAsk`]: elicitation yes, sampling no,
//! by default, since sampling spends the client's model). larkgate declares that much to the
//! server, and on 2026-07-28 tells it with each request only what the calling client accepts
//! as well. A question is routed by the request it is about (see [`super::routes`]), never
//! by anything the server says; a question about no call under way reaches nobody.
//!
//! On 2025-11-25 a server asks with a request of its own, on the call's stream; on 2026-07-28
//! it answers the call `input_required`, with its questions, and the call is sent again with
//! the client's answers ([`answer_rounds`]).

// Sampling is deprecated in the 2026-07-28 revision, but still in it.
#![allow(deprecated)]

use larkgate_platform::Conversation;
use larkgate_platform::conversation::{Accepts, Kind, Unasked};
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationCapability, ErrorCode, FormElicitationCapability, InputRequest,
    InputRequests, InputResponses, SamplingCapability, UrlElicitationCapability,
};

use super::UpstreamError;

/// What an upstream may ask the client of a call made to it: the operator's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MayAsk {
    /// Elicitation (form and URL modes).
    pub elicitation: bool,
    /// Sampling.
    pub sampling: bool,
}

impl Default for MayAsk {
    fn default() -> Self {
        MayAsk {
            elicitation: true,
            sampling: false,
        }
    }
}

impl MayAsk {
    /// The capabilities larkgate declares to the server, for a client that accepts
    /// `accepts` (everything: what the session declares at `initialize`).
    pub fn capabilities(self, accepts: Accepts) -> ClientCapabilities {
        let mut capabilities = ClientCapabilities::default();
        let form = self.elicitation && accepts.elicitation_form;
        let url = self.elicitation && accepts.elicitation_url;
        if form || url {
            let mut elicitation = ElicitationCapability::default();
            elicitation.form = form.then(FormElicitationCapability::default);
            elicitation.url = url.then(UrlElicitationCapability::default);
            capabilities.elicitation = Some(elicitation);
        }
        if self.sampling && accepts.sampling {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        capabilities
    }
}

/// Everything a client can accept: what a session declares for all its calls.
pub(super) const EVERYTHING: Accepts = Accepts {
    elicitation_form: true,
    elicitation_url: true,
    sampling: true,
};

/// The error a server gets for a question nobody answered, saying why (a client's own error
/// is passed as the client said it).
pub(super) fn unasked(method: &str, why: Unasked) -> rmcp::ErrorData {
    let code = match &why {
        Unasked::Refused(error) => return error.clone(),
        Unasked::NoClient
        | Unasked::ScriptRun
        | Unasked::NotAccepted(_)
        | Unasked::UpstreamMayNot(_)
        | Unasked::NotForRole(_) => ErrorCode::METHOD_NOT_FOUND,
        Unasked::UnsafeUrl => ErrorCode::INVALID_PARAMS,
        _ => ErrorCode::INVALID_REQUEST,
    };
    rmcp::ErrorData::new(code, format!("{method}: {why}"), None)
}

/// A question about no call under way.
pub(super) fn about_no_call(method: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!("{method}: this request is about no call under way: nobody was asked"),
        None,
    )
}

/// An elicitation, to `conversation`'s client when the upstream may ask it.
pub(super) async fn elicit(
    may: MayAsk,
    conversation: Option<Conversation>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, rmcp::ErrorData> {
    const METHOD: &str = "elicitation/create";
    let conversation = conversation.ok_or_else(|| about_no_call(METHOD))?;
    if !may.elicitation {
        let question = serde_json::to_value(&params).unwrap_or_default();
        let why = Unasked::UpstreamMayNot("elicitation");
        return Err(unasked(
            METHOD,
            conversation.refuse(Kind::Elicitation, question, why),
        ));
    }
    conversation
        .elicit(params)
        .await
        .map_err(|why| unasked(METHOD, why))
}

/// A sampling request, to `conversation`'s client when the upstream may ask it.
pub(super) async fn sample(
    may: MayAsk,
    conversation: Option<Conversation>,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, rmcp::ErrorData> {
    const METHOD: &str = "sampling/createMessage";
    let conversation = conversation.ok_or_else(|| about_no_call(METHOD))?;
    if !may.sampling {
        let question = serde_json::to_value(&params).unwrap_or_default();
        let why = Unasked::UpstreamMayNot("sampling");
        return Err(unasked(
            METHOD,
            conversation.refuse(Kind::Sampling, question, why),
        ));
    }
    conversation
        .sample(params)
        .await
        .map_err(|why| unasked(METHOD, why))
}

/// The most questions a 2026-07-28 server may put in one `input_required` answer.
pub const MAX_INPUT_REQUESTS: usize = 4;

/// A 2026-07-28 server's questions (an `input_required` answer), each put to the call's
/// client in turn: the client's answers, to send the call again with. A question that cannot
/// be put ends the call, saying why: the protocol has no way to tell the server that nobody
/// was asked, and an answer larkgate made up would be a lie.
pub(super) async fn answer_rounds(
    may: MayAsk,
    conversation: Option<&Conversation>,
    questions: InputRequests,
) -> Result<InputResponses, UpstreamError> {
    if questions.len() > MAX_INPUT_REQUESTS {
        return Err(UpstreamError::Protocol(format!(
            "the server asked {} questions at once (at most {MAX_INPUT_REQUESTS})",
            questions.len()
        )));
    }
    let mut answers = InputResponses::new();
    for (key, question) in questions {
        let conversation = conversation.cloned();
        let answer = match question {
            InputRequest::Elicitation(request) => elicit(may, conversation, request.params)
                .await
                .and_then(|a| to_value(&a)),
            InputRequest::CreateMessage(request) => sample(may, conversation, request.params)
                .await
                .and_then(|a| to_value(&a)),
            InputRequest::ListRoots(_) => Err(super::not_declared("roots/list", "roots")),
            _ => Err(rmcp::ErrorData::invalid_request(
                "a question larkgate does not know",
                None,
            )),
        };
        let answer = answer.map_err(|error| {
            UpstreamError::Protocol(format!(
                "the server asked for input the call's client did not give: {}",
                error.message
            ))
        })?;
        answers.insert(key, answer);
    }
    Ok(answers)
}

fn to_value(answer: &impl serde::Serialize) -> Result<serde_json::Value, rmcp::ErrorData> {
    serde_json::to_value(answer)
        .map_err(|_| rmcp::ErrorData::internal_error("the client's answer could not be kept", None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_is_told_what_the_operator_allows_and_the_client_accepts() {
        let declared = |may: MayAsk, accepts: Accepts| {
            serde_json::to_value(may.capabilities(accepts)).unwrap()
        };
        let none = MayAsk {
            elicitation: false,
            sampling: false,
        };
        let all = MayAsk {
            elicitation: true,
            sampling: true,
        };
        let form_only = Accepts {
            elicitation_form: true,
            ..Accepts::NOTHING
        };
        for (may, accepts, expected) in [
            (none, EVERYTHING, serde_json::json!({})),
            (
                MayAsk::default(),
                EVERYTHING,
                serde_json::json!({"elicitation": {"form": {}, "url": {}}}),
            ),
            (
                all,
                EVERYTHING,
                serde_json::json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}}),
            ),
            (all, Accepts::NOTHING, serde_json::json!({})),
            (
                all,
                form_only,
                serde_json::json!({"elicitation": {"form": {}}}),
            ),
            (none, form_only, serde_json::json!({})),
        ] {
            assert_eq!(declared(may, accepts), expected, "{may:?} {accepts:?}");
        }
    }
}
