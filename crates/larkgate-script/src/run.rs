//! Running a script **in this process**: for trusted use, tests and benchmarks only.
//!
//! starlark-rust aborts the whole process on some allocations (`[0] * 2000000000`) and some
//! operations ignore cancellation (`'a' * 2000000000`), so untrusted scripts must run in a
//! worker process with a counted memory cap, an address-space limit and a deadline kill
//! ([`crate::parent`], [`crate::worker`], [`crate::memory`]). This mode enforces only what the
//! interpreter itself can: ticks, its own heap (which misses container storage), call stack,
//! wall time (checked between steps), tool calls, printed bytes and the result's size. `serve`
//! and `stdio` never use it.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_binding::{Limits, Map, Value, from_starlark, to_starlark};
use larkgate_caller::Code;
use starlark::PrintHandler;
use starlark::environment::{Globals, LibraryExtension, Module};
use starlark::eval::Evaluator;

use crate::bindings::{
    Host, HostLimit, Namespace, RunState, ToolFn, ToolRefused, error_source, host_globals,
};
use crate::entry::{ScriptError, entry_point, parse};

/// The limits of one run (defaults from larkgate's limits table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScriptLimits {
    /// Interpreter ticks (roughly, statements and expressions executed).
    pub max_ticks: u64,
    /// Bytes the worker process may allocate in all ([`crate::memory`]); also the
    /// interpreter's own heap limit, which ends a run more gently where it applies (lists,
    /// strings), and the only memory limit of [`run_in_process`].
    pub max_memory_bytes: usize,
    /// Call-stack frames.
    pub max_call_stack: usize,
    /// Bytes printed by `print`.
    pub max_print_bytes: usize,
    /// Tool calls (retries after pacing count).
    pub max_tool_calls: u64,
    /// Wall time.
    pub max_wall_time: Duration,
    /// Limits on the arguments and the result.
    pub values: Limits,
}

impl Default for ScriptLimits {
    fn default() -> Self {
        ScriptLimits {
            max_ticks: 100_000_000,
            max_memory_bytes: 256 * 1024 * 1024,
            max_call_stack: 200,
            max_print_bytes: 1024 * 1024,
            max_tool_calls: 10_000,
            max_wall_time: Duration::from_secs(30),
            values: Limits::default(),
        }
    }
}

/// What a successful run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// `main`'s return value.
    pub result: Value,
    /// Everything printed, one line per `print`.
    pub printed: String,
    /// Ticks used.
    pub ticks: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Times the run waited out a `rate_limited` refusal.
    pub paces: u64,
}

/// What a run used, whether it succeeded or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunUsage {
    /// Ticks used.
    pub ticks: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Times the run waited out a `rate_limited` refusal.
    pub paces: u64,
    /// The worker process's peak resident memory (`VmHWM`), when the run had its own process
    /// and the worker lived to report it.
    pub peak_memory_bytes: Option<u64>,
}

/// How a run ended, with what it printed and used on the way — kept on failure too, so a
/// script's own `print` output helps explain why it failed.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// `main`'s return value, or why the run failed.
    pub outcome: Result<Value, RunError>,
    /// Everything printed, one line per `print` (empty when the worker was killed).
    pub printed: String,
    /// What the run used.
    pub usage: RunUsage,
}

impl RunReport {
    /// A run that failed before it could print or use anything.
    pub fn failed(error: RunError) -> Self {
        RunReport {
            outcome: Err(error),
            printed: String::new(),
            usage: RunUsage::default(),
        }
    }

    /// The report as a `Result`, dropping what a failed run printed.
    pub fn into_result(self) -> Result<RunOutput, RunError> {
        let result = self.outcome?;
        Ok(RunOutput {
            result,
            printed: self.printed,
            ticks: self.usage.ticks,
            tool_calls: self.usage.tool_calls,
            paces: self.usage.paces,
        })
    }
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The script cannot be used (syntax, `load`, entry point).
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The run's arguments do not fit `main`.
    #[error("{0}")]
    InvalidArguments(String),
    /// A limit stopped the run; `limit` names it.
    #[error("the run exceeded its {limit} limit: {message}")]
    Limit {
        /// Which limit (`ticks`, `memory`, `stack`, `call stack`, `address space`, `wall time`,
        /// `printed bytes`, `result`, ...).
        limit: &'static str,
        /// Details.
        message: String,
    },
    /// A tool refused a call and the script did not handle it.
    #[error("{text} [{code}]")]
    Refused {
        /// The refusal code.
        code: Code,
        /// The tool's own text.
        text: String,
        /// The tool that refused (`None` from a worker that did not say).
        tool: Option<String>,
        /// For an approval refusal: the approval's id.
        approval_id: Option<String>,
    },
    /// The script raised an error (`fail(...)`, a type error, ...): its author's to fix.
    #[error("the script failed: {0}")]
    Raised(String),
    /// The run could not be carried out (its worker could not start or broke, its tools could
    /// not be listed, it was cancelled): larkgate's, not the script's.
    #[error("the run failed: {0}")]
    Failed(String),
}

impl RunError {
    /// The envelope code a failed run maps to.
    pub fn code(&self) -> Code {
        match self {
            RunError::Script(_) | RunError::InvalidArguments(_) => Code::InvalidArguments,
            RunError::Limit { .. } => Code::LimitExceeded,
            RunError::Refused { code, .. } => *code,
            RunError::Raised(_) => Code::ScriptFailed,
            RunError::Failed(_) => Code::Internal,
        }
    }
}

/// Collects printed lines up to a byte cap.
struct Printed {
    text: RefCell<String>,
    cap: usize,
    overflowed: RefCell<bool>,
}

impl PrintHandler for Printed {
    fn println(&self, line: &str) -> starlark::Result<()> {
        let mut text = self.text.borrow_mut();
        if text.len() + line.len() + 1 > self.cap {
            *self.overflowed.borrow_mut() = true;
            return Err(starlark::Error::new_other(std::io::Error::other(format!(
                "printed output exceeds {} bytes",
                self.cap
            ))));
        }
        text.push_str(line);
        text.push('\n');
        Ok(())
    }
}

/// The globals every script sees (Starlark's, plus `call`, `try_call`, `tools`, `help`).
/// Building them takes a while; a worker builds them before its run arrives.
pub fn globals() -> Globals {
    starlark::environment::GlobalsBuilder::extended_by(&[
        LibraryExtension::StructType,
        LibraryExtension::Json,
        LibraryExtension::Print,
        LibraryExtension::Typing,
    ])
    .with(host_globals)
    .build()
}

/// A run's tools: the host and whether the run is a draft (read-only tools only).
pub struct Tools {
    /// Where calls go.
    pub host: Arc<dyn Host>,
    /// Draft runs may call only tools that declare `readOnlyHint: true`.
    pub draft: bool,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("draft", &self.draft)
            .finish_non_exhaustive()
    }
}

/// A script to run: its `main` called with `arguments`, within `limits`.
#[derive(Clone, Copy, Debug)]
pub struct Script<'a> {
    /// The file name its messages and tracebacks name.
    pub filename: &'a str,
    /// The Starlark source.
    pub source: &'a str,
    /// `main`'s arguments.
    pub arguments: &'a Map,
    /// The run's limits.
    pub limits: &'a ScriptLimits,
}

/// Runs `script` in this process, with `tools` (or none). See the module documentation.
pub fn run_in_process(script: Script<'_>, tools: Option<Tools>) -> RunReport {
    run_with_globals(&globals(), script, tools)
}

/// [`run_in_process`] with globals built beforehand (see [`globals`]).
pub fn run_with_globals(globals: &Globals, script: Script<'_>, tools: Option<Tools>) -> RunReport {
    let limits = script.limits;
    let deadline = Instant::now() + limits.max_wall_time;
    let (ast, bound, state) = match prepare(script, tools, deadline) {
        Ok(prepared) => prepared,
        Err(error) => return RunReport::failed(error),
    };
    let printed = Printed {
        text: RefCell::new(String::new()),
        cap: limits.max_print_bytes,
        overflowed: RefCell::new(false),
    };
    let (outcome, ticks) = Module::with_temp_heap(|module| {
        if let Some(state) = &state {
            bind_tools(&module, state);
        }
        let mut eval = Evaluator::new(&module);
        eval.set_print_handler(&printed);
        eval.set_check_cancelled(Box::new(move || Instant::now() >= deadline));
        if let Some(state) = &state {
            eval.extra = Some(state);
        }
        let configured = eval
            .set_max_tick_count(limits.max_ticks.max(1))
            .and_then(|()| eval.set_max_heap_size(limits.max_memory_bytes.max(1)))
            .and_then(|()| eval.set_max_callstack_size(limits.max_call_stack.max(1)));
        if let Err(error) = configured {
            return (Err(RunError::Failed(error.to_string())), 0);
        }
        let result: starlark::Result<Value> = (|| {
            eval.eval_module(ast, globals)?;
            let main = module
                .get("main")
                .ok_or_else(|| starlark::Error::new_other(std::io::Error::other("no main")))?;
            let heap = module.heap();
            let mut named = Vec::with_capacity(bound.len());
            for (name, value) in &bound {
                let value = to_starlark(value, heap, limits.values).map_err(|e| {
                    starlark::Error::new_other(std::io::Error::other(e.to_string()))
                })?;
                named.push((name.as_str(), value));
            }
            let result = eval.eval_function(main, &[], &named)?;
            from_starlark(result, limits.values)
                .map_err(|e| starlark::Error::new_other(ResultError(e.to_string())))
        })();
        let ticks = eval.get_total_tick_count();
        let outcome = result.map_err(|error| {
            classify(
                &error,
                ticks > limits.max_ticks,
                *printed.overflowed.borrow(),
                Instant::now() >= deadline,
            )
        });
        (outcome, ticks)
    });
    let (tool_calls, paces) = state
        .as_ref()
        .map_or((0, 0), |s| (s.tool_calls.get(), s.paces.get()));
    RunReport {
        outcome,
        printed: printed.text.into_inner(),
        usage: RunUsage {
            ticks,
            tool_calls,
            paces,
            peak_memory_bytes: None,
        },
    }
}

/// Everything a run needs before the interpreter starts: the parsed script, the arguments
/// bound to `main`, and the run's tools.
fn prepare(
    script: Script<'_>,
    tools: Option<Tools>,
    deadline: Instant,
) -> Result<(starlark::syntax::AstModule, Map, Option<RunState>), RunError> {
    let Script {
        filename,
        source,
        arguments,
        limits,
    } = script;
    let ast = parse(filename, source)?;
    let entry = entry_point(&ast)?;
    let bound = entry
        .input
        .bind_map("main", arguments)
        .map_err(|e| RunError::InvalidArguments(e.to_string()))?;
    let state = match tools {
        Some(tools) => {
            let listing = tools.host.tools().map_err(|e| {
                RunError::Failed(format!("the run's tools could not be listed: {e}"))
            })?;
            Some(RunState {
                host: tools.host,
                listing,
                draft: tools.draft,
                values: limits.values,
                max_tool_calls: limits.max_tool_calls,
                deadline,
                tool_calls: Cell::new(0),
                paces: Cell::new(0),
            })
        }
        None => None,
    };
    Ok((ast, bound, state))
}

/// Makes the run's tools reachable: capabilities and platform tools as globals, upstream and
/// script tools in a namespace per alias.
fn bind_tools<'v>(module: &Module<'v>, state: &RunState) {
    use larkgate_caller::Source;
    let heap = module.heap();
    let mut namespaces: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    for tool in &state.listing {
        match (&tool.origin.source, &tool.origin.alias) {
            (Source::Upstream | Source::Script, Some(alias)) => namespaces
                .entry(alias.clone())
                .or_default()
                .push((tool.origin.original_name.clone(), tool.name.clone())),
            _ => {
                if larkgate_binding::valid_identifier(&tool.name) {
                    module.set(
                        &tool.name,
                        heap.alloc(ToolFn {
                            name: tool.name.clone(),
                        }),
                    );
                }
            }
        }
    }
    for (alias, members) in namespaces {
        module.set(
            &alias,
            heap.alloc(Namespace {
                alias: alias.clone(),
                members,
            }),
        );
    }
}

/// A result that could not leave the script.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ResultError(String);

/// Names the limit that stopped a run, or reports the script's own failure. The heap and
/// call-stack cases are recognised by starlark's own messages (pinned by the hostile-script
/// tests).
fn classify(
    error: &starlark::Error,
    ticks_over: bool,
    printed_over: bool,
    past_deadline: bool,
) -> RunError {
    let message = error.to_string();
    if let Some(refused) = error_source::<ToolRefused>(error) {
        return RunError::Refused {
            code: refused.code,
            text: refused.text.clone(),
            tool: Some(refused.tool.clone()),
            approval_id: refused.approval_id.clone(),
        };
    }
    if let Some(limit) = error_source::<HostLimit>(error) {
        return RunError::Limit {
            limit: limit.limit,
            message: limit.message.clone(),
        };
    }
    let limit = |limit: &'static str| RunError::Limit {
        limit,
        message: first_line(&message),
    };
    if printed_over {
        return limit("printed bytes");
    }
    if ticks_over {
        return limit("ticks");
    }
    if message.contains("Heap memory limit") {
        return limit("memory");
    }
    if message.contains("call stack overflow") {
        return limit("call stack");
    }
    if past_deadline || message.contains("Evaluation cancelled") {
        return limit("wall time");
    }
    if let Some(result) = error_source::<ResultError>(error) {
        return RunError::Limit {
            limit: "result",
            message: result.0.clone(),
        };
    }
    RunError::Raised(message)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}
