//! What an upstream asks the client that made a call, during the call: an elicitation (a
//! question for the person at the client) or a sampling request (a completion from the
//! client's model).
//!
//! # Threat model
//!
//! The question comes from an upstream server, which is not trusted, and goes to a person or
//! a model that trusts its client, and so larkgate:
//!
//! - **Only the caller, only during the call.** A question reaches only the client of the
//!   call it came in (the upstream's connection routes it by the call's request, never by
//!   anything the server says), only while that call is under way: after the answer, or for a
//!   call no client waits on, nobody is asked, and the server is told so.
//! - **Only what the client accepts.** A client that did not declare elicitation (or its URL
//!   mode, or sampling) is never sent one; the server is told the client does not accept it,
//!   never that a person declined.
//! - **Never from a script's run.** A script's host calls have no person at the other end
//!   (the run's caller did not make that call, and a published script runs as its own
//!   principal): nobody is asked.
//! - **A URL as it is, and only a safe one.** A URL-mode elicitation is passed with its URL
//!   exactly as the server wrote it, and only when it is `https` (or `http` to this machine's
//!   loopback, for a local server): a person is never sent to a plain-text page elsewhere.
//! - **Bounded.** At most [`MAX_OPEN`] questions of one call are open at once; more are
//!   refused. A question open when the call ends, or when the client's end of the call's
//!   response is gone ([`super::ResponseGone`]: it went away), is abandoned: its asker is told
//!   the client did not answer.

// Sampling is deprecated in the 2026-07-28 revision, but still in it.
#![allow(deprecated)]

use std::sync::atomic::Ordering;

use rmcp::model::{
    ClientCapabilities, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ServerRequest,
};
use rmcp::service::ServiceError;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Conversation;

/// The most questions of one call open to its client at once.
pub const MAX_OPEN: u32 = 4;

/// What the client that made a call accepts being asked, as it declared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accepts {
    /// Form-mode elicitation (an empty `elicitation` capability says this alone).
    pub elicitation_form: bool,
    /// URL-mode elicitation.
    pub elicitation_url: bool,
    /// Sampling (`sampling/createMessage`).
    pub sampling: bool,
}

impl Accepts {
    /// Nothing: a client that declared none of them.
    pub const NOTHING: Accepts = Accepts {
        elicitation_form: false,
        elicitation_url: false,
        sampling: false,
    };

    /// What a client declaring `capabilities` accepts.
    pub fn of(capabilities: &ClientCapabilities) -> Accepts {
        let (form, url) = capabilities
            .elicitation
            .as_ref()
            .map_or((false, false), |e| {
                // `{}` is the form mode, as before the URL mode existed.
                (e.form.is_some() || e.url.is_none(), e.url.is_some())
            });
        Accepts {
            elicitation_form: form,
            elicitation_url: url,
            sampling: capabilities.sampling.is_some(),
        }
    }

    /// Whether it accepts anything at all.
    pub fn anything(self) -> bool {
        self.elicitation_form || self.elicitation_url || self.sampling
    }
}

/// Why a question was not answered by the client. Each says what happened, for the server
/// that asked; none carries anything of the client but its own error's message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unasked {
    /// The call was made where no client waits (the command line's `call`).
    #[error("no client waits on this call: nobody was asked")]
    NoClient,
    /// The call was made by a script's run.
    #[error("the call was made by a script's run, which cannot ask its caller: nobody was asked")]
    ScriptRun,
    /// The call has answered, or its client cancelled it.
    #[error("the call this is about is over: nobody was asked")]
    Over,
    /// The client did not declare it.
    #[error("the client that made this call does not accept {0}: nobody was asked")]
    NotAccepted(&'static str),
    /// The operator does not let this upstream ask for it (its `elicitation` or `sampling`
    /// setting).
    #[error(
        "this upstream may not ask larkgate's clients for {0} (the operator's choice): nobody was asked"
    )]
    UpstreamMayNot(&'static str),
    /// The caller's roles do not let upstreams ask them for it in calls to this tool.
    #[error(
        "the caller's roles do not let upstreams ask them for {0} in calls to this tool: nobody \
         was asked"
    )]
    NotForRole(&'static str),
    /// A URL-mode elicitation whose URL is neither `https` nor `http` to loopback.
    #[error(
        "larkgate relays URL-mode elicitations only to https URLs (or http to loopback): \
         nobody was asked"
    )]
    UnsafeUrl,
    /// Too many questions of the call are open.
    #[error("this call already has {MAX_OPEN} questions open to its client: nobody was asked")]
    TooMany,
    /// The client went away, or the call ended, before it answered.
    #[error("the client did not answer: the call ended or the client went away")]
    Gone,
    /// The client answered with an error of its own.
    #[error("the client answered with an error: {}", .0.message)]
    Refused(rmcp::ErrorData),
}

/// What kind of question an upstream asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `elicitation/create`.
    Elicitation,
    /// `sampling/createMessage`.
    Sampling,
}

/// Told of each question an upstream asks in a call and how it ended: the question's
/// parameters as the server sent them, and the client's answer (its result), or why there
/// was none. The journal audits them ([`crate::pipeline`]).
pub trait Witness: Send + Sync {
    /// A question of `kind`, `question`, ended with `outcome`.
    fn asked(
        &self,
        kind: Kind,
        question: &serde_json::Value,
        outcome: Result<serde_json::Value, &Unasked>,
    );
}

/// A question on its way to the client, with where its answer goes.
pub(super) struct Ask {
    pub(super) question: ServerRequest,
    pub(super) answer: oneshot::Sender<Result<ClientResult, ServiceError>>,
}

/// Counts a question open until dropped, telling each change.
struct Open<'a>(&'a super::Inner);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open_questions.fetch_sub(1, Ordering::SeqCst);
        self.0.question_changes.send_replace(());
    }
}

impl Conversation {
    /// What the call's client accepts being asked, and its caller's roles let upstreams ask
    /// (nothing for a call no client waits on, or one made by a script's run).
    pub fn accepts(&self) -> Accepts {
        match &self.0 {
            Some(inner) if inner.within.0.is_none() => {
                let barred = *lock(&inner.barred);
                Accepts {
                    elicitation_form: inner.accepts.elicitation_form && !barred.elicitation_form,
                    elicitation_url: inner.accepts.elicitation_url && !barred.elicitation_url,
                    sampling: inner.accepts.sampling && !barred.sampling,
                }
            }
            _ => Accepts::NOTHING,
        }
    }

    /// Bars upstreams from asking the caller for what `barred` says, in this call (its roles
    /// do not let them): a question of that kind is refused saying so.
    pub fn bar(&self, barred: Accepts) {
        if let Some(inner) = &self.0 {
            *lock(&inner.barred) = barred;
        }
    }

    /// Why a question the client would accept is not put: the caller's roles bar it.
    fn barred(&self, kind: &'static str, bars: impl Fn(Accepts) -> bool) -> Option<Unasked> {
        let inner = self.0.as_ref()?;
        (bars(inner.accepts) && bars(*lock(&inner.barred))).then_some(Unasked::NotForRole(kind))
    }

    /// Asks the call's client for an elicitation, and answers what it answered; the call's
    /// [`Witness`] is told either way.
    pub async fn elicit(&self, params: ElicitRequestParams) -> Result<ElicitResult, Unasked> {
        let question = serde_json::to_value(&params).unwrap_or_default();
        let outcome = self.put_elicitation(params).await;
        self.witness(Kind::Elicitation, question, &outcome);
        outcome
    }

    /// Asks the call's client's model for a message (sampling), and answers what it answered;
    /// the call's [`Witness`] is told either way.
    pub async fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, Unasked> {
        let question = serde_json::to_value(&params).unwrap_or_default();
        let outcome = self.put_sampling(params).await;
        self.witness(Kind::Sampling, question, &outcome);
        outcome
    }

    /// A question of `kind` (`question`, its parameters) refused before it reached this
    /// conversation (the upstream may not ask at all): the call's [`Witness`] is told, and
    /// the reason answered.
    pub fn refuse(&self, kind: Kind, question: serde_json::Value, why: Unasked) -> Unasked {
        self.witness::<()>(kind, question, &Err(why.clone()));
        why
    }

    /// How many questions of the call wait for the client's answer now, and a receiver told
    /// each time one opens or closes (`None` for a call no client waits on). A call's
    /// round-trip timeout waits while a person answers.
    pub fn questions(&self) -> Option<(u32, tokio::sync::watch::Receiver<()>)> {
        let inner = self.0.as_ref()?;
        Some((
            inner.open_questions.load(Ordering::SeqCst),
            inner.question_changes.subscribe(),
        ))
    }

    /// Has `witness` told of each question asked in the call from now on.
    pub fn witnessed_by(&self, witness: std::sync::Arc<dyn Witness>) {
        if let Some(inner) = &self.0 {
            *inner
                .witness
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(witness);
        }
    }

    fn witness<T: serde::Serialize>(
        &self,
        kind: Kind,
        question: serde_json::Value,
        outcome: &Result<T, Unasked>,
    ) {
        let Some(inner) = &self.0 else {
            return;
        };
        let witness = inner
            .witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(witness) = witness {
            let outcome = outcome
                .as_ref()
                .map(|answer| serde_json::to_value(answer).unwrap_or_default());
            witness.asked(kind, &question, outcome);
        }
    }

    async fn put_elicitation(&self, params: ElicitRequestParams) -> Result<ElicitResult, Unasked> {
        let accepts = self.accepts();
        match &params {
            ElicitRequestParams::FormElicitationParams { .. } if !accepts.elicitation_form => {
                return Err(self
                    .unasked()
                    .or_else(|| self.barred("elicitation", |a| a.elicitation_form))
                    .unwrap_or(Unasked::NotAccepted("elicitation")));
            }
            ElicitRequestParams::UrlElicitationParams { url, .. } => {
                if !accepts.elicitation_url {
                    return Err(self
                        .unasked()
                        .or_else(|| self.barred("elicitation", |a| a.elicitation_url))
                        .unwrap_or(Unasked::NotAccepted("URL-mode elicitation")));
                }
                if !safe_url(url) {
                    return Err(Unasked::UnsafeUrl);
                }
            }
            _ => {}
        }
        match self
            .ask(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
            .await?
        {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(Unasked::Refused(rmcp::ErrorData::internal_error(
                "the client answered an elicitation with something else",
                None,
            ))),
        }
    }

    async fn put_sampling(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, Unasked> {
        if !self.accepts().sampling {
            return Err(self
                .unasked()
                .or_else(|| self.barred("sampling", |a| a.sampling))
                .unwrap_or(Unasked::NotAccepted("sampling")));
        }
        match self
            .ask(ServerRequest::CreateMessageRequest(
                CreateMessageRequest::new(params),
            ))
            .await?
        {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(Unasked::Refused(rmcp::ErrorData::internal_error(
                "the client answered a sampling request with something else",
                None,
            ))),
        }
    }

    /// Why nobody can be asked in this call at all, if that is so.
    fn unasked(&self) -> Option<Unasked> {
        let Some(inner) = &self.0 else {
            return Some(Unasked::NoClient);
        };
        if inner.within.0.is_some() {
            return Some(Unasked::ScriptRun);
        }
        if inner.closed.load(Ordering::Relaxed) || self.is_cancelled() {
            return Some(Unasked::Over);
        }
        if inner
            .response_gone
            .get()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Some(Unasked::Gone);
        }
        None
    }

    async fn ask(&self, question: ServerRequest) -> Result<ClientResult, Unasked> {
        if let Some(unasked) = self.unasked() {
            return Err(unasked);
        }
        let Some(inner) = &self.0 else {
            return Err(Unasked::NoClient);
        };
        if inner.open_questions.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN {
            inner.open_questions.fetch_sub(1, Ordering::SeqCst);
            return Err(Unasked::TooMany);
        }
        let _open = Open(inner);
        inner.question_changes.send_replace(());
        let (answer, answered) = oneshot::channel();
        // The queue holds MAX_OPEN: with at most that many open, sending never waits.
        inner
            .asks
            .try_send(Ask { question, answer })
            .map_err(|_| Unasked::Over)?;
        let gone = async {
            match inner.response_gone.get() {
                Some(gone) => gone.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            answered = answered => match answered {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(ServiceError::McpError(error))) => Err(Unasked::Refused(error)),
                // The transport closed, or the call ended and the question was abandoned.
                Ok(Err(_)) | Err(_) => Err(Unasked::Gone),
            },
            () = self.cancelled() => Err(Unasked::Gone),
            // The client's end of the response is gone: nobody is there to answer.
            () = gone => Err(Unasked::Gone),
        }
    }
}

fn lock<T: Copy>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere; the value itself is whole.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a person may be sent to `url`: `https`, or `http` to loopback (a server on the
/// person's own machine). Anything that does not parse is not.
pub fn safe_url(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => match parsed.host() {
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_and_http_to_loopback_are_safe() {
        for (url, safe) in [
            ("https://auth.example.com/approve?id=7", true),
            ("HTTPS://auth.example.com/", true),
            ("http://127.0.0.1:8080/consent", true),
            ("http://localhost/consent", true),
            ("http://[::1]:9/x", true),
            ("http://auth.example.com/approve", false),
            ("http://127.0.0.1.evil.example/", false),
            ("http://localhost.evil.example/", false),
            ("http://10.0.0.1/", false),
            ("javascript:alert(1)", false),
            ("data:text/html,<script>", false),
            ("file:///etc/passwd", false),
            ("ftp://example.com/", false),
            ("https://", false),
            ("https:no-slashes.example", true),
            ("//example.com/", false),
            ("", false),
            ("not a url", false),
        ] {
            assert_eq!(safe_url(url), safe, "{url}");
        }
    }

    fn form() -> ElicitRequestParams {
        serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": "Which city?",
            "requestedSchema": {"type": "object", "properties": {"city": {"type": "string"}}}
        }))
        .unwrap()
    }

    fn url(url: &str) -> ElicitRequestParams {
        serde_json::from_value(serde_json::json!({
            "mode": "url", "message": "Sign in", "url": url, "elicitationId": "e-1"
        }))
        .unwrap()
    }

    const EVERYTHING: Accepts = Accepts {
        elicitation_form: true,
        elicitation_url: true,
        sampling: true,
    };

    fn open(accepts: Accepts) -> (Conversation, super::super::Outbox) {
        Conversation::open_within(
            None,
            None,
            accepts,
            CancellationToken::new(),
            &Conversation::none(),
        )
    }

    /// Who is not asked, and why: each refusal says so before anything is sent.
    #[tokio::test]
    async fn nobody_is_asked_what_they_cannot_answer() {
        assert_eq!(
            Conversation::none().elicit(form()).await,
            Err(Unasked::NoClient)
        );
        let (declared_nothing, _outbox) = open(Accepts::NOTHING);
        assert_eq!(
            declared_nothing.elicit(form()).await,
            Err(Unasked::NotAccepted("elicitation"))
        );
        let (forms_only, _outbox) = open(Accepts {
            elicitation_form: true,
            ..Accepts::NOTHING
        });
        assert_eq!(
            forms_only.elicit(url("https://example.com/")).await,
            Err(Unasked::NotAccepted("URL-mode elicitation"))
        );
        let (all, mut outbox) = open(EVERYTHING);
        assert_eq!(
            all.elicit(url("http://example.com/")).await,
            Err(Unasked::UnsafeUrl)
        );
        // The roles bar sampling: said so, not that the client does not accept it.
        all.bar(Accepts {
            sampling: true,
            ..Accepts::NOTHING
        });
        let sampling: CreateMessageRequestParams = serde_json::from_value(serde_json::json!({
            "messages": [], "maxTokens": 5
        }))
        .unwrap();
        assert_eq!(
            all.sample(sampling).await,
            Err(Unasked::NotForRole("sampling"))
        );
        // A script's host call, inside a run: never.
        let (in_run, _run_outbox) =
            Conversation::open_within(None, None, EVERYTHING, CancellationToken::new(), &all);
        assert_eq!(in_run.elicit(form()).await, Err(Unasked::ScriptRun));
        // None of them reached the client.
        assert!(outbox.asks.try_recv().is_err());
    }

    /// At most MAX_OPEN questions wait at once; the client's end going away, or the call
    /// ending, answers every one that waits: nothing is left open.
    #[tokio::test]
    async fn questions_are_bounded_and_none_outlives_its_client() {
        let (conversation, outbox) = open(EVERYTHING);
        let gone = super::super::ResponseGone::default();
        conversation.answered_through(&gone);
        let waiting: Vec<_> = (0..MAX_OPEN)
            .map(|_| {
                let conversation = conversation.clone();
                tokio::spawn(async move { conversation.elicit(form()).await })
            })
            .collect();
        // Each is queued for the client (nobody carries them here).
        while conversation
            .0
            .as_ref()
            .unwrap()
            .open_questions
            .load(Ordering::SeqCst)
            < MAX_OPEN
        {
            tokio::task::yield_now().await;
        }
        assert_eq!(conversation.elicit(form()).await, Err(Unasked::TooMany));
        gone.0.cancel();
        for question in waiting {
            assert_eq!(question.await.unwrap(), Err(Unasked::Gone));
        }
        assert_eq!(
            conversation
                .0
                .as_ref()
                .unwrap()
                .open_questions
                .load(Ordering::SeqCst),
            0
        );
        // Once gone, a new question is refused at once.
        assert_eq!(conversation.elicit(form()).await, Err(Unasked::Gone));
        drop(outbox);

        // The call ends (its outbox is dropped with the questions it holds).
        let (conversation, outbox) = open(EVERYTHING);
        let question = {
            let conversation = conversation.clone();
            tokio::spawn(async move { conversation.elicit(form()).await })
        };
        while conversation
            .0
            .as_ref()
            .unwrap()
            .open_questions
            .load(Ordering::SeqCst)
            < 1
        {
            tokio::task::yield_now().await;
        }
        drop(outbox);
        assert_eq!(question.await.unwrap(), Err(Unasked::Gone));
    }

    #[test]
    fn an_empty_elicitation_capability_is_the_form_mode() {
        let declared =
            |json: serde_json::Value| Accepts::of(&serde_json::from_value(json).unwrap());
        assert_eq!(declared(serde_json::json!({})), Accepts::NOTHING);
        let form = declared(serde_json::json!({"elicitation": {}}));
        assert!(form.elicitation_form && !form.elicitation_url && !form.sampling);
        let url = declared(serde_json::json!({"elicitation": {"url": {}}}));
        assert!(!url.elicitation_form && url.elicitation_url);
        let both =
            declared(serde_json::json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}}));
        assert!(both.elicitation_form && both.elicitation_url && both.sampling);
    }
}
