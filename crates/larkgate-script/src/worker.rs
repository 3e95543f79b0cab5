//! Runs in a worker process: the threat model and the protocol.
//!
//! A script is untrusted code holding someone's authority. starlark-rust aborts the process on
//! some allocations and ignores cancellation in some operations, so every run executes in a
//! single-use worker process — the same program re-executed with [`WORKER_ARG`] — that:
//! - takes the worker branch in `main` before any async runtime starts (single thread,
//!   blocking pipe I/O);
//! - refuses to run unless its global allocator is [`crate::memory::WorkerAllocator`], which
//!   counts every allocation of the process; once the run's limits arrive it caps them at
//!   `max_memory_bytes` ([`crate::memory`]);
//! - limits its own address space (`RLIMIT_AS`) and disables core dumps, through `rustix`;
//! - runs with `MALLOC_ARENA_MAX=1` (set by the parent), so the address-space limit is not
//!   eaten by per-thread arenas;
//! - talks to the parent only through length-prefixed JSON frames on stdin/stdout.
//!
//! The parent owns the run's MCP session. It caps every frame, counts tool calls itself, and
//! kills the worker at the deadline; every call it passes on crosses the platform's pipeline,
//! which binds the arguments to the tool's input shape with authority (the worker's binding
//! only words the author's error early). A worker that dies names its
//! cause on stderr first — the memory cap or the address space (the allocator's report), a
//! native stack overflow (Rust's runtime) — and the parent reads it with the exit status
//! ([`crate::parent`]): `limit_exceeded` names the limit that was hit, and a death nobody
//! explained is reported as exactly that, by its signal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_binding::{Limits, Map, from_json, map_to_json};
use larkgate_caller::{CallError, Code, RefusalError, Target, ToolInfo};
use serde::{Deserialize, Serialize};

use crate::bindings::Host;
use crate::run::{
    RunError, RunReport, RunUsage, Script, ScriptLimits, Tools, globals, run_with_globals,
};

/// The argument that makes the program a worker.
pub const WORKER_ARG: &str = "__larkgate-worker";
/// The environment variable carrying the worker's address-space limit, in bytes.
pub const ADDRESS_SPACE_ENV: &str = "LARKGATE_WORKER_ADDRESS_SPACE";
/// The default worker address space.
pub const DEFAULT_ADDRESS_SPACE: u64 = 1024 * 1024 * 1024;
use crate::pipe::read_frame;
pub use crate::pipe::{MAX_FRAME, write_frame};

/// Parent → worker: what to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Start {
    /// The script's file name, for messages.
    pub filename: String,
    /// The source.
    pub source: String,
    /// The run's arguments, as a JSON object.
    pub arguments: serde_json::Value,
    /// The run's limits.
    pub limits: ScriptLimits,
    /// Whether this is a draft run.
    pub draft: bool,
    /// The session's listing.
    pub listing: Vec<ToolInfo>,
}

/// Worker → parent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// A host call.
    Call {
        /// What it asks for (a tool call when absent).
        #[serde(default)]
        target: Target,
        /// The tool, the resource's URI or the prompt.
        name: String,
        /// Its arguments as the worker bound them (the pipeline binds them again, with
        /// authority).
        arguments: serde_json::Value,
    },
    /// The run ended.
    Done(Outcome),
}

/// Parent → worker: a host call's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CallAnswer {
    /// The structured result.
    Ok(serde_json::Value),
    /// A refusal: code, text, retry-after in milliseconds, and the approval it is about.
    Refused {
        /// The code.
        code: Code,
        /// The text.
        text: String,
        /// When to retry.
        retry_after_ms: Option<u64>,
        /// For `approval_required` and `approval_denied` (and an approval given back): its id.
        #[serde(default)]
        approval_id: Option<String>,
    },
}

/// How a run ended, on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    /// The result, or the error.
    pub result: Result<serde_json::Value, WireError>,
    /// What was printed, on success and on failure.
    pub printed: String,
    /// What the run used, as the worker counted it.
    pub usage: RunUsage,
}

/// A [`RunError`] on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WireError {
    /// Unusable script.
    Script(String),
    /// Arguments that do not fit `main`.
    InvalidArguments(String),
    /// A limit.
    Limit {
        /// Its name.
        limit: String,
        /// Details.
        message: String,
    },
    /// An unhandled refusal.
    Refused {
        /// The code (a frame naming no known code is not read).
        code: Code,
        /// The text.
        text: String,
        /// The tool that refused.
        #[serde(default)]
        tool: Option<String>,
        /// For an approval refusal: the approval's id.
        #[serde(default)]
        approval_id: Option<String>,
    },
    /// The script raised an error.
    Raised(String),
    /// The run could not be carried out.
    Failed(String),
}

/// The names of the limits a run can hit, so a wire name maps back to a static one.
const LIMIT_NAMES: &[&str] = &[
    "ticks",
    "memory",
    "stack",
    "call stack",
    "printed bytes",
    "result",
    "tool calls",
    "wall time",
    "address space",
    "pipe frame",
    "worker",
];

/// The static name of a limit.
pub(crate) fn limit_name(name: &str) -> &'static str {
    LIMIT_NAMES
        .iter()
        .find(|n| **n == name)
        .copied()
        .unwrap_or("worker")
}

impl From<&RunError> for WireError {
    fn from(error: &RunError) -> Self {
        match error {
            RunError::Script(e) => WireError::Script(e.to_string()),
            RunError::InvalidArguments(m) => WireError::InvalidArguments(m.clone()),
            RunError::Limit { limit, message } => WireError::Limit {
                limit: (*limit).to_owned(),
                message: message.clone(),
            },
            RunError::Refused {
                code,
                text,
                tool,
                approval_id,
            } => WireError::Refused {
                code: *code,
                text: text.clone(),
                tool: tool.clone(),
                approval_id: approval_id.clone(),
            },
            RunError::Raised(m) => WireError::Raised(m.clone()),
            RunError::Failed(m) => WireError::Failed(m.clone()),
        }
    }
}

impl From<WireError> for RunError {
    fn from(error: WireError) -> Self {
        match error {
            WireError::Script(m) => RunError::Script(crate::ScriptError::EntryPoint(m)),
            WireError::InvalidArguments(m) => RunError::InvalidArguments(m),
            WireError::Limit { limit, message } => RunError::Limit {
                limit: limit_name(&limit),
                message,
            },
            WireError::Refused {
                code,
                text,
                tool,
                approval_id,
            } => RunError::Refused {
                code,
                text,
                tool,
                approval_id,
            },
            WireError::Raised(m) => RunError::Raised(m),
            WireError::Failed(m) => RunError::Failed(m),
        }
    }
}

/// The worker's ends of the pipes to its parent, as plain files: frames are written with one
/// system call each (not through `Stdout`'s line buffering, which would split a frame at any
/// `0x0A` byte) and read through one buffer.
struct Pipes {
    input: std::io::BufReader<crate::pipe::SpinReader>,
    output: std::fs::File,
}

impl Pipes {
    fn open() -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let input = std::io::stdin().as_fd().try_clone_to_owned()?;
        let output = std::io::stdout().as_fd().try_clone_to_owned()?;
        Ok(Pipes {
            input: std::io::BufReader::new(crate::pipe::SpinReader::new(input)?),
            output: output.into(),
        })
    }
}

/// The worker's host: every call is a frame to the parent and a frame back.
struct PipeHost {
    pipes: Mutex<Pipes>,
    listing: Vec<ToolInfo>,
    limits: Limits,
}

impl Host for PipeHost {
    fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        Ok(self.listing.clone())
    }

    fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError> {
        self.request(Target::Tool, name, arguments)
    }

    fn request(&self, target: Target, name: &str, arguments: Map) -> Result<Map, CallError> {
        let mut pipes = self.pipes.lock().unwrap_or_else(|p| p.into_inner());
        let Pipes { input, output } = &mut *pipes;
        // Conversion 1 of 2 on a host call's way (value to JSON): a frame is JSON. The parent and
        // its session pass it on; the pipeline makes the second (JSON to value) and binds it.
        let call = FromWorker::Call {
            target,
            name: name.to_owned(),
            arguments: serde_json::Value::Object(map_to_json(&arguments)),
        };
        write_frame(output, &call).map_err(|e| CallError::Transport(e.to_string()))?;
        match read_frame::<CallAnswer>(input) {
            Ok(CallAnswer::Ok(value)) => match from_json(&value, self.limits) {
                Ok(larkgate_binding::Value::Map(map)) => Ok(map),
                Ok(_) => Err(CallError::Transport(
                    "a result that is not an object".into(),
                )),
                Err(e) => Err(CallError::Transport(e.to_string())),
            },
            Ok(CallAnswer::Refused {
                code,
                text,
                retry_after_ms,
                approval_id,
            }) => Err(CallError::Refused(RefusalError {
                code,
                retry_after: retry_after_ms.map(Duration::from_millis),
                approval_id,
                text,
            })),
            Err(e) => Err(CallError::Transport(e.to_string())),
        }
    }

    fn pause(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// Limits this process's address space and turns off core dumps.
fn limit_self(address_space: u64) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(address_space),
            maximum: Some(address_space),
        },
    )?;
    Ok(())
}

/// The worker's whole life: limit itself, read one [`Start`], run, answer [`FromWorker::Done`].
/// Call it from `main` when the first argument is [`WORKER_ARG`], before anything else.
pub fn worker_main() -> std::process::ExitCode {
    if !crate::memory::installed() {
        eprintln!(
            "larkgate worker: this program's global allocator is not \
             larkgate_script::memory::WorkerAllocator, so a run's memory could not be limited"
        );
        return std::process::ExitCode::from(5);
    }
    // The parent reads stderr only once the worker has died: a write that would block (a
    // full pipe) is dropped instead, so the worker never waits on it.
    if let Err(error) = rustix::io::ioctl_fionbio(rustix::stdio::stderr(), true) {
        eprintln!("larkgate worker: cannot make stderr non-blocking: {error}");
        return std::process::ExitCode::from(3);
    }
    let address_space = std::env::var(ADDRESS_SPACE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ADDRESS_SPACE);
    if let Err(error) = limit_self(address_space) {
        eprintln!("larkgate worker: cannot limit itself: {error}");
        return std::process::ExitCode::from(3);
    }
    // Everything that does not depend on the run is done before the run arrives: a pooled
    // worker waits here, ready.
    let globals = globals();
    let mut pipes = match Pipes::open() {
        Ok(pipes) => pipes,
        Err(error) => {
            eprintln!("larkgate worker: cannot open its pipes: {error}");
            return std::process::ExitCode::from(4);
        }
    };
    let start: Start = match read_frame(&mut pipes.input) {
        Ok(start) => start,
        Err(error) => {
            eprintln!("larkgate worker: no start frame: {error}");
            return std::process::ExitCode::from(4);
        }
    };
    // Counted from the process's first allocation: what the worker itself took to start (its
    // globals, this frame) is part of the run's memory.
    if let Err(in_use) = crate::memory::limit_to(start.limits.max_memory_bytes) {
        let outcome = Outcome {
            result: Err(WireError::Limit {
                limit: "memory".into(),
                message: format!(
                    "the worker holds {in_use} bytes before the script starts, over the \
                     {}-byte memory limit; raise [scripts] max_memory_bytes",
                    start.limits.max_memory_bytes
                ),
            }),
            printed: String::new(),
            usage: RunUsage::default(),
        };
        return match write_frame(&mut pipes.output, &FromWorker::Done(outcome)) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(_) => std::process::ExitCode::from(4),
        };
    }
    let arguments = match from_json(&start.arguments, start.limits.values) {
        Ok(larkgate_binding::Value::Map(map)) => map,
        _ => Map::new(),
    };
    let host = Arc::new(PipeHost {
        pipes: Mutex::new(pipes),
        listing: start.listing,
        limits: start.limits.values,
    });
    let script = Script {
        filename: &start.filename,
        source: &start.source,
        arguments: &arguments,
        limits: &start.limits,
    };
    let result = run_with_globals(
        &globals,
        script,
        Some(Tools {
            host: host.clone(),
            draft: start.draft,
        }),
    );
    let outcome = outcome_of(result);
    let mut pipes = host.pipes.lock().unwrap_or_else(|p| p.into_inner());
    let out = &mut pipes.output;
    match write_frame(out, &FromWorker::Done(outcome)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The result itself is over the frame limit: say so in a frame that fits.
            let outcome = Outcome {
                result: Err(WireError::Limit {
                    limit: "pipe frame".into(),
                    message: error.to_string(),
                }),
                printed: String::new(),
                usage: RunUsage {
                    peak_memory_bytes: peak_memory_bytes(),
                    ..RunUsage::default()
                },
            };
            let _ = write_frame(out, &FromWorker::Done(outcome));
            std::process::ExitCode::SUCCESS
        }
    }
}

fn outcome_of(report: RunReport) -> Outcome {
    Outcome {
        result: match &report.outcome {
            Ok(value) => Ok(larkgate_binding::to_json(value)),
            Err(error) => Err(WireError::from(error)),
        },
        printed: report.printed,
        usage: RunUsage {
            peak_memory_bytes: peak_memory_bytes(),
            ..report.usage
        },
    }
}

/// This process's peak resident memory, from `VmHWM` in `/proc/self/status` (Linux), in bytes.
fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    crate::memory::proc_figure(&status, "VmHWM")
}
