//! Command-launched upstreams: an MCP server started as a program and spoken to over its
//! standard input and output (the MCP stdio transport), through the [`crate::launcher`].
//!
//! # Threat model
//!
//! The program is the operator's choice, but what it writes is untrusted, as an HTTP server's
//! answers are.
//! - **No shell, no inherited secrets**: the program and its arguments are passed as they
//!   are; its environment is empty but for the variables the operator lets through by name
//!   (`inherit_env`) and the ones set for it (`env`, with `${VAR}` expansion; values never
//!   logged).
//! - **Bounded output**: a line on its standard output longer than the response-bytes limit
//!   ends the connection (the call is refused `limit_exceeded`, the server is restarted);
//!   its standard error goes to larkgate's log, each line cut at [`MAX_STDERR_LINE`] bytes, at
//!   most [`STDERR_LINES_PER_SECOND`] lines a second (the rest counted, never buffered).
//!   Garbage on its standard output is skipped by the transport; a server that never answers
//!   `initialize` is given up on after the start timeout.
//! - **No process left behind**: the server runs in a process group led by the launcher,
//!   which kills the group when larkgate dies; larkgate kills it when the connection closes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncRead, ReadBuf};

use crate::launcher::{LAUNCHER_ARG, kill_group};

/// The longest line of a server's standard error that is logged; the rest is cut.
pub const MAX_STDERR_LINE: usize = 2048;
/// Lines of a server's standard error logged per second; the rest are counted.
pub const STDERR_LINES_PER_SECOND: u32 = 20;

/// What to start.
#[derive(Clone, Debug)]
pub struct CommandTarget {
    /// The program (a path, or a name looked up in the `PATH` it is given).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment.
    pub env: BTreeMap<String, String>,
    /// Its working directory (larkgate's own when absent).
    pub cwd: Option<PathBuf>,
    /// The upstream's alias, for the log.
    pub alias: String,
}

/// Where the launcher is: the larkgate binary, re-executed with [`LAUNCHER_ARG`].
#[derive(Clone, Debug)]
pub struct Launcher {
    /// The executable that handles [`LAUNCHER_ARG`] first thing in `main`.
    pub executable: PathBuf,
    /// Arguments before [`LAUNCHER_ARG`] (a test harness's own, to reach its launcher).
    pub prefix: Vec<String>,
}

impl Launcher {
    /// This process's own executable (the larkgate binary).
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Launcher {
            executable: std::env::current_exe()?,
            prefix: Vec::new(),
        })
    }
}

/// A started server: its pipes, and the process group that dies with this value.
#[derive(Debug)]
pub struct Started {
    /// Its standard output, capped per line.
    pub stdout: CappedLines<tokio::process::ChildStdout>,
    /// Its standard input.
    pub stdin: tokio::process::ChildStdin,
    /// The process, killed (with its group) on drop.
    pub process: ServerProcess,
}

/// A running server's process group.
#[derive(Debug)]
pub struct ServerProcess {
    child: Mutex<tokio::process::Child>,
    leader: Option<u32>,
    last_stderr: Arc<Mutex<Option<String>>>,
}

impl ServerProcess {
    /// How the process ended, if it has, with the last line it wrote to standard error.
    pub fn ended(&self) -> Option<String> {
        let status = self
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_wait()
            .ok()
            .flatten()?;
        Some(self.describe(status))
    }

    fn describe(&self, status: std::process::ExitStatus) -> String {
        let how = match status.code() {
            Some(127) => "the program was not found (exit status 127)".to_owned(),
            Some(code) => format!("the process exited with status {code}"),
            None => "the process was killed by a signal".to_owned(),
        };
        match self
            .last_stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(line) => format!("{how}; its last line on stderr: {line}"),
            None => how,
        }
    }

    /// Kills the group now.
    pub fn kill(&self) {
        if let Some(leader) = self.leader {
            kill_group(leader);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        // Reap the launcher, so it leaves no zombie.
        let _ = self
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_wait();
    }
}

/// Starts `target` through `launcher`.
pub fn start(
    launcher: &Launcher,
    target: &CommandTarget,
    max_line: usize,
    overflowed: Arc<AtomicBool>,
) -> std::io::Result<Started> {
    let mut command = tokio::process::Command::new(&launcher.executable);
    command
        .args(&launcher.prefix)
        .arg(LAUNCHER_ARG)
        .arg(std::process::id().to_string())
        .arg(&target.program)
        .args(&target.args)
        .env_clear()
        .envs(&target.env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &target.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn()?;
    let leader = child.id();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stdin = child.stdin.take().expect("stdin is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let last_stderr = Arc::new(Mutex::new(None));
    tokio::spawn(pump_stderr(
        stderr,
        target.alias.clone(),
        Arc::clone(&last_stderr),
    ));
    Ok(Started {
        stdout: CappedLines::new(stdout, max_line, overflowed),
        stdin,
        process: ServerProcess {
            child: Mutex::new(child),
            leader,
            last_stderr,
        },
    })
}

/// Logs a server's standard error line by line, bounded (see the module docs), keeping the
/// last line for the cause of a failure.
async fn pump_stderr(
    stderr: tokio::process::ChildStderr,
    alias: String,
    last: Arc<Mutex<Option<String>>>,
) {
    let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, stderr);
    let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Says how many lines were dropped, once a second while there are any, until the
    // server's stderr closes.
    let reporter = {
        let dropped = Arc::clone(&dropped);
        let alias = alias.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let count = dropped.swap(0, Ordering::SeqCst);
                if count > 0 {
                    tracing::warn!(alias = %alias, dropped = count, "an upstream wrote more to stderr than is logged; lines were dropped");
                }
            }
        })
    };
    let mut window = Instant::now();
    let mut logged = 0u32;
    loop {
        let line = match read_bounded_line(&mut reader, MAX_STDERR_LINE).await {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => break,
        };
        let line = printable(&line);
        if line.is_empty() {
            continue;
        }
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(line.clone());
        if window.elapsed() >= Duration::from_secs(1) {
            window = Instant::now();
            logged = 0;
        }
        if logged < STDERR_LINES_PER_SECOND {
            logged += 1;
            tracing::info!(target: "larkgate_upstream::stderr", alias = %alias, "{line}");
        } else {
            dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
    // The last count, then no more reports.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    reporter.abort();
}

/// One line of at most `max` bytes (the rest of a longer line is read and thrown away);
/// `None` at the end.
async fn read_bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut any = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(any.then_some(line));
        }
        any = true;
        let (chunk, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(end) => (&buffer[..end], Some(end + 1)),
            None => (buffer, None),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(buffer.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(line));
        }
    }
}

/// `bytes` as one line of text without control characters, so a server cannot forge log
/// lines or send escape codes to an operator's terminal.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim_end()
        .to_owned()
}

/// A reader that fails once a line (bytes between two `\n`) grows past `max` bytes, marking
/// `overflowed`: a server cannot make larkgate hold more than one response's worth of a line.
#[derive(Debug)]
pub struct CappedLines<R> {
    inner: R,
    max: usize,
    current: usize,
    overflowed: Arc<AtomicBool>,
}

impl<R> CappedLines<R> {
    /// Caps `inner`'s lines at `max` bytes.
    pub fn new(inner: R, max: usize, overflowed: Arc<AtomicBool>) -> Self {
        CappedLines {
            inner,
            max,
            current: 0,
            overflowed,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let after = buf.filled().len();
                for at in before..after {
                    let byte = buf.filled()[at];
                    if byte == b'\n' {
                        this.current = 0;
                    } else {
                        this.current += 1;
                        if this.current > this.max {
                            this.overflowed.store(true, Ordering::SeqCst);
                            buf.set_filled(before);
                            return Poll::Ready(Err(std::io::Error::other(format!(
                                "the upstream wrote a message longer than the response-bytes \
                                 limit of {} bytes",
                                this.max
                            ))));
                        }
                    }
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    #[tokio::test]
    async fn a_line_longer_than_the_cap_fails_the_read_and_says_so() {
        let overflowed = Arc::new(AtomicBool::new(false));
        let data = format!("{}\n{}\n", "a".repeat(10), "b".repeat(11));
        let mut capped = CappedLines::new(data.as_bytes(), 10, Arc::clone(&overflowed));
        let mut out = Vec::new();
        let error = capped.read_to_end(&mut out).await.unwrap_err();
        assert!(error.to_string().contains("longer than"), "{error}");
        assert!(overflowed.load(Ordering::SeqCst));
        // Lines at the cap pass.
        let overflowed = Arc::new(AtomicBool::new(false));
        let data = format!("{}\n{}\n", "a".repeat(10), "b".repeat(10));
        let mut capped = CappedLines::new(data.as_bytes(), 10, Arc::clone(&overflowed));
        let mut out = Vec::new();
        capped.read_to_end(&mut out).await.unwrap();
        assert_eq!(out.len(), 22);
        assert!(!overflowed.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn stderr_lines_are_cut_and_cleaned_of_control_characters() {
        let long = format!("{}\nshort\x1b[31m red\r\n\nlast", "x".repeat(5000));
        let mut reader = tokio::io::BufReader::with_capacity(7, long.as_bytes());
        let first = read_bounded_line(&mut reader, 100).await.unwrap().unwrap();
        assert_eq!(first.len(), 100);
        let second = read_bounded_line(&mut reader, 100).await.unwrap().unwrap();
        assert_eq!(printable(&second), "short [31m red");
        let empty = read_bounded_line(&mut reader, 100).await.unwrap().unwrap();
        assert!(empty.is_empty());
        assert_eq!(
            read_bounded_line(&mut reader, 100).await.unwrap().unwrap(),
            b"last"
        );
        assert!(read_bounded_line(&mut reader, 100).await.unwrap().is_none());
    }
}
