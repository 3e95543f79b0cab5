//! The edge under abuse, against a real `larkgate serve` with small caps: connections past the
//! cap, slow and idle sockets, the operational endpoints on their own listener, and what only
//! the binary shows (its metrics, its first start, the client command). Sessions' caps, Host
//! and Origin, and the failed-authentication throttle are the edge's own tests
//! (`crates/larkgate-edge/tests/it`), in one process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::serve::{Server, token_in};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

fn start(dir: &Path, config: &str) -> (Server, String) {
    std::fs::write(crate::config_path(dir), config).unwrap();
    let server = Server::start(dir);
    let admin = token_in(&server.first_start);
    (server, admin)
}

/// The `host:port` serving `/mcp`.
fn address_of(server: &Server) -> String {
    server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// The first bytes the server answers on `stream`, within 5 s.
fn answer_on(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = stream.read(&mut answer).unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// Whether the server closes `stream` within `within` (reads until EOF or a reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
        if Instant::now() > deadline {
            return false;
        }
    }
}

/// One HTTP/1.1 request on a fresh connection, with a bound on how long it may take.
fn get(address: &str, path: &str, within: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(within))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// A 2025-11-25 `initialize` at `url` with `token` on a connection of its own: its status.
fn initialize(url: &str, token: &str) -> u16 {
    reqwest::blocking::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(INITIALIZE)
        .send()
        .unwrap()
        .status()
        .as_u16()
}

/// Waits (up to 30 s) until the server at `ops` says it holds `count` connections to `/mcp`.
fn open_connections_reach(ops: &str, count: usize) {
    let wanted = format!("larkgate_open_connections {count}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = get(ops, "/metrics", Duration::from_secs(5)).unwrap();
        if metrics.lines().any(|l| l == wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "never {wanted}: {metrics}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_sockets_and_slow_heads_are_closed_while_ops_answer_on_their_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(
        dir.path(),
        "[server]\nops_listen = \"127.0.0.1:0\"\nmax_connections = 256\n\
         header_read_timeout_ms = 1000\nidle_timeout_ms = 3000\n",
    );
    let ops = server.ops.trim_start_matches("http://").to_owned();
    let mcp = address_of(&server);

    // The cap filled with sockets that send nothing.
    let mut idle: Vec<TcpStream> = (0..256)
        .map(|_| TcpStream::connect(&mcp).unwrap())
        .collect();
    // Ready when the server holds all of them.
    open_connections_reach(&ops, 256);
    // The operational endpoints answer meanwhile, on their own listener.
    let health = get(&ops, "/healthz", Duration::from_secs(1)).expect("/healthz answers");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // `/mcp` does not serve them; the operational listener does not serve `/mcp`.
    let not_here = get(&ops, "/mcp", Duration::from_secs(1)).unwrap();
    assert!(not_here.starts_with("HTTP/1.1 404"), "{not_here}");

    // Sockets that never send a request are closed after the idle timeout.
    let started = Instant::now();
    for stream in &mut idle {
        assert!(
            closed_within(stream, Duration::from_secs(6)),
            "an idle socket was kept"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    drop(idle);
    open_connections_reach(&ops, 0);

    // A head sent a byte at a time is cut off at the header timeout, though bytes keep coming.
    let mut slow = TcpStream::connect(&mcp).unwrap();
    slow.set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let head =
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let started = Instant::now();
    let mut cut = false;
    for byte in head {
        if slow.write_all(&[*byte]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        cut || closed_within(&mut slow, Duration::from_secs(2)),
        "a slow head was kept"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "cut after {:?}",
        started.elapsed()
    );

    // With the flood gone, `/mcp` serves again, and a call that takes longer than the header
    // timeout is not cut (it is in flight, not idle).
    assert_eq!(initialize(&server.url, &admin), 200);
    let metrics = get(&ops, "/metrics", Duration::from_secs(1)).unwrap();
    let timed_out: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("larkgate_timed_out_connections_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(timed_out >= 257, "256 idle and one slow: {metrics}");
    assert!(server.stop().success());
}

/// A flood of silent sockets fills the cap: each newcomer closes the socket idle longest and
/// is served, so a client gets through the flood (nothing here waits for a timeout: they are
/// a minute).
#[test]
fn a_newcomer_at_a_full_cap_displaces_the_socket_idle_longest_and_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path(), "[server]\nmax_connections = 64\n");
    let ops = server.ops.trim_start_matches("http://").to_owned();
    let mcp = address_of(&server);
    let mut idle: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(&mcp).unwrap()).collect();
    open_connections_reach(&ops, 64);
    let _extra = TcpStream::connect(&mcp).unwrap();
    assert!(
        closed_within(&mut idle[0], Duration::from_secs(10)),
        "the socket idle longest was kept"
    );
    assert_eq!(
        initialize(&server.url, &admin),
        200,
        "a client gets through the flood"
    );
    assert!(
        closed_within(&mut idle[1], Duration::from_secs(10)),
        "the next idle socket made room for the client"
    );
    let metrics = get(&ops, "/metrics", Duration::from_secs(5)).unwrap();
    assert!(
        metrics.contains("larkgate_refused_connections_total 0")
            && !metrics.contains("larkgate_evicted_connections_total 0"),
        "{metrics}"
    );
    // The others are still open: only as many went as came.
    for stream in &mut idle[2..] {
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("an idle socket was closed without need: {other:?}"),
        }
    }
    assert!(server.stop().success());
}

#[test]
fn a_request_body_that_is_too_large_or_too_slow_is_refused_in_json_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(
        dir.path(),
        "[server]\nmax_body_bytes = 1000\nidle_timeout_ms = 1000\n",
    );
    let mcp = address_of(&server);
    let request = |length: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {admin}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {length}\r\n\r\n"
        )
    };
    // Declared too large: answered before a byte of the body is sent.
    let mut stream = TcpStream::connect(&mcp).unwrap();
    stream.write_all(request(10_000_000).as_bytes()).unwrap();
    let answer = answer_on(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("exceeds 1000 bytes"), "{answer}");
    // A head over the header cap (64 KiB by default): 431, and the server goes on.
    let mut stream = TcpStream::connect(&mcp).unwrap();
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let _ = stream.write_all(huge.as_bytes());
    let answer = answer_on(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let next = get(&mcp, "/mcp", Duration::from_secs(5)).unwrap();
    assert!(next.starts_with("HTTP/1.1 401"), "{next}");
    // A body that stops halfway: 408 with a JSON-RPC error after the timeout.
    let mut stream = TcpStream::connect(&mcp).unwrap();
    stream.write_all(request(500).as_bytes()).unwrap();
    stream.write_all(b"{\"jsonrpc\":").unwrap();
    let answer = answer_on(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 1 s"), "{answer}");
    assert!(answer.contains("-32600"), "{answer}");
    assert!(server.stop().success());
}

/// `larkgate_active_sessions` on `/metrics` counts the sessions the edge holds. (The caps,
/// closing and idle expiry are the edge's own tests, `larkgate-edge/tests/it/sessions.rs`.)
#[test]
fn the_sessions_metric_counts_the_sessions_open() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path(), "");
    let http = reqwest::blocking::Client::new();
    let open = || {
        let response = http
            .post(&server.url)
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(INITIALIZE)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let metric = || -> String {
        let text = http
            .get(format!("{}/metrics", server.ops))
            .send()
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .find(|l| l.starts_with("larkgate_active_sessions"))
            .unwrap_or_default()
            .to_owned()
    };
    let first = open();
    let _second = open();
    assert_eq!(metric(), "larkgate_active_sessions 2");
    let closed = http
        .delete(&server.url)
        .bearer_auth(&admin)
        .header("mcp-session-id", &first)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(closed.status(), 200);
    assert_eq!(metric(), "larkgate_active_sessions 1");
    assert!(server.stop().success());
}

/// The first start's client configuration names `[server] public_url`. (Host, Origin and
/// forwarding headers are the edge's own tests, `larkgate-edge/tests/it/addresses.rs`.)
#[test]
fn the_printed_client_configuration_names_the_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _admin) = start(
        dir.path(),
        "[server]\npublic_url = \"https://mcp.example.com/mcp\"\n",
    );
    assert!(
        server
            .first_start
            .contains("\"url\": \"https://mcp.example.com/mcp\""),
        "{}",
        server.first_start
    );
    assert!(server.stop().success());
}

#[test]
fn bound_to_every_interface_it_answers_the_machines_address_and_says_what_to_configure() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(dir.path()), "").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir.path())
        // Health beside `/mcp`, so that it answers on the address every client reaches.
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--ops-listen",
            "beside-mcp",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let mut port = None;
    while port.is_none() || !text.contains("set [server] public_url") {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0,
            "serve exited: {text}"
        );
        if let Some(rest) = line
            .trim()
            .strip_prefix("larkgate: serving MCP at http://0.0.0.0:")
        {
            port = Some(rest.trim_end_matches("/mcp").to_owned());
        }
        text.push_str(&line);
    }
    let port = port.unwrap();
    // A request that names the address it reached (here loopback's) is answered, not 403.
    let answer = get(
        &format!("127.0.0.1:{port}"),
        "/healthz",
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let _ = child.kill();
    let _ = child.wait();
}

/// `larkgate client` as a new user runs it, and gets it wrong.
#[test]
fn the_client_finds_the_server_takes_flags_anywhere_and_says_what_failed_in_its_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path(), "");
    let d = dir.path();
    std::fs::write(d.join("admin.token"), &admin).unwrap();
    let client = |token: Option<&str>, args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
        command.current_dir(d).args(args);
        if let Some(token) = token {
            command.env("LARKGATE_TOKEN", token);
        }
        command.output().unwrap()
    };
    let chains = ["Transport", "rmcp", "Send message", "error sending request"];
    let clean = |text: &str| {
        for chain in chains {
            assert!(
                !text.contains(chain),
                "a library's error reached the user: {text}"
            );
        }
    };
    // The running serve is found from ./larkgate-data; flags go before or after the subcommand.
    let listed = client(Some(&admin), &["client", "list"]);
    assert!(listed.status.success(), "{}", crate::stderr(&listed));
    assert!(crate::stdout(&listed).contains("clock_now"));
    let url = server.url.clone();
    let url = url.as_str();
    let after = client(
        None,
        &[
            "client",
            "call",
            "clock_now",
            "--url",
            url,
            "--token-file",
            "admin.token",
            "--legacy",
        ],
    );
    assert!(after.status.success(), "{}", crate::stderr(&after));
    assert!(crate::stdout(&after).contains("unix_ms"));
    // A wrong token is told as such, with the server's own words.
    let wrong = client(Some("lgt_AAAAAAAAAAAA_AAAA"), &["client", "list"]);
    assert!(!wrong.status.success());
    let said = crate::stderr(&wrong);
    assert!(
        said.contains("the server refused the token: unauthenticated: no valid bearer token"),
        "{said}"
    );
    clean(&said);
    // Each refused credential is counted.
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.ops))
        .unwrap()
        .text()
        .unwrap();
    let failed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("larkgate_failed_authentications_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(failed >= 1, "{metrics}");
    // `--as` is not silently ignored.
    let as_eve = client(Some(&admin), &["--as", "eve", "client", "list"]);
    assert!(!as_eve.status.success());
    let said = crate::stderr(&as_eve);
    assert!(
        said.contains("--as does not apply to `larkgate client`"),
        "{said}"
    );
    // A refusal: the envelope on stdout, the code and message on stderr.
    let refused = client(Some(&admin), &["client", "call", "no_such_tool"]);
    assert!(!refused.status.success());
    let envelope: serde_json::Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(envelope["code"], "not_found");
    assert!(crate::stderr(&refused).contains("no_such_tool was refused (not_found)"));
    assert!(server.stop().success());
    // Nothing listening any more: said so.
    let gone = client(Some(&admin), &["client", "--url", url, "list"]);
    assert!(!gone.status.success());
    let said = crate::stderr(&gone);
    assert!(said.contains("nothing answers at"), "{said}");
    clean(&said);
}

/// Two larkgate processes on one machine: the second finds the operational port taken and
/// says what to set, before it creates or prints anything.
#[test]
fn an_operational_port_in_use_is_refused_with_what_to_set_before_anything_is_written() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(dir.path()), "").unwrap();
    let output = crate::larkgate_in(
        dir.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            &format!("127.0.0.1:{port}"),
        ],
    );
    assert!(!output.status.success());
    let said = crate::stderr(&output);
    assert!(
        said.contains(&format!("cannot listen on 127.0.0.1:{port} for /healthz"))
            && said.contains("--ops-listen IP:PORT")
            && said.contains("\"beside-mcp\""),
        "{said}"
    );
    let printed = crate::stdout(&output);
    assert!(
        !printed.contains("lgt_"),
        "a first-start token was printed: {printed}"
    );
    // Nothing was created: a later start is still the first.
    assert_eq!(
        crate::ok(dir.path(), &["token", "list"]).trim(),
        "no tokens"
    );
}
