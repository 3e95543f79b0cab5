//! Tests of the `larkgate` command, run as a real process on a real data directory.

mod anchors;
mod audit;
mod backup;
mod capabilities;
mod check;
mod command_upstreams;
mod conformance;
mod console;
mod content;
mod conversation;
mod docs;
mod edge;
mod logs;
mod memory;
mod packaging;
mod postgres;
mod principals_and_approvals;
mod rate_limits;
mod reload;
mod replicas;
mod resources;
mod rules;
mod scripts;
mod sdk_clients;
mod serve;
mod serve_state;
mod servers;
mod sign_in;
mod stdio;
mod tokens;
mod traces;
mod upstream_changes;
mod upstream_oauth;
mod upstreams;
mod walkthrough;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Python with the official MCP SDK: `LARKGATE_TEST_PYTHON`, else what `scripts/test`
/// installed into `.cache/py`.
pub(crate) fn python() -> PathBuf {
    let python = std::env::var_os("LARKGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/py/bin/python"));
    assert!(
        python.exists(),
        "run the tests with scripts/test (it installs the Python SDK)"
    );
    python
}

/// A proxy named in an environment's proxy variables, which no request of larkgate's may
/// reach: it counts the connections made to it and closes each at once.
pub(crate) struct Proxy {
    url: String,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Proxy {
    pub(crate) fn start() -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        Proxy { url, connections }
    }

    /// Every proxy variable HTTP client libraries read, naming this proxy.
    pub(crate) fn env(&self) -> Vec<(&'static str, &str)> {
        [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ]
        .into_iter()
        .map(|name| (name, self.url.as_str()))
        .collect()
    }

    /// How many connections reached it.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Where a test writes the configuration of `larkgate` run in `dir`: the default data
/// directory's `larkgate.toml` (created with the directory).
pub(crate) fn config_path(dir: &Path) -> PathBuf {
    let data = dir.join("larkgate-data");
    std::fs::create_dir_all(&data).unwrap();
    data.join("larkgate.toml")
}

/// A PostgreSQL schema of its own on the test server (dropped with the guard), and the
/// `[store]` section that points larkgate at it, to append to a test's configuration.
pub(crate) fn postgres_store() -> (larkgate_store::postgres::testing::TestSchema, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schema = runtime.block_on(larkgate_store::postgres::testing::TestSchema::create());
    let section = format!(
        "\n[store]\nurl = {:?}\nschema = {:?}\n",
        larkgate_store::postgres::testing::url(),
        schema.name()
    );
    (schema, section)
}

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
