//! larkgate's platform: the tools it serves, who may call them, and the one pipeline every
//! call crosses — authenticate, authorize, write barrier, rate limit, approval gate, audit,
//! dispatch.
//!
//! | module | holds |
//! | --- | --- |
//! | [`capabilities`], [`capability`] | the built-in capabilities: declarations, plans, handlers |
//! | [`builtin`] | platform tools (approvals) |
//! | [`registry`] | tool names, origins, classification, MCP listings |
//! | [`policy`] | roles, approval requirements, rate limits |
//! | [`pipeline`] | the steps, as tower layers |
//! | [`ratelimit`] | GCRA with a bounded key table |
//! | [`audit`] | the journaled hash chain and its verification |
//! | [`envelope`] | refusal codes and the one mapping to MCP results |
//! | [`session`] | identities bound to sessions |
//! | [`platform`] | the assembled platform |
//! | [`server`] | the rmcp `ServerHandler` |

#![forbid(unsafe_code)]

pub mod audit;
pub mod builtin;
pub mod capabilities;
pub mod capability;
pub mod envelope;
pub mod metrics;
pub mod pipeline;
pub mod platform;
pub mod policy;
pub mod ratelimit;
pub mod registry;
pub mod server;
pub mod session;
pub mod tokens;

pub use capability::{Annotations, CapabilityInfo, Declared, Listing};
pub use envelope::{Code, Refusal};
pub use platform::{CallLimits, Platform, PlatformBuilder, Services};
pub use server::PlatformServer;
pub use session::{CallContext, RunContext, RunKind, SessionIdentity};
