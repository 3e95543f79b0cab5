//! Running a script **in this process**: for trusted use, tests and benchmarks only.
//!
//! starlark-rust aborts the whole process on some allocations (`[0] * 2000000000`) and some
//! operations ignore cancellation (`'a' * 2000000000`), so untrusted scripts must run in a
//! worker process with an address-space limit and a deadline kill (the worker is not built
//! yet). This mode enforces only what the interpreter itself can: ticks, heap, call stack,
//! printed bytes and the result's size — and it calls no tools. `serve` must never use it.

use std::cell::RefCell;

use larkgate_binding::{Limits, Map, Value, from_starlark, to_starlark};
use starlark::PrintHandler;
use starlark::environment::{Globals, LibraryExtension, Module};
use starlark::eval::Evaluator;

use crate::entry::{ScriptError, entry_point, parse};

/// The limits of one run (defaults from larkgate's limits table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptLimits {
    /// Interpreter ticks (roughly, statements and expressions executed).
    pub max_ticks: u64,
    /// Bytes of Starlark heap.
    pub max_heap_bytes: usize,
    /// Call-stack frames.
    pub max_call_stack: usize,
    /// Bytes printed by `print`.
    pub max_print_bytes: usize,
    /// Limits on the arguments and the result.
    pub values: Limits,
}

impl Default for ScriptLimits {
    fn default() -> Self {
        ScriptLimits {
            max_ticks: 100_000_000,
            max_heap_bytes: 256 * 1024 * 1024,
            max_call_stack: 200,
            max_print_bytes: 1024 * 1024,
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
        /// Which limit (`ticks`, `heap`, `call stack`, `printed bytes`, `result`).
        limit: &'static str,
        /// Details.
        message: String,
    },
    /// The script raised an error (`fail(...)`, a type error, ...).
    #[error("the script failed: {0}")]
    Failed(String),
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

fn globals() -> Globals {
    Globals::extended_by(&[
        LibraryExtension::StructType,
        LibraryExtension::Json,
        LibraryExtension::Print,
        LibraryExtension::Typing,
    ])
}

/// Runs `source`'s `main` with `arguments`, in this process. See the module documentation.
pub fn run_in_process(
    filename: &str,
    source: &str,
    arguments: &Map,
    limits: &ScriptLimits,
) -> Result<RunOutput, RunError> {
    let ast = parse(filename, source)?;
    let entry = entry_point(&ast)?;
    let bound = entry
        .input
        .bind_map("main", arguments)
        .map_err(|e| RunError::InvalidArguments(e.to_string()))?;
    let printed = Printed {
        text: RefCell::new(String::new()),
        cap: limits.max_print_bytes,
        overflowed: RefCell::new(false),
    };
    let globals = globals();
    let outcome = Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.set_print_handler(&printed);
        let configured = eval
            .set_max_tick_count(limits.max_ticks.max(1))
            .and_then(|()| eval.set_max_heap_size(limits.max_heap_bytes.max(1)))
            .and_then(|()| eval.set_max_callstack_size(limits.max_call_stack.max(1)));
        if let Err(error) = configured {
            return Err(RunError::Failed(error.to_string()));
        }
        let result: starlark::Result<Value> = (|| {
            eval.eval_module(ast, &globals)?;
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
        match result {
            Ok(value) => Ok((value, ticks)),
            Err(error) => Err(classify(
                &error,
                ticks > limits.max_ticks,
                *printed.overflowed.borrow(),
            )),
        }
    });
    let (result, ticks) = outcome?;
    Ok(RunOutput {
        result,
        printed: printed.text.into_inner(),
        ticks,
    })
}

/// A result that could not leave the script.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ResultError(String);

/// Names the limit that stopped a run, or reports the script's own failure. The heap and
/// call-stack cases are recognised by starlark's own messages (pinned by the hostile-script
/// tests).
fn classify(error: &starlark::Error, ticks_over: bool, printed_over: bool) -> RunError {
    let message = error.to_string();
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
        return limit("heap");
    }
    if message.contains("call stack overflow") {
        return limit("call stack");
    }
    if let Some(result) = error_source::<ResultError>(error) {
        return RunError::Limit {
            limit: "result",
            message: result.0.clone(),
        };
    }
    RunError::Failed(message)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

/// The `E` behind a starlark error, if that is what it wraps.
fn error_source<E: std::error::Error + Send + Sync + 'static>(
    error: &starlark::Error,
) -> Option<&E> {
    match error.kind() {
        starlark::ErrorKind::Other(inner) => inner.downcast_ref::<E>(),
        _ => None,
    }
}
