//! Tests of the `larkgate` command, run as a real process on a real data directory.

mod audit;
mod capabilities;
mod check;
mod principals_and_approvals;
mod scripts;
mod sdk_clients;
mod serve;
mod serve_state;
mod stdio;
mod tokens;
mod upstreams;
mod walkthrough;

use std::path::Path;
use std::process::{Command, Output};

/// Runs `larkgate` in `dir` (its working directory, so `./larkgate-data` lands there).
pub(crate) fn larkgate_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("larkgate runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs a command that must succeed; returns its stdout.
pub(crate) fn ok(dir: &Path, args: &[&str]) -> String {
    let output = larkgate_in(dir, args);
    assert!(
        output.status.success(),
        "larkgate {args:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

/// Runs a command that must fail; returns its stderr.
pub(crate) fn fails(dir: &Path, args: &[&str]) -> String {
    let output = larkgate_in(dir, args);
    assert!(
        !output.status.success(),
        "larkgate {args:?} should fail: {}",
        stdout(&output)
    );
    stderr(&output)
}
