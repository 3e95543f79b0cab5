//! Integration tests of the platform crate. The pipeline's behaviour is tested end to end:
//! real in-memory MCP sessions (`larkgate-session`) against the assembled platform, on a real
//! SQLite file and a real audit journal.

mod approval_waits;
mod approvals;
mod audit;
mod audit_faults;
mod audit_of_calls;
mod capabilities;
mod catalogue;
mod checkpoints;
mod envelopes;
mod harness;
mod identity;
mod leaks;
mod modules;
mod pipeline;
mod rules;
mod search;
mod shared_rate_limits;
mod stored_servers;
mod tokens;
