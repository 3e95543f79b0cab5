//! Starting the official-SDK peers the tests talk to.

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

/// A running peer server, killed when dropped.
pub(crate) struct Peer {
    child: Child,
    /// Its MCP endpoint.
    pub(crate) url: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tests/peers/weather_server.py` with `args` (`--json`, `--stateless`).
pub(crate) fn weather(args: &[&str]) -> Peer {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/weather_server.py");
    let mut child = Command::new(python())
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        // The SDK logs every session; LARKGATE_TEST_PEER_LOGS=1 shows them.
        .stderr(if std::env::var_os("LARKGATE_TEST_PEER_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("the Python peer starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the peer printed {line:?} instead of its port"));
    Peer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}
