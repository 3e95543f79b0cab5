//! Who a call runs as, and what a handler may reach while it runs.
//!
//! Identity is decided in one place: whoever opens a session decides who it runs as, and binds
//! a [`SessionIdentity`] to it when the session is created. Nothing a client puts in a request
//! (extensions, `_meta`, `clientInfo`) reaches this type.

use std::collections::BTreeSet;
use std::sync::Arc;

use larkgate_store::{CallChain, Principal};

use crate::services::Services;

pub use larkgate_caller::RunKind;

/// Whether `name` may name a principal a person registers (or an identity provider's account
/// maps to): 1 to 64 of `A-Z a-z 0-9 _ - . @`. Script principals (`script:<name>`) fall
/// outside it on purpose: they are created by publishing, never registered or signed in as.
pub fn is_principal_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'))
}

/// Whether `role` may name a role: `a-z 0-9 _ -`, not empty.
pub fn is_role_name(role: &str) -> bool {
    !role.is_empty()
        && role
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// The context a session is opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunContext {
    /// Who the session's calls run as, with the roles they carry.
    pub principal: Principal,
    /// The script run, for script sessions.
    pub run_id: Option<String>,
    /// How the calls came about.
    pub kind: RunKind,
    /// Script nesting depth: 0 for a direct session, 1 for a script it runs, and so on.
    pub depth: u32,
    /// The runs this session's calls are made inside: who started each and who wrote its
    /// script (empty for a direct session). An approval binds to it.
    pub chain: CallChain,
    /// For a published run: the upstream tools (larkgate names) its version was published
    /// against. A call to any other upstream tool is refused. `None` for sessions held to no
    /// such list: direct sessions, drafts, and versions published before larkgate recorded one.
    pub upstream_tools: Option<Arc<BTreeSet<String>>>,
}

impl RunContext {
    /// A direct session's context: `principal`'s own calls, outside any script run (an agent
    /// over HTTP, a desktop client over stdio, the operator's command line).
    pub fn direct(principal: Principal) -> Self {
        RunContext {
            principal,
            run_id: None,
            kind: RunKind::Direct,
            depth: 0,
            chain: CallChain::default(),
            upstream_tools: None,
        }
    }
}

/// A session's bound identity: its run context and the label that tells run kinds apart in
/// logs and audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionIdentity {
    /// The run context.
    pub run: RunContext,
    /// The session's label (`cli`, `script-draft`, `script-published`, ...).
    pub label: String,
    /// The virtual server the session's requests come through (`/mcp/NAME`): what they reach
    /// is held to it as well as to the roles ([`crate::servers`]). `None`: `/mcp`, stdio, the
    /// command line and script runs.
    pub server: Option<Arc<crate::servers::VirtualServer>>,
}

/// What a handler sees of the call it serves.
#[derive(Clone, Debug)]
pub struct CallContext {
    /// The caller.
    pub identity: Arc<SessionIdentity>,
    /// The platform's shared services.
    pub services: Arc<Services>,
    /// What the call may say to the client that made it (progress), and how that client's
    /// cancellation reaches it.
    pub conversation: crate::Conversation,
}
