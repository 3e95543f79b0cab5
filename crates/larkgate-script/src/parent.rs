//! The parent side of a worker run: spawn, feed, answer host calls through the run's
//! [`Caller`], and turn every way a worker can end into a result. See [`crate::worker`] for
//! the threat model.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use larkgate_binding::{InputShape, Map, from_json, map_to_json};
use larkgate_caller::{CallError, Caller, ToolInfo};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::run::{RunError, RunReport, RunUsage, ScriptLimits};
use crate::worker::{
    ADDRESS_SPACE_ENV, CallAnswer, DEFAULT_ADDRESS_SPACE, FromWorker, MAX_FRAME, Start, WORKER_ARG,
};

/// How to start a worker: a program that takes the worker branch on [`WORKER_ARG`].
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The program (normally the running `larkgate` binary itself).
    pub program: PathBuf,
    /// The worker's address-space limit, in bytes.
    pub address_space: u64,
}

impl WorkerCommand {
    /// The running program, re-executed.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            address_space: DEFAULT_ADDRESS_SPACE,
        })
    }

    fn spawn(&self) -> std::io::Result<Child> {
        Command::new(&self.program)
            .arg(WORKER_ARG)
            .env(ADDRESS_SPACE_ENV, self.address_space.to_string())
            .env("MALLOC_ARENA_MAX", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
    }
}

async fn write_frame<T: Serialize>(
    out: &mut (impl AsyncWrite + Unpin),
    message: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    out.write_all(&(body.len() as u32).to_be_bytes()).await?;
    out.write_all(&body).await?;
    out.flush().await
}

/// Why a frame could not be read.
enum FrameError {
    /// The worker's output ended (it exited or died).
    Closed,
    /// A frame over the limit.
    TooLarge(usize),
    /// Not a frame of the protocol.
    Garbled(String),
}

async fn read_frame<T: for<'de> Deserialize<'de>>(
    input: &mut (impl AsyncRead + Unpin),
) -> Result<T, FrameError> {
    let mut length = [0u8; 4];
    input
        .read_exact(&mut length)
        .await
        .map_err(|_| FrameError::Closed)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = vec![0; length];
    input
        .read_exact(&mut body)
        .await
        .map_err(|_| FrameError::Closed)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Garbled(e.to_string()))
}

fn limit(limit: &'static str, message: impl Into<String>) -> RunError {
    RunError::Limit {
        limit,
        message: message.into(),
    }
}

/// Workers started ahead of time, so a run does not wait for a process to start. Each worker
/// serves exactly one run; taking one starts its replacement in the background.
#[derive(Debug)]
pub struct WorkerPool {
    command: WorkerCommand,
    idle: std::sync::Mutex<std::collections::VecDeque<Child>>,
    size: usize,
}

impl WorkerPool {
    /// A pool keeping `size` workers started (on the current tokio runtime).
    pub fn new(command: WorkerCommand, size: usize) -> std::sync::Arc<Self> {
        let pool = std::sync::Arc::new(WorkerPool {
            command,
            idle: std::sync::Mutex::new(std::collections::VecDeque::new()),
            size,
        });
        for _ in 0..size {
            pool.refill();
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Child>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many started workers are waiting.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn refill(&self) {
        if self.lock().len() >= self.size {
            return;
        }
        match self.command.spawn() {
            Ok(child) => self.lock().push_back(child),
            Err(error) => eprintln!("larkgate: a script worker could not start: {error}"),
        }
    }

    /// A started worker, or a new one if none is waiting.
    fn take(&self) -> std::io::Result<Child> {
        let child = self.lock().pop_front();
        match child {
            Some(child) => Ok(child),
            None => self.command.spawn(),
        }
    }

    /// Runs a script in a pre-started worker. See [`run_in_worker`].
    pub async fn run<C: Caller>(
        self: &std::sync::Arc<Self>,
        caller: &C,
        filename: &str,
        source: &str,
        arguments: &Map,
        limits: &ScriptLimits,
        draft: bool,
    ) -> RunReport {
        let child = match self.take() {
            Ok(child) => child,
            Err(e) => return cannot_start(&e),
        };
        let result = drive(child, caller, filename, source, arguments, limits, draft).await;
        // Replace the worker once the run is answered: starting a process while the run is
        // still going would compete with it for the CPU.
        let pool = std::sync::Arc::clone(self);
        tokio::task::spawn_blocking(move || pool.refill());
        result
    }
}

/// Runs a script in a fresh worker process, its host calls going through `caller`.
pub async fn run_in_worker<C: Caller>(
    command: &WorkerCommand,
    caller: &C,
    filename: &str,
    source: &str,
    arguments: &Map,
    limits: &ScriptLimits,
    draft: bool,
) -> RunReport {
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return cannot_start(&e),
    };
    drive(child, caller, filename, source, arguments, limits, draft).await
}

fn cannot_start(error: &std::io::Error) -> RunReport {
    RunReport::failed(RunError::Failed(format!(
        "the worker could not start: {error}"
    )))
}

/// Feeds one worker one run and reads how it ended.
async fn drive<C: Caller>(
    mut child: Child,
    caller: &C,
    filename: &str,
    source: &str,
    arguments: &Map,
    limits: &ScriptLimits,
    draft: bool,
) -> RunReport {
    let failed = RunReport::failed;
    let deadline = tokio::time::Instant::now() + limits.max_wall_time;
    let listing = match caller.tools().await {
        Ok(listing) => listing,
        Err(e) => {
            return failed(RunError::Failed(format!(
                "the run's tools could not be listed: {e}"
            )));
        }
    };
    let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return failed(RunError::Failed("the worker has no pipes".into()));
    };
    let start = Start {
        filename: filename.to_owned(),
        source: source.to_owned(),
        arguments: serde_json::Value::Object(map_to_json(arguments)),
        limits: *limits,
        draft,
        listing: listing.clone(),
    };
    let session = async {
        write_frame(&mut stdin, &start)
            .await
            .map_err(|_| FrameError::Closed)?;
        let mut tool_calls = 0u64;
        loop {
            match read_frame::<FromWorker>(&mut stdout).await? {
                FromWorker::Done(outcome) => return Ok((outcome, tool_calls)),
                FromWorker::Call { name, arguments } => {
                    tool_calls += 1;
                    let answer = if tool_calls > limits.max_tool_calls {
                        CallAnswer::Refused {
                            code: "limit_exceeded".into(),
                            text: format!("more than {} tool calls", limits.max_tool_calls),
                            retry_after_ms: None,
                        }
                    } else {
                        answer(caller, &listing, &name, &arguments, limits).await
                    };
                    write_frame(&mut stdin, &answer)
                        .await
                        .map_err(|_| FrameError::Closed)?;
                }
            }
        }
    };
    let ended = tokio::time::timeout_at(deadline, session).await;
    match ended {
        Err(_elapsed) => {
            let _ = child.kill().await;
            failed(limit(
                "wall time",
                format!(
                    "the run took longer than {:?} and was stopped",
                    limits.max_wall_time
                ),
            ))
        }
        Ok(Ok((outcome, tool_calls))) => {
            let _ = child.wait().await;
            let result = outcome.result.map_err(RunError::from).and_then(|result| {
                from_json(&result, limits.values).map_err(|e| limit("result", e.to_string()))
            });
            RunReport {
                outcome: result,
                printed: outcome.printed,
                usage: RunUsage {
                    // The parent's own count: a worker cannot under-report its calls.
                    tool_calls: tool_calls.max(outcome.usage.tool_calls),
                    ..outcome.usage
                },
            }
        }
        Ok(Err(FrameError::TooLarge(length))) => {
            let _ = child.kill().await;
            failed(limit(
                "pipe frame",
                format!(
                    "the worker sent a frame of {length} bytes, over the {MAX_FRAME}-byte limit"
                ),
            ))
        }
        Ok(Err(FrameError::Garbled(why))) => {
            let _ = child.kill().await;
            failed(RunError::Failed(format!(
                "the worker broke the protocol: {why}"
            )))
        }
        Ok(Err(FrameError::Closed)) => failed(abnormal_exit(&mut child).await),
    }
}

/// Re-binds a worker's call against the tool's shape and makes it.
async fn answer<C: Caller>(
    caller: &C,
    listing: &[ToolInfo],
    name: &str,
    arguments: &serde_json::Value,
    limits: &ScriptLimits,
) -> CallAnswer {
    let refused = |code: &str, text: String| CallAnswer::Refused {
        code: code.to_owned(),
        text,
        retry_after_ms: None,
    };
    let map = match from_json(arguments, limits.values) {
        Ok(larkgate_binding::Value::Map(map)) => map,
        Ok(_) => return refused("invalid_arguments", "arguments must be an object".into()),
        Err(e) => return refused("invalid_arguments", e.to_string()),
    };
    // The worker's binding is never authoritative: bind again here.
    let shape = listing
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.input_shape.clone());
    let map = match shape {
        Some(shape) => match InputShape::new(shape).and_then(|s| s.bind_map(name, &map)) {
            Ok(map) => map,
            Err(e) => return refused("invalid_arguments", e.to_string()),
        },
        None => map,
    };
    match caller.call_tool(name, map).await {
        Ok(result) => CallAnswer::Ok(serde_json::Value::Object(map_to_json(&result))),
        Err(CallError::Refused(r)) => CallAnswer::Refused {
            code: r.code,
            text: r.text,
            retry_after_ms: r.retry_after.map(|d| d.as_millis() as u64),
        },
        Err(CallError::Transport(text)) => refused("internal", text),
    }
}

/// A worker that stopped talking: why, from its exit status.
async fn abnormal_exit(child: &mut Child) -> RunError {
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(status)) => status,
        _ => {
            let _ = child.kill().await;
            return limit("worker", "the worker stopped answering and was killed");
        }
    };
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), status.code()) {
        (Some(signal), _) => limit(
            "worker",
            format!(
                "the worker was killed by signal {signal}{}",
                match signal {
                    6 => " (SIGABRT: an allocation failed, most likely at the address-space limit)",
                    9 => " (SIGKILL)",
                    11 => " (SIGSEGV: most likely a stack overflow)",
                    _ => "",
                }
            ),
        ),
        (None, Some(code)) => limit(
            "worker",
            format!("the worker exited with code {code} before finishing"),
        ),
        (None, None) => limit("worker", "the worker ended without a status"),
    }
}
