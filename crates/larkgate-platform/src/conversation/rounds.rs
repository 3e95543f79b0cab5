//! A 2026-07-28 client's questions, asked in rounds of its call.
//!
//! That revision has no requests from a server to its client: a server that needs the
//! client's input answers the call `input_required`, with the questions (`inputRequests`) and
//! a `requestState`, and the client calls again with its answers (`inputResponses`) and that
//! state. larkgate's own call to an upstream is not stateless (a 2025-11-25 upstream asks in
//! the middle of its call; a 2026-07-28 one is answered in rounds larkgate holds with it), so
//! a call whose upstream asks is *parked*: it goes on in a task of its own ([`Rounds::start`]),
//! and the client's call is answered `input_required` with the questions asked so far and a
//! state naming the parked call ([`Desk::park`]). The client's next round delivers its answers
//! ([`Rounds::answer`]) and waits for what the call does next: ask again (another round) or
//! answer. What the call says meanwhile (progress, log messages) goes to the round under way.
//!
//! # Threat model
//!
//! The state is the client's to echo, and anyone may send anything as one:
//!
//! - **Unguessable, and good for one round.** It is [`STATE_PREFIX`] and 128 random bits. The
//!   first retry that names it takes the parked call off the desk; a second finds nothing.
//! - **Bound to the call.** It is taken only by the principal that made the call, for the
//!   same tool with the same arguments. Another principal, or another tool or other arguments,
//!   finds nothing (and the call stays parked for its own client): nothing is said of whose
//!   it is.
//! - **Bounded.** A parked call waits at most [`PARKED_TTL`] for its client to come back,
//!   then is cancelled, its questions told the client did not answer. At most
//!   [`MAX_PARKED_PER_PRINCIPAL`] calls of one principal, and [`MAX_PARKED`] in all, are
//!   parked; a call that would be one more has its questions refused, saying so.
//! - **One process.** The desk is this process's: a retry that reaches another replica finds
//!   nothing, and the client is told to call again.
//! - **Answers are checked.** An answer that is not a result of the question's kind (an
//!   elicitation's `ElicitResult`, a sampling request's `CreateMessageResult`) is not passed
//!   on: the upstream is told the client's answer was not one.

#![allow(deprecated)] // Sampling is deprecated in the 2026-07-28 revision, but still in it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientResult, CreateMessageResult, ElicitResult, InputRequest, InputRequests, InputResponses,
    ServerRequest,
};
use rmcp::service::{Peer, RoleServer, ServiceError};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Outbox, asking::Ask};

/// How every state larkgate gives a round of questions begins.
pub const STATE_PREFIX: &str = "larkgate-ask:v1:";

/// How long a parked call waits for its client to come back with its answers.
pub const PARKED_TTL: Duration = Duration::from_secs(300);

/// The most calls of one principal parked at once.
pub const MAX_PARKED_PER_PRINCIPAL: usize = 16;

/// The most calls parked at once in this process.
pub const MAX_PARKED: usize = 1024;

/// A call whose conversation is carried in rounds; its answer is a `T`.
pub struct Rounds<T> {
    outbox: Outbox,
    output: oneshot::Receiver<T>,
    /// Cancels the call (its conversation's cancellation).
    cancel: CancellationToken,
    /// The questions of the last round, by key, with where each answer goes.
    owed: Vec<Owed>,
    /// How many questions the call asked, for their keys.
    asked: u32,
    /// Whether the call's questions still come, and what it says.
    asking: bool,
    saying: bool,
}

struct Owed {
    key: String,
    sampling: bool,
    answer: oneshot::Sender<Result<ClientResult, ServiceError>>,
}

impl<T> std::fmt::Debug for Rounds<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds")
            .field("asked", &self.asked)
            .field("owed", &self.owed.len())
            .finish_non_exhaustive()
    }
}

/// How a round ended.
#[derive(Debug)]
pub enum Round<T> {
    /// The call answered (`None`: its task ended without an answer).
    Answered(Option<T>),
    /// The call asked these, by key; it waits in the [`Rounds`] for the client's answers.
    Asking(InputRequests, Rounds<T>),
}

impl<T: Send + 'static> Rounds<T> {
    /// Runs `call` in a task of its own, its conversation's `outbox` carried in rounds;
    /// `cancel` is the conversation's cancellation.
    pub fn start<F>(outbox: Outbox, cancel: CancellationToken, call: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let (answer, output) = oneshot::channel();
        tokio::spawn(async move {
            let _ = answer.send(call.await);
        });
        Rounds {
            outbox,
            output,
            cancel,
            owed: Vec::new(),
            asked: 0,
            asking: true,
            saying: true,
        }
    }
}

impl<T> Rounds<T> {
    /// The client's answers to the last round's questions, each to the question of its key.
    /// A question not answered is told the client did not answer; one answered with what is
    /// not a result of its kind is told so.
    pub fn answer(&mut self, mut responses: InputResponses) {
        for owed in self.owed.drain(..) {
            let Some(response) = responses.remove(&owed.key) else {
                // Dropped: its asker hears that nobody answered.
                continue;
            };
            let answer = if owed.sampling {
                serde_json::from_value::<CreateMessageResult>(response)
                    .map(|r| ClientResult::CreateMessageResult(Box::new(r)))
            } else {
                serde_json::from_value::<ElicitResult>(response).map(ClientResult::ElicitResult)
            };
            let answer = answer.map_err(|error| {
                let kind = if owed.sampling {
                    "a sampling result"
                } else {
                    "an elicitation result"
                };
                ServiceError::McpError(rmcp::ErrorData::invalid_params(
                    format!("the client's answer was not {kind}: {error}"),
                    None,
                ))
            });
            let _ = owed.answer.send(answer);
        }
    }

    /// Tells each question of the last round that it will not be put, for `why`.
    pub fn refuse(&mut self, why: &str) {
        for owed in self.owed.drain(..) {
            let refused = rmcp::ErrorData::internal_error(why.to_owned(), None);
            let _ = owed.answer.send(Err(ServiceError::McpError(refused)));
        }
    }

    /// The next round: what the call says goes to `peer` as it is said (its progress under
    /// this round's `progress_token`, none when the round asked for none), and the round ends
    /// with the call's answer or with the questions it asked. When `gone` is cancelled (the
    /// client closed this round's request), so is the call.
    pub async fn round(
        mut self,
        peer: &Peer<RoleServer>,
        gone: CancellationToken,
        progress_token: Option<rmcp::model::ProgressToken>,
    ) -> Round<T> {
        let mut cancelled = false;
        loop {
            tokio::select! {
                biased;
                said = self.outbox.queue.recv(), if self.saying => match said {
                    Some(super::Said::Progress(mut progress)) => {
                        if let Some(token) = &progress_token {
                            progress.progress_token = token.clone();
                            super::send(peer, super::Said::Progress(progress)).await;
                        }
                    }
                    Some(said) => super::send(peer, said).await,
                    None => self.saying = false,
                },
                ask = self.outbox.asks.recv(), if self.asking => match ask {
                    Some(ask) => {
                        let mut questions = InputRequests::new();
                        self.take(ask, &mut questions);
                        // What the call asks at once (a 2026-07-28 upstream's several
                        // questions) goes in one round.
                        for _ in 0..4 {
                            tokio::task::yield_now().await;
                            while let Ok(ask) = self.outbox.asks.try_recv() {
                                self.take(ask, &mut questions);
                            }
                        }
                        if !questions.is_empty() {
                            return Round::Asking(questions, self);
                        }
                    }
                    None => self.asking = false,
                },
                output = &mut self.output => {
                    self.outbox.finish(peer).await;
                    return Round::Answered(output.ok());
                }
                () = gone.cancelled(), if !cancelled => {
                    cancelled = true;
                    self.cancel.cancel();
                }
            }
        }
    }

    /// Keys `ask` for this round, or tells it larkgate does not put its kind of question.
    fn take(&mut self, ask: Ask, questions: &mut InputRequests) {
        let (question, sampling) = match ask.question {
            ServerRequest::ElicitRequest(request) => (InputRequest::Elicitation(request), false),
            ServerRequest::CreateMessageRequest(request) => {
                (InputRequest::CreateMessage(request), true)
            }
            _ => {
                let refused = rmcp::ErrorData::internal_error(
                    "larkgate puts only elicitations and sampling requests to a 2026-07-28 client",
                    None,
                );
                let _ = ask.answer.send(Err(ServiceError::McpError(refused)));
                return;
            }
        };
        self.asked += 1;
        let key = format!("larkgate-{}", self.asked);
        questions.insert(key.clone(), question);
        self.owed.push(Owed {
            key,
            sampling,
            answer: ask.answer,
        });
    }
}

impl<T> Drop for Rounds<T> {
    /// A call nobody will answer (its client did not come back, or the round's task ended) is
    /// cancelled; after its answer this does nothing.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Who may take a parked call: the principal that made it, for the same tool and arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Caller {
    /// The principal's id.
    pub principal: String,
    /// The tool's name, as the client called it.
    pub tool: String,
    /// The arguments, as the client sent them.
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The calls parked between rounds in this process (see the module documentation).
pub struct Desk<T> {
    parked: Mutex<HashMap<String, Parked<T>>>,
}

struct Parked<T> {
    caller: Caller,
    rounds: Rounds<T>,
    /// Takes it off the desk when its time is up.
    _expiry: AbortOnDrop,
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Default for Desk<T> {
    fn default() -> Self {
        Desk {
            parked: Mutex::default(),
        }
    }
}

impl<T> std::fmt::Debug for Desk<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk")
            .field("parked", &self.lock().len())
            .finish()
    }
}

impl<T: Send + 'static> Desk<T> {
    /// Parks `rounds` for `caller`'s next round, for at most `ttl`: the state that takes it.
    /// `Err` gives it back when the desk is full (for the caller, or in all).
    pub fn park(
        self: &Arc<Self>,
        caller: Caller,
        rounds: Rounds<T>,
        ttl: Duration,
    ) -> Result<String, Rounds<T>> {
        let mut parked = self.lock();
        let theirs = parked
            .values()
            .filter(|p| p.caller.principal == caller.principal)
            .count();
        if parked.len() >= MAX_PARKED || theirs >= MAX_PARKED_PER_PRINCIPAL {
            return Err(rounds);
        }
        let handle = random_handle();
        let desk = Arc::downgrade(self);
        let expired = handle.clone();
        let expiry = tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(desk) = desk.upgrade() {
                let gone = desk.lock().remove(&expired);
                // Dropped outside the lock: its call is cancelled.
                drop(gone);
            }
        });
        parked.insert(
            handle.clone(),
            Parked {
                caller,
                rounds,
                _expiry: AbortOnDrop(expiry.abort_handle()),
            },
        );
        Ok(format!("{STATE_PREFIX}{handle}"))
    }

    /// The call `state` names, taken off the desk, if `caller` may take it.
    pub fn take(&self, state: &str, caller: &Caller) -> Option<Rounds<T>> {
        let handle = state.strip_prefix(STATE_PREFIX)?;
        let mut parked = self.lock();
        if parked.get(handle)?.caller != *caller {
            return None;
        }
        parked.remove(handle).map(|p| p.rounds)
    }

    /// How many calls are parked.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Desk<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked<T>>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// 128 random bits, as 32 hexadecimal digits.
fn random_handle() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source works");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Accepts, Conversation, Unasked};

    /// A call that ends when it is cancelled.
    fn call(cancel: &CancellationToken) -> Rounds<u32> {
        let (_conversation, outbox) = Conversation::open_within(
            None,
            None,
            Accepts::NOTHING,
            cancel.clone(),
            &Conversation::none(),
        );
        let cancelled = cancel.clone();
        Rounds::start(outbox, cancel.clone(), async move {
            cancelled.cancelled().await;
            7
        })
    }

    fn caller(principal: &str) -> Caller {
        Caller {
            principal: principal.to_owned(),
            tool: "weather__pick".to_owned(),
            arguments: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_call_is_taken_once_by_its_own_caller_and_cancelled_when_its_time_is_up() {
        let desk = Arc::new(Desk::default());
        let cancel = CancellationToken::new();
        let state = desk.park(caller("ada"), call(&cancel), PARKED_TTL).unwrap();
        assert!(state.starts_with(STATE_PREFIX), "{state}");
        assert_eq!(state.len(), STATE_PREFIX.len() + 32, "{state}");
        let handle = &state[STATE_PREFIX.len()..];
        let others = [
            ("another principal", state.clone(), caller("bob")),
            (
                "another tool",
                state.clone(),
                Caller {
                    tool: "weather__visit".to_owned(),
                    ..caller("ada")
                },
            ),
            (
                "other arguments",
                state.clone(),
                Caller {
                    arguments: Some(serde_json::Map::new()),
                    ..caller("ada")
                },
            ),
            ("the bare prefix", STATE_PREFIX.to_owned(), caller("ada")),
            ("the handle alone", handle.to_owned(), caller("ada")),
            ("more after it", format!("{state}0"), caller("ada")),
            (
                "a part of it",
                state[..state.len() - 1].to_owned(),
                caller("ada"),
            ),
            (
                "another version",
                format!("larkgate-ask:v2:{handle}"),
                caller("ada"),
            ),
            ("nothing", String::new(), caller("ada")),
        ];
        for (what, state, caller) in others {
            assert!(desk.take(&state, &caller).is_none(), "{what}");
        }
        assert_eq!(desk.len(), 1, "still parked for its own client");
        let taken = desk
            .take(&state, &caller("ada"))
            .expect("its own caller takes it");
        assert!(desk.take(&state, &caller("ada")).is_none(), "once");
        assert!(!cancel.is_cancelled());

        // Parked again and never taken: cancelled once its time is up, not before.
        let state = desk.park(caller("ada"), taken, PARKED_TTL).unwrap();
        tokio::time::sleep(PARKED_TTL - Duration::from_secs(1)).await;
        assert!(!cancel.is_cancelled());
        assert_eq!(desk.len(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(cancel.is_cancelled());
        assert!(desk.is_empty());
        assert!(desk.take(&state, &caller("ada")).is_none());
    }

    #[tokio::test]
    async fn at_most_so_many_calls_of_one_principal_are_parked() {
        let desk = Arc::new(Desk::default());
        let cancel = CancellationToken::new();
        for _ in 0..MAX_PARKED_PER_PRINCIPAL {
            assert!(desk.park(caller("ada"), call(&cancel), PARKED_TTL).is_ok());
        }
        let refused = desk.park(caller("ada"), call(&cancel), PARKED_TTL);
        assert!(refused.is_err(), "one more of ada's");
        assert!(desk.park(caller("bob"), call(&cancel), PARKED_TTL).is_ok());
        assert_eq!(desk.len(), MAX_PARKED_PER_PRINCIPAL + 1);
    }

    #[tokio::test]
    async fn each_answer_goes_to_its_question_and_one_of_another_kind_is_not_passed_off() {
        let cancel = CancellationToken::new();
        let accepts = Accepts {
            elicitation_form: true,
            ..Accepts::NOTHING
        };
        let (conversation, outbox) =
            Conversation::open_within(None, None, accepts, cancel.clone(), &Conversation::none());
        let question = |message: &str| {
            serde_json::from_value::<rmcp::model::ElicitRequestParams>(serde_json::json!({
                "mode": "form",
                "message": message,
                "requestedSchema": {"type": "object", "properties": {}},
            }))
            .unwrap()
        };
        let asking = conversation.clone();
        let mut rounds = Rounds::start(outbox, cancel, async move {
            tokio::join!(
                asking.elicit(question("one")),
                asking.elicit(question("two")),
                asking.elicit(question("three")),
            )
        });
        let mut questions = InputRequests::new();
        for _ in 0..3 {
            let ask = rounds.outbox.asks.recv().await.unwrap();
            rounds.take(ask, &mut questions);
        }
        let mut keys: Vec<&String> = questions.keys().collect();
        keys.sort();
        assert_eq!(keys, ["larkgate-1", "larkgate-2", "larkgate-3"]);
        let message_of = |key: &str| match &questions[key] {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(&request.params).unwrap()["message"].clone()
            }
            other => panic!("{other:?}"),
        };
        let (accepted, wrong) = (message_of("larkgate-1"), message_of("larkgate-2"));
        let mut answers = InputResponses::new();
        answers.insert(
            "larkgate-1".to_owned(),
            serde_json::json!({"action": "accept", "content": {}}),
        );
        answers.insert(
            "larkgate-2".to_owned(),
            serde_json::json!({"role": "assistant", "model": "m-1"}),
        );
        // An answer to no question of the round is nobody's.
        answers.insert(
            "larkgate-9".to_owned(),
            serde_json::json!({"action": "accept"}),
        );
        rounds.answer(answers);
        let (one, two, three) = (&mut rounds.output).await.unwrap();
        let by_message = |message: &serde_json::Value| match message.as_str() {
            Some("one") => &one,
            Some("two") => &two,
            _ => &three,
        };
        let accepted = by_message(&accepted);
        assert_eq!(
            accepted.as_ref().map(|r| r.action.clone()),
            Ok(rmcp::model::ElicitationAction::Accept),
            "{accepted:?}"
        );
        match by_message(&wrong) {
            Err(Unasked::Refused(error)) => assert!(
                error
                    .message
                    .contains("the client's answer was not an elicitation result"),
                "{error:?}"
            ),
            other => panic!("{other:?}"),
        }
        let unanswered = [&one, &two, &three]
            .into_iter()
            .filter(|o| matches!(o, Err(Unasked::Gone)))
            .count();
        assert_eq!(
            unanswered, 1,
            "the question nobody answered: {one:?} {two:?} {three:?}"
        );
    }
}
