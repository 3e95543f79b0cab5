//! larkgate's platform: the tools it serves, who may call them, and the one pipeline every
//! call crosses — authenticate, authorize, write barrier, rate limit, approval gate, audit,
//! dispatch.
//!
//! | module | holds |
//! | --- | --- |
//! | [`pipeline`] | the steps a call crosses, one file each under `pipeline/`, and `build()` |
//! | [`access`] | every visibility and role decision: `has_any_role`, `may_see`, `may_call` |
//! | [`approvals`] | request, resolve, consume and list approvals; the approval tools |
//! | [`identity`] | who a call runs as: run contexts bound to sessions, the handler's context |
//! | [`services`] | the handles every step and handler shares |
//! | [`typed`] | typed tools: declared Rust input and output types bound through a plan |
//! | [`capabilities`] | the built-in capabilities (key-value store, clock) |
//! | [`names`] | the names and URIs larkgate gives what it federates |
//! | [`registry`] | tool names, origins, classification, MCP listings |
//! | [`catalog`] | upstreams' resources and prompts under larkgate's names; their dispatch |
//! | [`policy`] | roles, approval requirements, rate limits, as the operator writes them |
//! | [`clock`] | the injected clocks: monotonic for rate limits, the time of day for approvals |
//! | [`ratelimit`] | GCRA with a bounded key table, in the process or shared in Redis |
//! | [`review`] | review runs: the intended writes they record instead of making them |
//! | [`audit`] | the journaled hash chain and its verification |
//! | [`envelope`] | refusal codes and the one mapping to MCP results |
//! | [`tokens`] | bearer tokens: issue, hash, verify |
//! | [`metrics`] | Prometheus metrics |
//! | [`bounded`] | size bounds on what a refusal records or echoes |
//! | [`failing`] | a background task's lasting failure, logged once and then sparingly |
//! | [`observe`] | each MCP request's access-log line and span |
//! | [`trace_context`] | W3C trace context from clients and to upstreams |
//! | [`platform`] | the assembled platform |
//! | [`server`] | the rmcp `ServerHandler` |
//! | [`servers`] | virtual servers: parts of the catalogue served at `/mcp/NAME` |
//! | [`search`] | tool search: a virtual server's `find_tools` and `call_tool`, ranked by BM25 |
//!
//! Modules depend on each other in one direction (a test checks there is no cycle):
//! `platform` and `server` assemble; `pipeline` uses `access`, `approvals`, `audit`,
//! `registry` and `services`; nothing below them reaches back up.

#![forbid(unsafe_code)]

pub mod access;
pub mod added_servers;
pub mod approvals;
pub mod audit;
pub mod bounded;
pub mod capabilities;
pub mod catalog;
pub mod clock;
pub mod conversation;
pub mod decisions;
pub mod display;
pub mod envelope;
pub mod explain;
pub mod failing;
pub mod identity;
pub mod metrics;
pub mod names;
pub mod observe;
pub mod pipeline;
pub mod platform;
pub mod policy;
pub mod ratelimit;
pub mod registry;
pub mod review;
pub mod search;
pub mod server;
pub mod servers;
pub mod services;
pub mod tokens;
pub mod trace_context;
pub mod typed;

pub use conversation::Conversation;
pub use envelope::{Code, Refusal};
pub use identity::{CallContext, RunContext, RunKind, SessionIdentity};
pub use platform::{Platform, PlatformBuilder};
pub use server::PlatformServer;
pub use services::{CallLimits, Services};
pub use typed::{Annotations, CapabilityInfo, Declared, Listing};
