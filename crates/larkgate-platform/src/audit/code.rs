//! What an audit record's code says, typed: a call's outcome (`ok`), a refusal (its [`Code`]),
//! or an event (its [`EventKind`]). In the store and the hash the code is its wire name, so
//! the chain reads the same as before the types existed; a forwarded entry naming a code that
//! is none of these is not read (it is chained as `unreadable_forwarded_entry`, with its text).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::envelope::Code;

/// An audit record's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum AuditCode {
    /// An admitted call that returned a result.
    Ok,
    /// A call refused (before admission) or failed (its outcome), with the refusal's code.
    Refusal(Code),
    /// Something that is not a call.
    Event(EventKind),
}

/// Every kind of audit event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An approver approved a pending call.
    Approved,
    /// An approver denied a pending call.
    Denied,
    /// A token was created or revoked.
    Token,
    /// A principal was added, changed or removed.
    Principal,
    /// A draft was saved.
    DraftSaved,
    /// A script version was published.
    Published,
    /// An upstream tool's definition was pinned when the upstream was adopted.
    ToolPinned,
    /// An upstream tool's changed definition was pinned again (an upstream configured
    /// `approval = "never"`).
    ToolRepinned,
    /// An upstream tool came back with its pinned definition.
    ToolRestored,
    /// An upstream tool's definition changed and it is quarantined until reviewed.
    ToolQuarantined,
    /// An operator approved a quarantined tool's new definition.
    ToolApproved,
    /// A forwarded entry that could not be read, chained with its text.
    UnreadableForwardedEntry,
    /// A request was refused for its credential (recorded as a bounded sample).
    AuthenticationFailed,
    /// An admin added an upstream at run time (`larkgate upstream add`).
    UpstreamAdded,
    /// An admin removed an upstream added at run time, and its pins.
    UpstreamRemoved,
    /// An admin signed larkgate in to an OAuth-protected upstream (`larkgate upstream login`).
    UpstreamSignedIn,
    /// A caller cancelled a call that waited for an approval, and its request was withdrawn.
    Withdrawn,
    /// An upstream asked the client of a call for an elicitation during the call.
    Elicitation,
    /// An upstream asked the client of a call for sampling during the call.
    Sampling,
    /// An admin added a virtual server at run time, or replaced one (`larkgate server add`).
    ServerAdded,
    /// An admin removed a virtual server added at run time.
    ServerRemoved,
    /// A replica signed the chain's head ([`super::checkpoint`]).
    Checkpoint,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 22] = [
        EventKind::Approved,
        EventKind::Denied,
        EventKind::Token,
        EventKind::Principal,
        EventKind::DraftSaved,
        EventKind::Published,
        EventKind::ToolPinned,
        EventKind::ToolRepinned,
        EventKind::ToolRestored,
        EventKind::ToolQuarantined,
        EventKind::ToolApproved,
        EventKind::UnreadableForwardedEntry,
        EventKind::AuthenticationFailed,
        EventKind::UpstreamAdded,
        EventKind::UpstreamRemoved,
        EventKind::UpstreamSignedIn,
        EventKind::Withdrawn,
        EventKind::Elicitation,
        EventKind::Sampling,
        EventKind::ServerAdded,
        EventKind::ServerRemoved,
        EventKind::Checkpoint,
    ];

    /// The name recorded in the chain.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Approved => "approved",
            EventKind::Denied => "denied",
            EventKind::Token => "token",
            EventKind::Principal => "principal",
            EventKind::DraftSaved => "draft_saved",
            EventKind::Published => "published",
            EventKind::ToolPinned => "tool_pinned",
            EventKind::ToolRepinned => "tool_repinned",
            EventKind::ToolRestored => "tool_restored",
            EventKind::ToolQuarantined => "tool_quarantined",
            EventKind::ToolApproved => "tool_approved",
            EventKind::UnreadableForwardedEntry => "unreadable_forwarded_entry",
            EventKind::AuthenticationFailed => "authentication_failed",
            EventKind::UpstreamAdded => "upstream_added",
            EventKind::UpstreamRemoved => "upstream_removed",
            EventKind::UpstreamSignedIn => "upstream_signed_in",
            EventKind::Withdrawn => "withdrawn",
            EventKind::Elicitation => "elicitation",
            EventKind::Sampling => "sampling",
            EventKind::ServerAdded => "server_added",
            EventKind::ServerRemoved => "server_removed",
            EventKind::Checkpoint => "checkpoint",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind equals its recorded name, as a [`Code`] equals its wire name.
impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl AuditCode {
    /// The name recorded in the chain.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditCode::Ok => "ok",
            AuditCode::Refusal(code) => code.as_str(),
            AuditCode::Event(kind) => kind.as_str(),
        }
    }

    /// The code recorded as `name`, if it is one.
    pub fn parse(name: &str) -> Option<AuditCode> {
        if name == "ok" {
            return Some(AuditCode::Ok);
        }
        Code::parse(name).map(AuditCode::Refusal).or_else(|| {
            EventKind::ALL
                .into_iter()
                .find(|k| k.as_str() == name)
                .map(AuditCode::Event)
        })
    }
}

impl fmt::Display for AuditCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<AuditCode> for String {
    fn from(code: AuditCode) -> String {
        code.as_str().to_owned()
    }
}

impl TryFrom<String> for AuditCode {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        AuditCode::parse(&name).ok_or_else(|| format!("{name:?} is not an audit code"))
    }
}

impl From<Code> for AuditCode {
    fn from(code: Code) -> Self {
        AuditCode::Refusal(code)
    }
}

impl From<EventKind> for AuditCode {
    fn from(kind: EventKind) -> Self {
        AuditCode::Event(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_name_that_reads_back() {
        let all: Vec<AuditCode> = std::iter::once(AuditCode::Ok)
            .chain(Code::ALL.into_iter().map(AuditCode::Refusal))
            .chain(EventKind::ALL.into_iter().map(AuditCode::Event))
            .collect();
        let mut names: Vec<&str> = all.iter().map(|c| c.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "two codes share a name");
        for code in all {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, code.as_str());
            assert_eq!(serde_json::from_value::<AuditCode>(json).unwrap(), code);
        }
    }

    #[test]
    fn names_that_are_no_code_are_refused() {
        for hostile in [
            "",
            "OK",
            "ok ",
            "approve",
            "Rate_limited",
            "internal\n",
            "intent",
        ] {
            assert_eq!(AuditCode::parse(hostile), None, "{hostile:?}");
            assert!(serde_json::from_value::<AuditCode>(hostile.into()).is_err());
        }
    }
}
