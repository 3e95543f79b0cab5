//! The script service in its own crate: who a run runs as, drafts, publishing, review runs,
//! nesting and the runs' budget, through the platform's tools as agents call them; and what the
//! service must keep in step with the engine.

mod approvals;
mod authority;
mod budget;
mod drafts;
mod harness;
mod names;
mod nesting;
mod review;
