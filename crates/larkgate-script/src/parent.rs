//! The parent side of a worker run: spawn, feed, answer host calls through the run's
//! [`Caller`], and turn every way a worker can end into a result. See [`crate::worker`] for
//! the threat model.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use larkgate_binding::{from_json, map_to_json};
use larkgate_caller::{CallError, Caller, Code, Target};
use tokio::process::{Child, Command};
use tracing::Instrument;

use crate::pipe::{DeadlinePipe, write_frame};
pub use crate::pipe::{FrameError, read_frame};
use crate::run::{RunError, RunReport, RunUsage, Script, ScriptLimits};
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

    fn spawn(&self) -> std::io::Result<Worker> {
        if live().stopped {
            return Err(std::io::Error::other("larkgate is stopping"));
        }
        let child = Command::new(&self.program)
            // Its own process group: a terminal's Ctrl-C (sent to the foreground group) reaches
            // larkgate, which ends runs itself (`serve` gives them its grace period first),
            // not every worker at once in the middle of its run.
            .process_group(0)
            .arg(WORKER_ARG)
            .env(ADDRESS_SPACE_ENV, self.address_space.to_string())
            .env("MALLOC_ARENA_MAX", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Where a dying worker names its cause (`crate::memory`); read once it has died.
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let registered = child.id().map(Registered::new);
        Ok(Worker { child, registered })
    }
}

/// Every worker process this process started and still holds, by pid: what [`kill_all`]
/// kills. A pid leaves the set when its [`Worker`] is dropped, after the run reaped it (or
/// `kill_on_drop` killed it), so a recycled pid is never signalled. Once [`kill_all`] has run
/// (`stopped`), no worker starts, and one whose start was under way is killed as it registers:
/// a shutdown that lands between a worker's start and its registration leaves none running.
struct Live {
    pids: std::collections::BTreeSet<u32>,
    stopped: bool,
}

static LIVE: std::sync::Mutex<Live> = std::sync::Mutex::new(Live {
    pids: std::collections::BTreeSet::new(),
    stopped: false,
});

fn live() -> std::sync::MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn kill(pid: u32) -> bool {
    use rustix::process::{Pid, Signal, kill_process};
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|pid| kill_process(pid, Signal::KILL).is_ok())
}

/// A pid's entry in [`LIVE`], removed when dropped.
#[derive(Debug)]
struct Registered(u32);

impl Registered {
    fn new(pid: u32) -> Self {
        let mut live = live();
        if live.stopped {
            kill(pid);
        }
        live.pids.insert(pid);
        Registered(pid)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        live().pids.remove(&self.0);
    }
}

/// A started worker process.
#[derive(Debug)]
struct Worker {
    child: Child,
    registered: Option<Registered>,
}

/// Kills every worker this process has started and not yet reaped — idle ones and those in
/// the middle of a run (whose runs then end as failed) — for a shutdown that cannot wait for
/// them, and keeps any more from starting. Returns how many were signalled.
pub fn kill_all() -> usize {
    let mut live = live();
    live.stopped = true;
    live.pids.iter().filter(|&&pid| kill(pid)).count()
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
    idle: std::sync::Mutex<std::collections::VecDeque<Worker>>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Worker>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many started workers are waiting.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    /// Starts a worker if the pool is below its size. Refills run concurrently (one after
    /// each run), and starting a process takes a while: the size is checked again when the new
    /// worker is added, and a worker that would overfill the pool is dropped (killed) instead.
    fn refill(&self) {
        // After `kill_all`, nothing starts: the process is stopping.
        if live().stopped || self.lock().len() >= self.size {
            return;
        }
        match self.command.spawn() {
            Ok(worker) => {
                let mut idle = self.lock();
                if idle.len() < self.size {
                    idle.push_back(worker);
                }
            }
            Err(error) => tracing::error!(%error, "a script worker could not start"),
        }
    }

    /// A started worker that is still alive, or a new one if none is waiting. An idle worker
    /// can die while it waits (the kernel's OOM killer, a stray signal): it is reaped and
    /// passed over, so a run never starts in a dead worker.
    fn take(&self) -> std::io::Result<Worker> {
        loop {
            let waiting = self.lock().pop_front();
            let Some(mut worker) = waiting else {
                return self.command.spawn();
            };
            match worker.child.try_wait() {
                Ok(None) => return Ok(worker),
                Ok(Some(status)) => {
                    tracing::warn!(%status, "an idle script worker had died; starting the run in another");
                }
                Err(error) => {
                    tracing::warn!(%error, "an idle script worker could not be checked; passing it over");
                }
            }
        }
    }

    /// Runs a script in a pre-started worker. See [`run_in_worker`].
    pub async fn run<C: Caller>(
        self: &std::sync::Arc<Self>,
        caller: &C,
        script: Script<'_>,
        draft: bool,
    ) -> RunReport {
        Workers::Pool(std::sync::Arc::clone(self))
            .run(caller, script, draft)
            .await
    }
}

/// Where runs get their worker processes.
#[derive(Debug)]
pub enum Workers {
    /// Pre-started workers (`serve`, `stdio`): a run does not wait for a process to start.
    Pool(std::sync::Arc<WorkerPool>),
    /// A fresh worker per run (one-shot commands, which would waste a pool).
    Fresh(WorkerCommand),
}

impl Workers {
    /// Runs a script in a worker from here, its host calls going through `caller`; `draft`
    /// says the run is a draft's (see [`run_in_worker`]).
    pub async fn run<C: Caller>(&self, caller: &C, script: Script<'_>, draft: bool) -> RunReport {
        let worker = match self {
            Workers::Pool(pool) => pool.take(),
            Workers::Fresh(command) => command.spawn(),
        };
        let worker = match worker {
            Ok(worker) => worker,
            Err(e) => return cannot_start(&e),
        };
        let report = drive(worker, caller, script, draft).await;
        if let Workers::Pool(pool) = self {
            // Replace the worker once the run is answered: starting a process while the run
            // is still going would compete with it for the CPU.
            let pool = std::sync::Arc::clone(pool);
            tokio::task::spawn_blocking(move || pool.refill());
        }
        report
    }
}

/// Runs a script in a fresh worker process, its host calls going through `caller`.
pub async fn run_in_worker<C: Caller>(
    command: &WorkerCommand,
    caller: &C,
    script: Script<'_>,
    draft: bool,
) -> RunReport {
    Workers::Fresh(command.clone())
        .run(caller, script, draft)
        .await
}

fn cannot_start(error: &std::io::Error) -> RunReport {
    RunReport::failed(RunError::Failed(format!(
        "the worker could not start: {error}"
    )))
}

/// Feeds one worker one run and reads how it ended.
async fn drive<C: Caller>(
    worker: Worker,
    caller: &C,
    script: Script<'_>,
    draft: bool,
) -> RunReport {
    let limits = script.limits;
    let failed = RunReport::failed;
    let handle = tokio::runtime::Handle::current();
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return failed(RunError::Failed(
            "worker runs need a multi-thread tokio runtime (the run's thread blocks on the \
             worker's pipe while the session's tasks run on the others)"
                .into(),
        ));
    }
    let deadline = std::time::Instant::now() + limits.max_wall_time;
    let listing = match caller.tools().await {
        Ok(listing) => listing,
        Err(e) => {
            return failed(RunError::Failed(format!(
                "the run's tools could not be listed: {e}"
            )));
        }
    };
    // Dropped in reverse order: the child (reaped or killed) before its registration.
    let _registered = worker.registered;
    let mut child = worker.child;
    let pipes = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => stdin
            .into_owned_fd()
            .and_then(|fd| DeadlinePipe::new(fd, deadline))
            .and_then(|stdin| {
                let stdout = DeadlinePipe::new(stdout.into_owned_fd()?, deadline)?;
                Ok((stdin, stdout))
            }),
        _ => Err(std::io::Error::other("the worker has no pipes")),
    };
    let (mut stdin, stdout) = match pipes {
        Ok(pipes) => pipes,
        Err(e) => return failed(RunError::Failed(format!("the worker's pipes: {e}"))),
    };
    // One read usually brings a whole frame, length and body.
    let mut stdout = std::io::BufReader::new(stdout);
    let start = Start {
        filename: script.filename.to_owned(),
        source: script.source.to_owned(),
        arguments: serde_json::Value::Object(map_to_json(script.arguments)),
        limits: *limits,
        draft,
        listing: listing.clone(),
    };
    // This thread blocks on the pipe for the whole conversation (see `crate::pipe`); the
    // runtime moves its other tasks elsewhere, and each call runs on the runtime.
    let ended = tokio::task::block_in_place(|| {
        let mut run_deadline = std::pin::pin!(tokio::time::sleep_until(
            tokio::time::Instant::from_std(deadline)
        ));
        write_frame(&mut stdin, &start)?;
        let mut tool_calls = 0u64;
        loop {
            match read_frame::<FromWorker>(&mut stdout)? {
                FromWorker::Done(outcome) => return Ok((outcome, tool_calls)),
                FromWorker::Call {
                    target,
                    name,
                    arguments,
                } => {
                    tool_calls += 1;
                    let answer = if tool_calls > limits.max_tool_calls {
                        CallAnswer::Refused {
                            code: Code::LimitExceeded,
                            text: format!("more than {} tool calls", limits.max_tool_calls),
                            retry_after_ms: None,
                            approval_id: None,
                        }
                    } else {
                        // A slow tool is bounded by the run's deadline like the worker is.
                        // One timer for the whole run: registering one per call would wake
                        // the runtime's timer driver every time.
                        let call = answer(caller, target, &name, arguments, limits);
                        handle
                            .block_on(async {
                                tokio::select! {
                                    answer = call => Some(answer),
                                    () = &mut run_deadline => None,
                                }
                            })
                            .ok_or(FrameError::Elapsed)?
                    };
                    match write_frame(&mut stdin, &answer) {
                        // An answer the worker could not read is refused instead.
                        Err(FrameError::TooLarge(length)) => write_frame(
                            &mut stdin,
                            &CallAnswer::Refused {
                                code: Code::LimitExceeded,
                                text: format!(
                                    "the tool's answer is {length} bytes as a pipe frame, over \
                                     the {MAX_FRAME}-byte limit"
                                ),
                                retry_after_ms: None,
                                approval_id: None,
                            },
                        )?,
                        other => other?,
                    }
                }
            }
        }
    });
    match ended {
        Err(FrameError::Elapsed) => {
            let _ = child.kill().await;
            failed(limit(
                "wall time",
                format!(
                    "the run took longer than {:?} and was stopped",
                    limits.max_wall_time
                ),
            ))
        }
        Ok((outcome, tool_calls)) => {
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
        Err(FrameError::TooLarge(length)) => {
            let _ = child.kill().await;
            failed(limit(
                "pipe frame",
                format!(
                    "the worker sent a frame of {length} bytes, over the {MAX_FRAME}-byte limit"
                ),
            ))
        }
        Err(FrameError::Garbled(why)) => {
            let _ = child.kill().await;
            failed(RunError::Failed(format!(
                "the worker broke the protocol: {why}"
            )))
        }
        Err(FrameError::Closed) => failed(abnormal_exit(&mut child).await),
    }
}

/// The most of a dead worker's stderr the parent reads: its report is the last line, and a
/// worker can write no more than a pipe holds (its stderr does not block).
const LAST_WORDS: usize = 64 * 1024;

/// Makes a worker's host call through `caller` and answers it in the worker's terms.
async fn answer<C: Caller>(
    caller: &C,
    target: Target,
    name: &str,
    arguments: serde_json::Value,
    limits: &ScriptLimits,
) -> CallAnswer {
    let refused = |code: Code, text: String| CallAnswer::Refused {
        code,
        text,
        retry_after_ms: None,
        approval_id: None,
    };
    // No conversion here: the arguments go on as the JSON the worker sent (conversion 1 of 2,
    // in the worker), and the pipeline converts them (2 of 2) and binds them, with authority.
    // A caller that takes values converts them within the run's value limits.
    let serde_json::Value::Object(arguments) = arguments else {
        return refused(Code::InvalidArguments, "arguments must be an object".into());
    };
    let span = tracing::info_span!(
        "script.host_call",
        otel.name = format!("host call {name}"),
        gen_ai.tool.name = name,
    );
    match caller
        .request_json(target, name, arguments, limits.values)
        .instrument(span)
        .await
    {
        Ok(result) => CallAnswer::Ok(serde_json::Value::Object(map_to_json(&result))),
        Err(CallError::Refused(r)) => CallAnswer::Refused {
            code: r.code,
            text: r.text,
            retry_after_ms: r.retry_after.map(|d| d.as_millis() as u64),
            approval_id: r.approval_id,
        },
        Err(CallError::Transport(text)) => refused(Code::Internal, text),
    }
}

/// A worker that stopped talking: why, from its exit status and what it wrote on stderr.
async fn abnormal_exit(child: &mut Child) -> RunError {
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(status)) => status,
        _ => {
            let _ = child.kill().await;
            return limit("worker", "the worker stopped answering and was killed");
        }
    };
    let mut last_words = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        // The worker is dead, so its end of the pipe is closed: this reads what the pipe
        // holds, then the end. A descendant it left holding the pipe cannot stall it.
        let mut stderr = stderr.take(LAST_WORDS as u64);
        let read = stderr.read_to_end(&mut last_words);
        let _ = tokio::time::timeout(Duration::from_secs(1), read).await;
    }
    use std::os::unix::process::ExitStatusExt;
    let error = death_cause(status.signal(), status.code(), &last_words);
    if let RunError::Limit {
        limit: "worker", ..
    } = &error
    {
        let text = String::from_utf8_lossy(&last_words);
        tracing::warn!(%status, stderr = %text.trim(), "a script worker died without naming a limit");
    }
    error
}

/// Why a worker died, from its signal or exit code and its last words (its stderr): the
/// limit it named, or, when it named none, exactly how it ended. A report counts only with
/// the death it announces: the worker's allocator aborts right after reporting a refusal, and
/// Rust's runtime aborts right after reporting a native stack overflow, so both end in
/// `SIGABRT`; a report followed by any other death does not explain it.
pub fn death_cause(signal: Option<i32>, code: Option<i32>, last_words: &[u8]) -> RunError {
    const SIGABRT: i32 = 6;
    let text = String::from_utf8_lossy(last_words);
    let report = text.lines().rev().find_map(|line| {
        let rest = line.strip_prefix(crate::memory::REPORT)?;
        let (name, message) = rest.split_once(": ")?;
        Some((name, message))
    });
    if signal == Some(SIGABRT) {
        // Rust's runtime reports a native stack overflow in these words, then aborts.
        if text.contains("has overflowed its stack") {
            return limit(
                "stack",
                "the run overflowed the worker's native stack: a value nested too deeply to \
                 print, compare or convert",
            );
        }
        match report {
            Some(("memory", message)) => return limit("memory", message.to_owned()),
            Some(("address space", message)) => {
                return limit("address space", message.to_owned());
            }
            _ => {}
        }
    }
    match (signal, code) {
        (Some(signal), _) => limit(
            "worker",
            format!(
                "the worker was killed by signal {signal}{} and named no limit",
                match signal {
                    6 => " (SIGABRT)",
                    9 => " (SIGKILL, not sent by larkgate for this run)",
                    11 => " (SIGSEGV)",
                    _ => "",
                }
            ),
        ),
        // Rust's exit code for a panic that reached `main`.
        (None, Some(101)) => limit(
            "worker",
            "the worker's script engine failed unexpectedly (a panic); larkgate's log has its \
             message",
        ),
        (None, Some(code)) => {
            // The worker's own reason for giving up before the run (its lines start with
            // `larkgate worker: `), never whatever else it wrote.
            let reason = text
                .lines()
                .rev()
                .find_map(|line| line.strip_prefix("larkgate worker: "))
                .map(|reason| format!(": {reason}"))
                .unwrap_or_default();
            limit(
                "worker",
                format!("the worker exited with code {code} before finishing{reason}"),
            )
        }
        (None, None) => limit("worker", "the worker ended without a status"),
    }
}
