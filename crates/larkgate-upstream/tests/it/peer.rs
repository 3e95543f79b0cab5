//! Starting the official-SDK peers the tests talk to.
//!
//! A test that only reads from the weather peer (lists, calls that change nothing it asserts
//! on) takes [`shared_weather`]: one peer per response mode for the whole run, instead of a
//! Python interpreter started for every test. A test that changes the peer (`grow` adds a
//! tool), counts what it remembers (`cancelled`) or times its answers takes [`weather`], a
//! peer of its own.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The Python interpreter `scripts/test` set up (with the `mcp` package).
pub(crate) fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("LARKGATE_TEST_PYTHON") {
        return path.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(".cache/py/bin/python");
    assert!(
        path.exists(),
        "no Python with the MCP SDK at {}: run the tests with scripts/test, which installs it",
        path.display()
    );
    path
}

/// A running peer server: killed when dropped, unless it is shared.
pub(crate) struct Peer {
    /// The peer's process when this test owns it.
    child: Option<Child>,
    /// Its MCP endpoint.
    pub(crate) url: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `tests/peers/weather_server.py` with `args` (`--json`, `--stateless`): a peer of
/// this test's own.
pub(crate) fn weather(args: &[&str]) -> Peer {
    let (child, port) = spawn_weather(args, None);
    Peer {
        child: Some(child),
        url: url(port),
    }
}

/// [`weather`] on `port` (a peer started again where an earlier one listened).
pub(crate) fn weather_on(port: u16) -> Peer {
    let port = port.to_string();
    weather(&["--port", &port])
}

/// The weather peer with `args` that every test of this run reading from it shares.
///
/// Under cargo-nextest every test is a process of its own, so the peer outlives the test that
/// started it: it lives in its own process group (a test's end or timeout does not reach it),
/// the first test to want it starts it under a file lock and leaves its port beside the lock
/// (in a folder of this run's, `NEXTEST_RUN_ID`), and it exits once the run's runner, the test
/// process's parent, has gone. Under plain `cargo test` (one process for all the tests) it is
/// started once and exits with the test process.
pub(crate) fn shared_weather(args: &[&str]) -> Peer {
    let port = match std::env::var("NEXTEST_RUN_ID") {
        Ok(run) => shared_across_processes(&run, args),
        Err(_) => shared_within_process(args),
    };
    Peer {
        child: None,
        url: url(port),
    }
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

/// The name of the weather peer with `args` among the shared ones.
fn mode(args: &[&str]) -> String {
    let mut mode = String::from("weather");
    for arg in args {
        mode.push_str(arg);
    }
    mode
}

fn shared_within_process(args: &[&str]) -> u16 {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static PEERS: OnceLock<Mutex<HashMap<String, u16>>> = OnceLock::new();
    let mut peers = PEERS.get_or_init(Default::default).lock().unwrap();
    *peers.entry(mode(args)).or_insert_with(|| {
        // Never killed from here: the peer exits when this process has.
        let (child, port) = spawn_weather(args, Some(std::process::id()));
        std::mem::forget(child);
        port
    })
}

fn shared_across_processes(run: &str, args: &[&str]) -> u16 {
    let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("shared-peers")
        .join(run);
    std::fs::create_dir_all(&folder).unwrap();
    let mode = mode(args);
    let lock = std::fs::File::create(folder.join(format!("{mode}.lock"))).unwrap();
    // Held until this function returns: one test starts the peer, the others wait for its port.
    lock.lock().unwrap();
    let port_file = folder.join(format!("{mode}.port"));
    if let Some(port) = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|text| text.trim().parse::<u16>().ok())
    {
        // Unless it died, in which case this test starts another.
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let runner = std::os::unix::process::parent_id();
    let (child, port) = spawn_weather(args, Some(runner));
    // The peer is the run's now; dropping the handle neither kills nor waits for it.
    drop(child);
    std::fs::write(&port_file, port.to_string()).unwrap();
    port
}

/// Starts the weather peer, exiting with the process `owner` when there is one, and answers it
/// and the port it listens on (it listens before it prints the port).
fn spawn_weather(args: &[&str], owner: Option<u32>) -> (Child, u16) {
    use std::os::unix::process::CommandExt as _;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/weather_server.py");
    let mut command = Command::new(python());
    command
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // The SDK logs every session; LARKGATE_TEST_PEER_LOGS=1 shows those of a test's own peer.
    // A shared peer's never reach a test's output, which a runner would wait on.
    command.stderr(
        if owner.is_none() && std::env::var_os("LARKGATE_TEST_PEER_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        },
    );
    if let Some(owner) = owner {
        command
            .arg("--exit-with")
            .arg(owner.to_string())
            .process_group(0);
    }
    let mut child = command.spawn().expect("the Python peer starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the peer printed {line:?} instead of its port"));
    (child, port)
}
