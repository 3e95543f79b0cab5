//! End-to-end tests: real in-memory MCP sessions against the assembled platform, on a real
//! SQLite file and a real audit journal.

mod approvals;
mod audit;
mod harness;
mod identity;
mod pipeline;
