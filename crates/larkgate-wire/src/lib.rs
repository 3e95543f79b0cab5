//! The wire types every crate shares: the refusal [`Code`], the [`Envelope`] a refusal carries
//! in a tool result's `_meta` (under [`ENVELOPE_META_KEY`]), the [`RunKind`] a session's calls
//! come from, and the one table from a code to the JSON-RPC error code and HTTP status every
//! edge answers with ([`answer`]).
//!
//! One definition each: the platform writes envelopes with these types, the session reads them
//! back with the same ones (serde, not a second hand-written parser), the engine branches on the
//! typed code, and the store keeps a run's kind and code as these types. The crate depends on
//! nothing of larkgate's, so that every other crate can.

#![forbid(unsafe_code)]

pub mod answer;

use std::fmt;

use serde::{Deserialize, Serialize};

/// The `_meta` key under which a refused call's result carries larkgate's [`Envelope`].
///
/// An error result carries no `structuredContent`: the official TypeScript SDK validates an
/// error result's structured content against the tool's output schema, so an envelope there
/// made every refusal from a tool with an output schema unreadable in its clients.
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
    /// The approval expired: nobody decided on the request in time, or the granted approval
    /// was not used in time. Calling again asks anew.
    ApprovalExpired,
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
    /// A script failed of its own accord (`fail(...)`, an error it raised): its author's to
    /// fix, not larkgate's.
    ScriptFailed,
    /// A published script is suspended: an upstream tool it refers to changed its definition
    /// and waits for an admin's review. Nothing of the script ran.
    ScriptSuspended,
    /// larkgate itself failed; nothing ran, or the outcome is unknown.
    Internal,
}

impl Code {
    /// Every code, for tests and documentation.
    pub const ALL: [Code; 16] = [
        Code::Unauthenticated,
        Code::Forbidden,
        Code::NotFound,
        Code::InvalidArguments,
        Code::ApprovalRequired,
        Code::ApprovalDenied,
        Code::ApprovalExpired,
        Code::WriteBarrier,
        Code::RateLimited,
        Code::LimitExceeded,
        Code::UpstreamUnavailable,
        Code::UpstreamError,
        Code::Timeout,
        Code::ScriptFailed,
        Code::ScriptSuspended,
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
            Code::ApprovalExpired => "approval_expired",
            Code::WriteBarrier => "write_barrier",
            Code::RateLimited => "rate_limited",
            Code::LimitExceeded => "limit_exceeded",
            Code::UpstreamUnavailable => "upstream_unavailable",
            Code::UpstreamError => "upstream_error",
            Code::Timeout => "timeout",
            Code::ScriptFailed => "script_failed",
            Code::ScriptSuspended => "script_suspended",
            Code::Internal => "internal",
        }
    }

    /// The code with wire name `name`, if there is one.
    pub fn parse(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The broad class a client can branch on.
    pub fn category(self) -> Category {
        match self {
            Code::Unauthenticated | Code::Forbidden | Code::NotFound | Code::WriteBarrier => {
                Category::Access
            }
            Code::InvalidArguments => Category::Input,
            Code::ApprovalRequired | Code::ApprovalDenied | Code::ApprovalExpired => {
                Category::Approval
            }
            Code::RateLimited | Code::LimitExceeded | Code::Timeout => Category::Limit,
            Code::UpstreamUnavailable | Code::UpstreamError => Category::Upstream,
            Code::ScriptFailed | Code::ScriptSuspended => Category::Script,
            Code::Internal => Category::Internal,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code equals its wire name, so a test or a log filter can say `code == "not_found"`.
impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The broad class of a [`Code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Who may call what: `unauthenticated`, `forbidden`, `not_found`, `write_barrier`.
    Access,
    /// The arguments: `invalid_arguments`.
    Input,
    /// Approvals: `approval_required`, `approval_denied`, `approval_expired`.
    Approval,
    /// Limits: `rate_limited`, `limit_exceeded`, `timeout`.
    Limit,
    /// Upstream servers: `upstream_unavailable`, `upstream_error`.
    Upstream,
    /// A script's own failure: `script_failed`.
    Script,
    /// larkgate itself: `internal`.
    Internal,
}

/// A refusal as a tool result's structured content carries it:
///
/// ```json
/// {"code": "rate_limited", "category": "limit", "message": "...", "hint": "...",
///  "retry_after_seconds": 2}
/// ```
///
/// Absent optional fields are left out, never `null`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The code.
    pub code: Code,
    /// The code's category.
    pub category: Category,
    /// What happened, in a sentence the caller can act on.
    pub message: String,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For `rate_limited`: whole seconds to wait, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// For `approval_required` and `approval_denied`: the approval's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// For `internal`: the id the failure's details are logged under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

impl Envelope {
    /// The envelope in a result's `_meta`: `None` when there is none, an error when what is
    /// there is not an envelope larkgate wrote.
    pub fn from_meta(
        meta: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Option<Result<Envelope, serde_json::Error>> {
        let value = meta?.get(ENVELOPE_META_KEY)?;
        Some(Envelope::deserialize(value))
    }

    /// The text a refused call's result carries: `code: message`, then the hint, when to
    /// retry, and the approval id, each on its own line — what a person reads in a client that
    /// shows only text.
    pub fn text(&self) -> String {
        let mut text = format!("{}: {}", self.code, self.message);
        if let Some(hint) = &self.hint {
            text.push_str("\nhint: ");
            text.push_str(hint);
        }
        if let Some(seconds) = self.retry_after_seconds {
            text.push_str(&format!("\nretry after: {seconds} s"));
        }
        if let Some(id) = &self.approval_id {
            text.push_str("\napproval id: ");
            text.push_str(id);
        }
        text
    }
}

/// How a session's calls came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A client calling tools itself (an agent, a desktop app, the CLI).
    Direct,
    /// A draft script run: as its author, read-only tools only.
    Draft,
    /// A published script run: as `script:<name>` with the roles captured at publish time.
    Published,
    /// A draft script run in review mode: as its author, read-only tools called as in a draft
    /// run, and every call to a tool that may write recorded as an intended write and answered
    /// with a placeholder instead of being made.
    Review,
}

impl RunKind {
    /// Every kind.
    pub const ALL: [RunKind; 4] = [
        RunKind::Direct,
        RunKind::Draft,
        RunKind::Published,
        RunKind::Review,
    ];

    /// The kind named `name` (as [`RunKind::as_str`] names it), if there is one.
    pub fn parse(name: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The name recorded in audit.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Direct => "direct",
            RunKind::Draft => "draft",
            RunKind::Published => "published",
            RunKind::Review => "review",
        }
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_unique_wire_names_that_parse_back() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
        for code in Code::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert_eq!(Code::parse(code.as_str()), Some(code));
            let category = serde_json::to_value(code.category()).unwrap();
            assert!(category.is_string());
        }
        for hostile in ["", "RATE_LIMITED", "rate_limited ", "ok", "approved"] {
            assert_eq!(Code::parse(hostile), None, "{hostile:?}");
        }
    }

    #[test]
    fn an_envelope_reads_back_what_was_written_and_refuses_unknown_codes() {
        let envelope = Envelope {
            code: Code::RateLimited,
            category: Code::RateLimited.category(),
            message: "slow down".into(),
            hint: None,
            retry_after_seconds: Some(2),
            approval_id: None,
            correlation_id: None,
        };
        let json = serde_json::to_value(&envelope).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"code": "rate_limited", "category": "limit",
                               "message": "slow down", "retry_after_seconds": 2})
        );
        assert_eq!(serde_json::from_value::<Envelope>(json).unwrap(), envelope);
        let forged = serde_json::json!({"code": "root", "category": "limit", "message": "x"});
        assert!(serde_json::from_value::<Envelope>(forged).is_err());
    }
}
