//! Refusals as data: the one envelope every refusal carries, and the one function that maps a
//! refusal to an MCP result.
//!
//! A refusal at any step of the pipeline — or a capability handler's own error — becomes a
//! `CallToolResult` with `isError: true`, no structured content (an SDK may validate an error's
//! structured content against the tool's output schema), a text content that starts with
//! `code: message` followed by the hint, the retry delay and the approval id, and the envelope
//! in `_meta` under `larkgate/envelope`:
//!
//! ```json
//! {"code": "rate_limited", "category": "limit", "message": "...", "hint": "...",
//!  "retry_after_seconds": 2}
//! ```
//!
//! Only larkgate emits envelopes. An upstream server's own error result is wrapped as
//! `upstream_error` carrying the upstream's text, so no upstream can forge a `rate_limited` or
//! an `approval_required`.

use std::fmt;
use std::time::Duration;

pub use larkgate_caller::{Category, Code, ENVELOPE_META_KEY, Envelope};

use crate::bounded::{MAX_MESSAGE_BYTES, MAX_TOOL_NAME_BYTES, cut};

/// A refused call: what the caller is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The code.
    pub code: Code,
    /// What happened, in a sentence the caller can act on.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// For `rate_limited`: when to retry.
    pub retry_after: Option<Duration>,
    /// For `approval_required`: the approval's id.
    pub approval_id: Option<String>,
    /// For `internal`: the id the failure's details were logged under.
    pub correlation_id: Option<Box<String>>,
    /// For `approval_required` when a 2026-07-28 call's wait for its decision goes on: the
    /// `requestState` its client echoes to wait on ([`crate::approvals::wait`]). Not part of
    /// the envelope: the edge answers `input_required` instead. (This and the correlation id
    /// are boxed: they are rare, and a refusal is returned on every path.)
    pub wait_state: Option<Box<String>>,
    /// For the operator, never the caller: what decided the refusal (a policy rule and its
    /// reason), written into the refusal's audit record. (Boxed as the wait state is.)
    pub decided_by: Option<Box<String>>,
}

impl Refusal {
    /// A refusal with a code and a message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
            hint: None,
            retry_after: None,
            approval_id: None,
            correlation_id: None,
            wait_state: None,
            decided_by: None,
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Says, for the operator's audit record only, what decided the refusal.
    pub fn decided_by(mut self, what: impl Into<String>) -> Self {
        self.decided_by = Some(Box::new(what.into()));
        self
    }

    /// The refusal for a tool that does not exist or that the caller may not see: one text
    /// for both, so a refusal reveals nothing.
    pub fn not_found(tool: &str) -> Self {
        if tool.len() > MAX_TOOL_NAME_BYTES {
            return Refusal::new(
                Code::NotFound,
                format!(
                    "no tool has a name that long ({} bytes): tool names are at most \
                     {MAX_TOOL_NAME_BYTES}",
                    tool.len()
                ),
            )
            .with_hint("list the tools to see the ones you may call");
        }
        Refusal::new(
            Code::NotFound,
            format!("no tool named {tool:?} is available"),
        )
        .with_hint("list the tools to see the ones you may call")
    }

    /// larkgate itself failed. The caller is told only `summary` — a fixed sentence that says
    /// what did not happen (`"the call did not run"`), chosen where the failure is handled, so
    /// it cannot carry data — and a correlation id. `detail` (a store's error with its SQL, a
    /// path, an upstream's address) goes to the log under that id, for the operator.
    pub fn internal(summary: &'static str, detail: impl fmt::Display) -> Self {
        let id = correlation_id();
        tracing::error!(correlation_id = %id, %detail, "internal failure: {summary}");
        Refusal {
            correlation_id: Some(Box::new(id.clone())),
            ..Refusal::new(
                Code::Internal,
                format!("larkgate failed: {summary} (correlation id {id})"),
            )
            .with_hint("the operator's log has the details under the correlation id")
        }
    }

    /// A store operation failed: if the store stayed locked or fully in use past its busy
    /// timeout, a `timeout` that says so (nothing ran; the same call may succeed later); if its
    /// database could not be reached, a `timeout` that says that; else [`Refusal::internal`]
    /// with `summary`. The store's own error goes to the log either way, never to the caller.
    pub fn store(summary: &'static str, error: larkgate_store::StoreError) -> Self {
        if error.is_busy() {
            return Refusal::logged(
                Code::Timeout,
                "the store is busy: it stayed locked or fully in use for longer than larkgate \
                 waits, so the call did not run",
                error,
            )
            .with_hint("try again; if it keeps happening, find the process holding the lock");
        }
        if error.is_unavailable() {
            return Refusal::logged(
                Code::Timeout,
                "larkgate's database could not be reached, so the call was not completed (a \
                 write under way when the connection broke may or may not have been applied)",
                error,
            )
            .with_hint(
                "try again shortly; if it keeps happening, tell the operator (their log has the \
                 cause under the correlation id)",
            );
        }
        Refusal::internal(summary, error)
    }

    /// A refusal whose cause is for the operator only: the caller is told `message` (what
    /// failed, in larkgate's words) and a correlation id; `detail` (a library's error, an
    /// address) goes to the log under that id. For failures of something other than larkgate
    /// itself (an upstream down), where [`Refusal::internal`] would blame the wrong party.
    pub fn logged(code: Code, message: impl fmt::Display, detail: impl fmt::Display) -> Self {
        let id = correlation_id();
        tracing::warn!(correlation_id = %id, %detail, "refused: {message}");
        Refusal {
            correlation_id: Some(Box::new(id.clone())),
            ..Refusal::new(code, format!("{message} (correlation id {id})"))
        }
    }

    /// `retry_after_seconds` as the envelope carries it: whole seconds, rounded up, at least 1.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after.map(|d| {
            let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            whole.max(1)
        })
    }

    /// The envelope. Its message and hint are each cut to
    /// [`MAX_MESSAGE_BYTES`](crate::bounded::MAX_MESSAGE_BYTES), marked and hashed when cut: a
    /// refusal never sends back more than that of what a caller sent.
    pub fn envelope(&self) -> Envelope {
        let bounded = |text: &str| cut(text, MAX_MESSAGE_BYTES).into_owned();
        Envelope {
            code: self.code,
            category: self.code.category(),
            message: bounded(&self.message),
            hint: self.hint.as_deref().map(bounded),
            retry_after_seconds: self.retry_after_seconds(),
            approval_id: self.approval_id.clone(),
            correlation_id: self.correlation_id.as_deref().cloned(),
        }
    }

    /// The one mapping from a refusal to an MCP tool result.
    pub fn to_result(&self) -> rmcp::model::CallToolResult {
        let envelope = self.envelope();
        let mut result = rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
            envelope.text(),
        )]);
        let mut meta = rmcp::model::MetaObject::new();
        // Serializing strings, integers and unit variants cannot fail.
        if let Ok(envelope) = serde_json::to_value(&envelope) {
            meta.insert(ENVELOPE_META_KEY.to_owned(), envelope);
        }
        result.meta = Some(meta);
        result
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// A new correlation id: 64 random bits, hex.
fn correlation_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: a time-based id still ties the caller's message to the log line.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = nanos.to_be_bytes();
    }
    hex::encode(bytes)
}

/// A binding error becomes `invalid_arguments` on the way in.
pub fn refuse_arguments(error: &larkgate_binding::Error) -> Refusal {
    Refusal::new(Code::InvalidArguments, error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_at_least_one() {
        let at = |ms| Refusal {
            retry_after: Some(Duration::from_millis(ms)),
            ..Refusal::new(Code::RateLimited, "slow down")
        };
        assert_eq!(at(0).retry_after_seconds(), Some(1));
        assert_eq!(at(1).retry_after_seconds(), Some(1));
        assert_eq!(at(1000).retry_after_seconds(), Some(1));
        assert_eq!(at(1001).retry_after_seconds(), Some(2));
        assert_eq!(at(2500).retry_after_seconds(), Some(3));
    }

    #[test]
    fn the_envelope_carries_code_category_message_and_hint() {
        let refusal = Refusal::new(Code::Forbidden, "no").with_hint("ask an admin");
        assert_eq!(
            serde_json::to_value(refusal.envelope()).unwrap(),
            serde_json::json!({"code": "forbidden", "category": "access", "message": "no",
                               "hint": "ask an admin"})
        );
        let result = refusal.to_result();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content, None,
            "no structured content on an error"
        );
        assert_eq!(
            result.meta.unwrap().get(ENVELOPE_META_KEY),
            Some(
                &serde_json::json!({"code": "forbidden", "category": "access",
                                     "message": "no", "hint": "ask an admin"})
            )
        );
        let gated = Refusal {
            approval_id: Some("ab12".into()),
            ..Refusal::new(Code::ApprovalRequired, "this call needs an approval")
                .with_hint("ask an approver")
        };
        let text = gated.to_result().content[0].as_text().unwrap().text.clone();
        assert_eq!(
            text,
            "approval_required: this call needs an approval\nhint: ask an approver\n\
             approval id: ab12"
        );
    }

    #[test]
    fn a_busy_store_is_a_timeout_and_any_other_store_failure_internal() {
        let busy = larkgate_store::StoreError::Database(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(5),
            Some("database is locked".into()),
        ));
        assert!(busy.is_busy());
        let refusal = Refusal::store("the approval could not be read", busy);
        assert_eq!(refusal.code, Code::Timeout);
        assert!(
            refusal.message.contains("the store is busy"),
            "{}",
            refusal.message
        );
        assert!(
            !refusal.message.contains("database is locked"),
            "{}",
            refusal.message
        );
        assert!(refusal.correlation_id.is_some());
        let broken = larkgate_store::StoreError::Database(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(11),
            Some("database disk image is malformed".into()),
        ));
        assert!(!broken.is_busy());
        let refusal = Refusal::store("the approval could not be read", broken);
        assert_eq!(refusal.code, Code::Internal);
        assert!(
            !refusal.message.contains("malformed"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn an_internal_refusal_tells_the_caller_nothing_but_a_correlation_id() {
        let detail = "database error: no such table: approvals at /srv/larkgate-data/db.sqlite";
        let refusal = Refusal::internal("approvals could not be read", detail);
        let id = refusal
            .correlation_id
            .as_deref()
            .expect("a correlation id")
            .to_owned();
        assert_eq!(id.len(), 16);
        assert!(refusal.message.contains(&id), "{}", refusal.message);
        assert!(refusal.message.contains("approvals could not be read"));
        for leak in ["no such table", "/srv", "sqlite", "database"] {
            assert!(!refusal.message.contains(leak), "{}", refusal.message);
            assert!(!refusal.to_string().contains(leak), "{refusal}");
        }
        let envelope = serde_json::to_value(refusal.envelope()).unwrap();
        assert_eq!(envelope["correlation_id"], id.as_str());
        assert_ne!(
            Refusal::internal("x", "y").correlation_id,
            refusal.correlation_id
        );
    }
}
