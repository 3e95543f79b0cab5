//! Refusals as data: the one envelope every refusal carries, and the one function that maps a
//! refusal to an MCP result.
//!
//! A refusal at any step of the pipeline — or a capability handler's own error — becomes a
//! `CallToolResult` with `isError: true`, the message as its text content, the envelope as its
//! structured content, and `_meta` marking it as larkgate's:
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

use serde::{Deserialize, Serialize};

/// The `_meta` key marking a result as a larkgate envelope.
pub const ENVELOPE_META_KEY: &str = "larkgate/envelope";

/// Every refusal code. Extend with care: each has a test that reads it back through a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// No identity: no session binding and no valid credential.
    Unauthenticated,
    /// A visible tool whose call a policy refuses.
    Forbidden,
    /// A tool that does not exist or that the caller may not see (indistinguishable).
    NotFound,
    /// Arguments that do not fit the tool's input.
    InvalidArguments,
    /// The tool needs an approver's approval for these arguments.
    ApprovalRequired,
    /// An approver denied this call.
    ApprovalDenied,
    /// A draft run may call only read-only tools.
    WriteBarrier,
    /// Too many calls; retry after `retry_after_seconds`.
    RateLimited,
    /// A size, count or time limit.
    LimitExceeded,
    /// An upstream server could not be reached.
    UpstreamUnavailable,
    /// An upstream server answered with an error.
    UpstreamError,
    /// The call took too long.
    Timeout,
    /// larkgate itself failed; nothing ran, or the outcome is unknown.
    Internal,
}

impl Code {
    /// Every code, for tests and documentation.
    pub const ALL: [Code; 13] = [
        Code::Unauthenticated,
        Code::Forbidden,
        Code::NotFound,
        Code::InvalidArguments,
        Code::ApprovalRequired,
        Code::ApprovalDenied,
        Code::WriteBarrier,
        Code::RateLimited,
        Code::LimitExceeded,
        Code::UpstreamUnavailable,
        Code::UpstreamError,
        Code::Timeout,
        Code::Internal,
    ];

    /// The wire name (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Unauthenticated => "unauthenticated",
            Code::Forbidden => "forbidden",
            Code::NotFound => "not_found",
            Code::InvalidArguments => "invalid_arguments",
            Code::ApprovalRequired => "approval_required",
            Code::ApprovalDenied => "approval_denied",
            Code::WriteBarrier => "write_barrier",
            Code::RateLimited => "rate_limited",
            Code::LimitExceeded => "limit_exceeded",
            Code::UpstreamUnavailable => "upstream_unavailable",
            Code::UpstreamError => "upstream_error",
            Code::Timeout => "timeout",
            Code::Internal => "internal",
        }
    }

    /// The broad class a client can branch on.
    pub fn category(self) -> &'static str {
        match self {
            Code::Unauthenticated | Code::Forbidden | Code::NotFound | Code::WriteBarrier => {
                "access"
            }
            Code::InvalidArguments => "input",
            Code::ApprovalRequired | Code::ApprovalDenied => "approval",
            Code::RateLimited | Code::LimitExceeded | Code::Timeout => "limit",
            Code::UpstreamUnavailable | Code::UpstreamError => "upstream",
            Code::Internal => "internal",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The refusal for a tool that does not exist or that the caller may not see: one text
    /// for both, so a refusal reveals nothing.
    pub fn not_found(tool: &str) -> Self {
        Refusal::new(
            Code::NotFound,
            format!("no tool named {tool:?} is available"),
        )
        .with_hint("list the tools to see the ones you may call")
    }

    /// An internal failure; `what` is logged with the refusal, and the caller told only that
    /// larkgate failed.
    pub fn internal(what: impl Into<String>) -> Self {
        Refusal::new(Code::Internal, format!("larkgate failed: {}", what.into()))
    }

    /// `retry_after_seconds` as the envelope carries it: whole seconds, rounded up, at least 1.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after.map(|d| {
            let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            whole.max(1)
        })
    }

    /// The envelope, as structured content.
    pub fn envelope(&self) -> serde_json::Value {
        let mut envelope = serde_json::json!({
            "code": self.code.as_str(),
            "category": self.code.category(),
            "message": self.message,
        });
        if let Some(hint) = &self.hint {
            envelope["hint"] = hint.as_str().into();
        }
        if let Some(seconds) = self.retry_after_seconds() {
            envelope["retry_after_seconds"] = seconds.into();
        }
        if let Some(id) = &self.approval_id {
            envelope["approval_id"] = id.as_str().into();
        }
        envelope
    }

    /// The one mapping from a refusal to an MCP tool result.
    pub fn to_result(&self) -> rmcp::model::CallToolResult {
        let mut text = self.message.clone();
        if let Some(hint) = &self.hint {
            text.push_str(" (");
            text.push_str(hint);
            text.push(')');
        }
        let mut result =
            rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]);
        result.structured_content = Some(self.envelope());
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(ENVELOPE_META_KEY.to_owned(), serde_json::Value::Bool(true));
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
            refusal.envelope(),
            serde_json::json!({"code": "forbidden", "category": "access", "message": "no",
                               "hint": "ask an admin"})
        );
        let result = refusal.to_result();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.meta.unwrap().get(ENVELOPE_META_KEY),
            Some(&serde_json::json!(true))
        );
    }

    #[test]
    fn codes_have_unique_wire_names() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
        for code in Code::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, code.as_str());
        }
    }
}
