//! larkgate's Starlark engine.
//!
//! Scripts are Starlark programs with one entry point, `def main(*, ...)`, whose keyword-only
//! parameters form the script's input shape under the binding rules. The engine sees tools only
//! through `larkgate_caller::Caller`: the dialect and the entry point ([`entry`]), tools as
//! Starlark callables ([`bindings`]), the runner ([`run`]), and worker isolation — the worker's
//! side ([`worker`]) and the parent's ([`parent`]). Untrusted scripts run in a worker;
//! [`run_in_process`] is for trusted use and benchmarks.

// `deny`, not `forbid`: starlark's `ProvidesStaticType` derive expands to an `unsafe impl`,
// allowed in `bindings`; `memory` holds the one hand-written `unsafe impl`, the worker's
// allocator, which forwards to `cap`'s.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod bindings;
pub mod entry;
pub mod lint;
#[allow(unsafe_code)]
pub mod memory;
pub mod parent;
pub mod pipe;
pub mod run;
pub mod worker;

pub use bindings::{Blocking, Host, ToolRefused};
pub use entry::{EntryPoint, ScriptError, dialect, entry_point, parse};
pub use parent::{WorkerCommand, WorkerPool, Workers, kill_all, run_in_worker};
pub use run::{
    RunError, RunOutput, RunReport, RunUsage, Script, ScriptLimits, Tools, run_in_process,
};
