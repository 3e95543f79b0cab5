//! The launcher of command-launched upstreams: a small branch of the larkgate binary itself,
//! re-executed between larkgate and the server's program, so that no server process outlives
//! larkgate — even when larkgate is killed with `kill -9` and can clean up nothing.
//!
//! larkgate starts `larkgate __larkgate-upstream-launcher PARENT_PID PROGRAM [ARG]...` in a
//! process group of its own (the launcher leads it), with the environment, working directory
//! and pipes the server is to have. The launcher then:
//!
//! 1. checks that its parent is still `PARENT_PID` (larkgate may have died while it started);
//! 2. starts `PROGRAM` with those arguments as its child, in the same group, on the same pipes
//!    (no shell: the arguments reach the program as they are);
//! 3. watches its parent: when it is no longer `PARENT_PID` (larkgate died, whatever the
//!    signal), it kills the whole group — the program and whatever the program started in the
//!    group — and with it itself;
//! 4. when the program exits, exits with the program's status (a signal's number as 128 + N),
//!    so larkgate reports how the server ended; unless larkgate is gone by then (a server that
//!    exits when its standard input closes ends as larkgate dies, maybe before the watch has
//!    seen it): then it kills the group first, as in 3.
//!
//! larkgate kills the group when it closes the connection, when the server dies, and when it
//! stops. Limit (documented): a process the server starts in a process group or session of its
//! own (`setsid`, a daemonising server) leaves the group, and nothing here reaches it.
//!
//! The watch is a poll of `getppid()` every [`WATCH_INTERVAL`]: the parent-death signal of
//! Linux reaches only the launcher itself, which would then die without killing its group.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use rustix::process::{Pid, Signal, getpgrp, getppid, kill_process_group};

/// The first argument that makes the larkgate binary a launcher.
pub const LAUNCHER_ARG: &str = "__larkgate-upstream-launcher";

/// How often the launcher looks whether larkgate is still its parent.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// The exit code the launcher answers with when it cannot start the program (127 as a shell
/// says "command not found"; 126 for any other failure to execute it).
const NOT_FOUND: u8 = 127;
const NOT_EXECUTABLE: u8 = 126;

/// The launcher's `main`: `args` are those after [`LAUNCHER_ARG`].
pub fn launcher_main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let mut args = args;
    let parent = args
        .next()
        .and_then(|p| p.to_str().and_then(|p| p.parse::<i32>().ok()))
        .and_then(Pid::from_raw);
    let (Some(parent), Some(program)) = (parent, args.next()) else {
        eprintln!("larkgate upstream launcher: usage: {LAUNCHER_ARG} PARENT_PID PROGRAM [ARG]...");
        return ExitCode::from(2);
    };
    if getppid() != Some(parent) {
        // larkgate died before this process got going: start nothing.
        return ExitCode::from(1);
    }
    let mut child = match std::process::Command::new(&program).args(args).spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "larkgate upstream launcher: cannot start {}: {error}",
                program.to_string_lossy()
            );
            return ExitCode::from(if error.kind() == std::io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                NOT_EXECUTABLE
            });
        }
    };
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(WATCH_INTERVAL);
            if getppid() != Some(parent) {
                // larkgate is gone: the server and everything it started in the group go too.
                let _ = kill_process_group(getpgrp(), Signal::KILL);
                std::process::exit(1);
            }
        }
    });
    let waited = child.wait();
    // A server that exits because larkgate died (its standard input closed with larkgate) may
    // end before the watch above sees larkgate gone: what it started in the group goes now.
    if getppid() != Some(parent) {
        let _ = kill_process_group(getpgrp(), Signal::KILL);
        std::process::exit(1);
    }
    match waited {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt as _;
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Err(_) => ExitCode::from(1),
    }
}

/// Kills the process group `leader` leads (a launcher and everything in its group). A group
/// that is already gone is not an error.
pub fn kill_group(leader: u32) {
    if let Some(pid) = i32::try_from(leader).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}
