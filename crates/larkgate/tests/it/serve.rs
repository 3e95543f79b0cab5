//! `larkgate serve` as a real process on 127.0.0.1:0, spoken to by larkgate's own MCP client
//! (both protocol revisions) and by raw HTTP for what a client library would not send.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};

use crate::ok;

/// A running `larkgate serve`, killed when dropped (`stop` is the graceful way).
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (`http://IP:PORT`).
    pub(crate) ops: String,
    pub(crate) first_start: String,
    /// What it wrote to stderr before the line naming its URL (an upstream's stderr logged
    /// while serve connected it, say).
    before_url: Vec<String>,
    /// What it has written to stderr since the line naming its URL.
    stderr: std::sync::mpsc::Receiver<String>,
    /// Its stdout, held open (serve writes nothing there after the first-start banner).
    _stdout: std::process::ChildStdout,
}

impl Server {
    pub(crate) fn start(dir: &Path) -> Server {
        Server::start_with_env(dir, &[])
    }

    /// [`Server::start`] with these variables added to its environment.
    pub(crate) fn start_with_env(dir: &Path, env: &[(&str, &str)]) -> Server {
        // The operational endpoints on a port of their own too (the default, 8941, would be
        // every test's at once), unless the test's configuration says where.
        let configured = std::fs::read_to_string(crate::config_path(dir))
            .is_ok_and(|text| text.contains("ops_listen"));
        let ops_flag: &[&str] = if configured {
            &[]
        } else {
            &["--ops-listen", "127.0.0.1:0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_larkgate"))
            .current_dir(dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(ops_flag)
            .envs(env.iter().copied())
            // Its own process group, as a shell gives a foreground command (see `interrupt`).
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut before_url = Vec::new();
        let url = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "serve exited");
            if let Some(rest) = line.trim().strip_prefix("larkgate: serving MCP at ") {
                break rest.to_owned();
            }
            before_url.push(line.trim_end().to_owned());
        };
        let ops = ops_in(&before_url);
        // Keep draining stderr so the server never blocks on it.
        let (errors, stderr_lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = errors.send(line);
            }
        });
        // The first-start banner, when there is one, was written to stdout and flushed before
        // the line above: all of it is in the pipe now. Read what is there without waiting.
        let mut stdout = child.stdout.take().unwrap();
        rustix::io::ioctl_fionbio(&stdout, true).unwrap();
        let mut banner = Vec::new();
        if let Err(error) = std::io::Read::read_to_end(&mut stdout, &mut banner) {
            assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock, "{error}");
        }
        let first_start = String::from_utf8(banner).unwrap();
        Server {
            child,
            url,
            ops,
            first_start,
            before_url,
            stderr: stderr_lines,
            _stdout: stdout,
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line it writes to stderr from now until one containing `needle`, that one
    /// included (each within 30 s of the last).
    pub(crate) fn stderr_until(&self, needle: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let line = self
                .stderr
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("serve wrote no line containing {needle:?}: {lines:?}"));
            let found = line.contains(needle);
            lines.push(line);
            if found {
                return lines;
            }
        }
    }

    /// The next line it writes to stderr (within 30 s).
    pub(crate) fn next_stderr_line(&self) -> String {
        self.stderr
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("serve wrote no further line")
    }

    /// SIGTERM, then every line it wrote to stderr and had not been read, until it exited —
    /// the lines before the one naming its URL first.
    pub(crate) fn stop_reading_stderr(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let mut lines = std::mem::take(&mut self.before_url);
        while let Ok(line) = self.stderr.recv_timeout(std::time::Duration::from_secs(30)) {
            lines.push(line);
        }
        lines
    }

    /// SIGTERM, then waits for the process to exit.
    pub(crate) fn stop(self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        self.signal(&["-TERM", &pid])
    }

    /// Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group (the
    /// server's and any child still in it), then waits for the server to exit.
    pub(crate) fn interrupt(self) -> std::process::ExitStatus {
        let group = format!("-{}", self.child.id());
        self.signal(&["-INT", "--", &group])
    }

    fn signal(mut self, kill_args: &[&str]) -> std::process::ExitStatus {
        assert!(
            Command::new("kill")
                .args(kill_args)
                .status()
                .unwrap()
                .success()
        );
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

/// The base URL of the operational endpoints in what `serve` said before it was ready.
pub(crate) fn ops_in(lines: &[String]) -> String {
    lines
        .iter()
        .find_map(|line| {
            let line = line.trim();
            line.strip_prefix("larkgate: serving /healthz, /readyz and /metrics at ")
                .or_else(|| {
                    line.strip_prefix(
                        "larkgate: serving /healthz, /readyz and /metrics beside /mcp at ",
                    )
                })
        })
        .unwrap_or_else(|| panic!("serve named no address for /healthz: {lines:?}"))
        .to_owned()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data directory configured by `config`, with the principal `ada` (admin) and a token for
/// it, and `larkgate serve` started on it.
/// The console page at `path` of the server at `url` (its `/mcp` URL), as a person signed in
/// with `token` sees it: its status and its HTML.
pub(crate) fn console_page(url: &str, token: &str, path: &str) -> (u16, String) {
    let origin = url.trim_end_matches("/mcp");
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{origin}/admin/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .unwrap();
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = http
        .get(format!("{origin}{path}"))
        .header("Cookie", cookie)
        .send()
        .unwrap();
    (page.status().as_u16(), page.text().unwrap())
}

pub(crate) fn admin_gateway(config: &str) -> (tempfile::TempDir, Server, String) {
    admin_gateway_with_env(config, &[])
}

/// [`admin_gateway`], its `serve` started with these variables added to its environment.
pub(crate) fn admin_gateway_with_env(
    config: &str,
    env: &[(&str, &str)],
) -> (tempfile::TempDir, Server, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), config).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let server = Server::start_with_env(d, env);
    (dir, server, token)
}

pub(crate) async fn client(
    url: &str,
    token: &str,
    revisions: Revisions,
) -> Result<UpstreamClient, String> {
    client_with(url, token, revisions, UpstreamLimits::default()).await
}

/// [`client`] with other limits (a call that may wait longer than the default round trip).
pub(crate) async fn client_with(
    url: &str,
    token: &str,
    revisions: Revisions,
    limits: UpstreamLimits,
) -> Result<UpstreamClient, String> {
    let endpoint = Endpoint {
        url: url.to_owned(),
        revisions,
        headers: BTreeMap::from([("Authorization".to_owned(), format!("Bearer {token}"))]),
        limits,
    };
    let guard = UrlGuard::strict().allow(["127.0.0.1".parse::<Allowed>().unwrap()]);
    UpstreamClient::connect(&endpoint, Arc::new(guard), Arc::new(SystemResolver))
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn token_in(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with("lgt_"))
        .expect("a token")
        .trim_matches(|c: char| c == '"' || c == ',')
        .to_owned()
}

#[test]
fn the_first_start_prints_an_admin_token_that_works_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    first_start_then_restart(dir.path());
    assert!(dir.path().join("larkgate-data/larkgate.sqlite3").exists());
}

#[test]
fn the_first_start_and_a_restart_on_postgres_keep_everything_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let (schema, section) = crate::postgres_store();
    std::fs::write(crate::config_path(dir.path()), section).unwrap();
    let text = first_start_then_restart(dir.path());
    // The pool's gauges are served for a pooled store.
    assert!(
        text.contains("larkgate_store_pool_connections{state=\"max\"} 16"),
        "{text}"
    );
    // Nothing went to a SQLite file; the data, the principal and its token are in the schema.
    assert!(!dir.path().join("larkgate-data/larkgate.sqlite3").exists());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let db = schema.client().await;
        let value: String = db
            .query_one("SELECT value FROM kv WHERE key = 'k'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(value, "v");
        let tokens: i64 = db
            .query_one("SELECT count(*) FROM tokens WHERE principal = 'admin'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(tokens, 1);
        let chained: i64 = db
            .query_one("SELECT count(*) FROM audit WHERE tool = 'kv_set'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(chained, 2, "the kv_set intent and its outcome");
    });
    assert!(ok(dir.path(), &["audit", "verify"]).contains("intact"));
}

/// Starts `serve` on a fresh data directory in `dir`, uses the token its first start prints,
/// restarts it and reads back what the first run wrote. Answers the first run's metrics.
fn first_start_then_restart(dir: &Path) -> String {
    let server = Server::start(dir);
    assert!(
        server.first_start.contains("created the principal `admin`"),
        "{}",
        server.first_start
    );
    assert!(
        server.first_start.contains("\"mcpServers\""),
        "{}",
        server.first_start
    );
    let token = token_in(&server.first_start);
    let url = server.url.clone();
    let ops = server.ops.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let metrics = runtime.block_on(async {
        let admin = client(&url, &token, Revisions::Latest).await.unwrap();
        let result = admin
            .call_tool(
                "kv_set",
                serde_json::json!({"key": "k", "value": "v"})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let unknown = admin
            .call_tool("no_such_tool_x1", serde_json::Map::new())
            .await
            .unwrap();
        assert_eq!(unknown.is_error, Some(true));
        // Metrics: calls by tool and code (an unknown tool gets no label of its own),
        // latencies, upstream health.
        let text = reqwest::get(format!("{ops}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("larkgate_calls_total{tool=\"kv_set\",code=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("larkgate_calls_total{tool=\"-\",code=\"not_found\"} 1"),
            "{text}"
        );
        assert!(!text.contains("no_such_tool_x1"), "{text}");
        assert!(
            text.contains("larkgate_call_duration_seconds_bucket"),
            "{text}"
        );
        assert!(text.contains("larkgate_active_sessions"), "{text}");
        text
    });
    assert!(server.stop().success(), "SIGTERM is a clean shutdown");

    // A restart keeps the principal, the token and the data; no second banner.
    let server = Server::start(dir);
    assert!(server.first_start.is_empty(), "{}", server.first_start);
    let url = server.url.clone();
    runtime.block_on(async {
        let admin = client(&url, &token, Revisions::Legacy).await.unwrap();
        let result = admin
            .call_tool(
                "kv_get",
                serde_json::json!({"key": "k"}).as_object().unwrap().clone(),
            )
            .await
            .unwrap();
        assert_eq!(result.structured_content.unwrap()["value"], "v");
    });
    assert!(server.stop().success());
    let tail = ok(dir, &["audit", "tail", "--principal", "admin"]);
    assert!(tail.contains("kv_set -> ok"), "{tail}");
    metrics
}

#[test]
fn bearer_tokens_hosts_origins_and_sessions_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["principal", "add", "ada", "--roles", "writer"]);
    ok(d, &["principal", "add", "bob", "--roles", "writer"]);
    std::fs::write(
        crate::config_path(d),
        "[policy.roles.admin]\ncall = [\"*\"]\n[policy.roles.writer]\ncall = [\"kv_*\"]\n",
    )
    .unwrap();
    let ada = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let bob = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    assert!(server.first_start.is_empty(), "tokens exist: no bootstrap");
    let url = server.url.clone();
    let ops = server.ops.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Each revision, as ada: her tools, her calls.
        for revisions in [Revisions::Latest, Revisions::Legacy] {
            let c = client(&url, &ada, revisions).await.unwrap();
            let names: Vec<String> = c
                .list_tools()
                .await
                .unwrap()
                .iter()
                .map(|t| t.name.to_string())
                .collect();
            assert!(names.contains(&"kv_get".to_owned()), "{names:?}");
            assert!(!names.contains(&"approvals_list".to_owned()), "{names:?}");
            c.close().await;
        }
        // A wrong token cannot connect.
        let refused = client(&url, "lgt_AAAAAAAAAAAA_AAAA", Revisions::Latest)
            .await
            .unwrap_err();
        assert!(
            refused.contains("401") || refused.contains("uth"),
            "{refused}"
        );

        let http = reqwest::Client::new();
        let initialize = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}
        });
        let post = |token: Option<&str>| {
            let mut request = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request
        };
        // No token: 401 with a challenge and a JSON-RPC error.
        let response = post(None).json(&initialize).send().await.unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer realm=\"larkgate\""
        );
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["data"]["code"], "unauthenticated", "{body}");
        assert!(
            body["error"]["data"]["hint"]
                .as_str()
                .unwrap()
                .contains("token create"),
            "{body}"
        );
        // A foreign Host (DNS rebinding) and a browser Origin are refused.
        let response = post(Some(&ada))
            .header("host", "evil.example")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403);
        let response = post(Some(&ada))
            .header("origin", "https://evil.example")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403);
        // Ada opens a 2025-11-25 session; Bob's token on it is refused.
        let response = post(Some(&ada)).json(&initialize).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        // A request on that session, with `token`.
        let on_session = |token: &str| {
            post(Some(token))
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25")
        };
        let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let hijack = on_session(&bob).json(&list).send().await.unwrap();
        assert_eq!(hijack.status(), 403);
        // Malformed JSON-RPC gets JSON-RPC errors, and the server keeps serving.
        let cases: [(&str, i64); 11] = [
            (
                "{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}",
                -32600,
            ),
            ("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", -32600),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"clock_now\",\"arguments\":[1]}}",
                -32602,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"arguments\":{}}}",
                -32602,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":\"all\"}",
                -32602,
            ),
            ("{not json", -32700),
            (
                "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
                -32600,
            ),
            ("\"hello\"", -32600),
            ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":1}", -32600),
        ];
        for (body, code) in cases {
            let response = post(Some(&ada)).body(body).send().await.unwrap();
            assert_eq!(response.status(), 400, "{body}");
            let answer: serde_json::Value = response.json().await.unwrap();
            assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
            if code == -32602 {
                assert_eq!(answer["id"], 4, "the request's own id: {answer}");
            }
        }
        let unknown = on_session(&ada)
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "no/such"}))
            .send()
            .await
            .unwrap();
        let text = unknown.text().await.unwrap();
        assert!(text.contains("-32601"), "{text}");
        // Bob cannot close it either; Ada closes it with a 200, and it is gone.
        let delete = |token: &str| {
            http.delete(&url)
                .bearer_auth(token)
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25")
                .send()
        };
        assert_eq!(delete(&bob).await.unwrap().status(), 403);
        assert_eq!(delete(&ada).await.unwrap().status(), 200);
        let after = on_session(&ada).json(&list).send().await.unwrap();
        assert!(after.status().is_client_error(), "{}", after.status());
        let still = client(&url, &ada, Revisions::Latest).await.unwrap();
        assert!(!still.list_tools().await.unwrap().is_empty());

        // Health endpoints need no token.
        let health = http.get(format!("{ops}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        let ready = http.get(format!("{ops}/readyz")).send().await.unwrap();
        assert_eq!(ready.status(), 200);
    });
    assert!(server.stop().success());
}

// How many threads serve requests: one per core, or as many as `TOKIO_WORKER_THREADS` says (a
// single thread answers a lone client sooner on a small machine; README "Performance").
#[test]
fn serve_says_how_many_worker_threads_serve_and_takes_tokio_worker_threads() {
    let said = |server: &Server| loop {
        let line = server.next_stderr_line();
        if line.contains("requests (one per core") {
            return line;
        }
    };
    for (count, expected) in [
        ("1", "1 worker thread serve"),
        ("3", "3 worker threads serve"),
    ] {
        let (_dir, server, token) = admin_gateway_with_env("", &[("TOKIO_WORKER_THREADS", count)]);
        let line = said(&server);
        assert!(line.contains(expected), "{line}");
        let answer = crate::traces::call(
            &server.url,
            &token,
            None,
            None,
            "clock_now",
            serde_json::json!({}),
        );
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let (_dir, server, _token) = admin_gateway("");
    let line = said(&server);
    assert!(
        line.contains("one per core unless TOKIO_WORKER_THREADS says otherwise"),
        "{line}"
    );
}

/// A second `serve` on a data directory that is already served says which process serves it
/// and where, and what to do; it starts nothing.
#[test]
fn a_second_serve_names_the_one_already_serving_and_commands_that_only_read_work_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d);
    let refused = crate::fails(d, &["serve", "--listen", "127.0.0.1:0"]);
    let expected = format!(
        "is already served by pid {} at {}: stop that process first, or give this one a data \
         directory of its own (--data-dir)",
        server.pid(),
        server.url
    );
    assert!(refused.contains(&expected), "{refused}");
    assert!(!refused.contains("owns the audit log"), "{refused}");
    // The first one serves on, and the commands that only read work beside it, the script
    // commands among them.
    ok(d, &["principal", "add", "ada", "--roles", "author"]);
    std::fs::write(d.join("hello.star"), "def main():\n    return 1\n").unwrap();
    let draft = crate::larkgate_in(d, &["--as", "ada", "script", "save", "hello", "hello.star"]);
    assert!(
        !draft.status.success(),
        "a save records, so it goes through serve"
    );
    let listed = ok(d, &["script", "list"]);
    assert_eq!(listed, "", "no scripts yet");
    let history = crate::fails(d, &["script", "history", "hello"]);
    assert!(
        history.contains("\"hello\" has no published versions"),
        "{history}"
    );
    drop(server);
}
