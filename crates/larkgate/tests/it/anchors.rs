//! Signed checkpoints sent outside the database by a running `larkgate serve`: to a file, to a
//! system log's socket (bound here, as journald binds `/dev/log`) and to a webhook (a Python
//! HTTP endpoint, `tests/peers/webhook_receiver.py`), through a failure of the webhook; calls
//! refused while it fails when `anchors_required` says so; `audit verify --anchor` catching a
//! database rolled back to a backup; and `audit key --rotate` beside a running serve.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use serde_json::{Value, json};

use crate::serve::{Server, admin_gateway_with_env};
use crate::traces::{Peer, call, peer_with};
use crate::{fails, ok};

/// `kv_set key=v` through the serve; its JSON-RPC answer.
fn kv_set(server: &Server, token: &str, key: &str) -> Value {
    call(
        &server.url,
        token,
        None,
        None,
        "kv_set",
        json!({"key": key, "value": "v"}),
    )
}

fn succeeded(answer: &Value) -> bool {
    answer["result"]["isError"] == json!(false)
}

/// The webhook endpoint's next request, as it printed it.
fn next_request(hook: &Peer) -> Value {
    serde_json::from_str(&hook.next_line()).unwrap()
}

/// The checkpoints the chain holds, in order, as their JSON.
fn chained_checkpoints(dir: &Path) -> Vec<Value> {
    ok(dir, &["audit", "tail", "-n", "100000", "--json"])
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|r| r["kind"] == "event" && r["code"] == "checkpoint")
        .map(|r| serde_json::from_str(r["detail"].as_str().unwrap()).unwrap())
        .collect()
}

/// A metric's value on the serve's `/metrics`, for the series whose line starts with `series`.
fn metric(server: &Server, series: &str) -> f64 {
    let text = reqwest::blocking::get(format!("{}/metrics", server.ops))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no {series}: {text}"))
}

/// The serve's `/readyz`: its status and body.
fn readyz(server: &Server) -> (u16, String) {
    let answer = reqwest::blocking::get(format!("{}/readyz", server.ops)).unwrap();
    (answer.status().as_u16(), answer.text().unwrap())
}

fn webhook_config(port: u16) -> String {
    format!(
        "[[audit.anchors]]\nwebhook = \"http://127.0.0.1:{port}/checkpoints\"\n\
         allow = [\"127.0.0.1\"]\nheaders = {{ Authorization = \"Bearer ${{HOOK_TOKEN}}\" }}\n"
    )
}

/// Each checkpoint reaches all three sinks, the webhook with its expanded header; while the
/// webhook is down calls go on, its failure is logged once and counted, and it is retried until
/// it takes every checkpoint, in order. The file and the system log's lines each check the
/// chain with `audit verify --anchor`; the database put back to a backup taken while serving
/// verifies as a signed chain alone, and is caught as shorter than the anchors.
#[test]
fn checkpoints_reach_a_file_the_system_log_and_a_webhook_which_is_retried_without_blocking_calls() {
    let work = tempfile::tempdir().unwrap();
    let down = work.path().join("webhook-down");
    std::fs::write(&down, "").unwrap();
    let hook = peer_with("webhook_receiver.py", &[down.as_os_str()]);
    let socket = work.path().join("log.sock");
    let syslog = UnixDatagram::bind(&socket).unwrap();
    let anchor_file = work.path().join("anchors.jsonl");
    let config = format!(
        "[audit]\ncheckpoint_records = 2\n\n[[audit.anchors]]\nfile = \"{}\"\n\n\
         [[audit.anchors]]\nsyslog = \"{}\"\n\n{}",
        anchor_file.display(),
        socket.display(),
        webhook_config(hook.port)
    );
    let secret = "hook-secret-7f3a";
    let (dir, server, token) = admin_gateway_with_env(&config, &[("HOOK_TOKEN", secret)]);
    let d = dir.path();

    // The webhook is down: its first checkpoint is refused, and calls go on meanwhile.
    assert!(succeeded(&kv_set(&server, &token, "k1")));
    assert!(succeeded(&kv_set(&server, &token, "k2")));
    let refused = next_request(&hook);
    assert_eq!(refused["status"], 503, "{refused}");
    server.stderr_until("a checkpoint could not be anchored");
    for i in 3..6 {
        let answer = kv_set(&server, &token, &format!("k{i}"));
        assert!(
            succeeded(&answer),
            "a failing anchor blocked a call: {answer}"
        );
    }
    let webhook = format!(
        "larkgate_audit_anchor_failures_total{{anchor=\"webhook http://127.0.0.1:{}/checkpoints\"}}",
        hook.port
    );
    assert!(metric(&server, &webhook) >= 1.0);

    // A backup taken now: the chain as it is, signed; the calls after it are not in it.
    let backup = work.path().join("backup.sqlite3");
    ok(d, &["backup", backup.to_str().unwrap()]);

    // Back up: it is retried until it takes everything it missed.
    std::fs::remove_file(&down).unwrap();
    server.stderr_until("checkpoints are anchored again");
    for i in 6..9 {
        assert!(succeeded(&kv_set(&server, &token, &format!("k{i}"))));
    }
    let said = server.stop_reading_stderr();
    let failures_logged = said
        .iter()
        .filter(|l| l.contains("could not be anchored"))
        .count();
    // The one line read above, and no other: a failure is logged when it starts.
    assert_eq!(failures_logged, 0, "{said:#?}");
    assert!(
        !said.iter().any(|l| l.contains(secret)),
        "the webhook's secret header was logged: {said:#?}"
    );

    let chained = chained_checkpoints(d);
    assert!(chained.len() >= 3, "{chained:#?}");
    // A serve that stops signs what it chained since its last checkpoint: the chain ends with
    // a checkpoint of the record before it.
    let head: u64 = ok(d, &["audit", "head"])
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(chained.last().unwrap()["seq"], head - 1, "{chained:#?}");
    // The file: one line per checkpoint, in the chain's order.
    let in_file: Vec<Value> = std::fs::read_to_string(&anchor_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(in_file, chained);
    // The system log: an RFC 3164 message per checkpoint, authpriv.info, tagged.
    syslog.set_nonblocking(true).unwrap();
    let mut messages = Vec::new();
    let mut buffer = vec![0u8; 65536];
    while let Ok(n) = syslog.recv(&mut buffer) {
        messages.push(String::from_utf8(buffer[..n].to_vec()).unwrap());
    }
    let in_syslog: Vec<Value> = messages
        .iter()
        .map(|m| {
            assert!(m.starts_with("<86>larkgate-audit["), "{m}");
            serde_json::from_str(&m[m.find('{').unwrap()..]).unwrap()
        })
        .collect();
    assert_eq!(in_syslog, chained);
    // The webhook: every checkpoint taken once it was back, in order, each with the header.
    let mut taken = Vec::new();
    while let Some(line) = hook.printed() {
        let request: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(request["authorization"], format!("Bearer {secret}"));
        assert_eq!(request["content_type"], "application/json");
        if request["status"] == 204 {
            taken.push(serde_json::from_str::<Value>(request["body"].as_str().unwrap()).unwrap());
        }
    }
    assert_eq!(taken, chained);

    let key = ok(d, &["audit", "key"]).trim().to_owned();
    let log_lines = work.path().join("syslog.txt");
    std::fs::write(&log_lines, messages.join("\n")).unwrap();
    for anchors in [&anchor_file, &log_lines] {
        let verified = ok(
            d,
            &[
                "audit",
                "verify",
                "--key",
                &key,
                "--anchor",
                anchors.to_str().unwrap(),
            ],
        );
        assert!(
            verified.contains(&format!(
                "checked {} checkpoints anchored outside the database",
                chained.len()
            )) && verified.contains("the chain is intact"),
            "{verified}"
        );
        assert!(
            verified.contains(&format!(
                "the anchors vouch for it up to record {}, the last they hold",
                chained.last().unwrap()["seq"]
            )),
            "{verified}"
        );
    }

    // The database put back to the backup: a valid, signed chain, shorter than the anchors.
    let data = d.join("larkgate-data");
    for name in ["larkgate.sqlite3-wal", "larkgate.sqlite3-shm"] {
        let _ = std::fs::remove_file(data.join(name));
    }
    std::fs::copy(&backup, data.join("larkgate.sqlite3")).unwrap();
    let alone = ok(d, &["audit", "verify", "--key", &key]);
    assert!(alone.contains("the chain is intact"), "{alone}");
    let output = crate::larkgate_in(
        d,
        &[
            "audit",
            "verify",
            "--key",
            &key,
            "--anchor",
            anchor_file.to_str().unwrap(),
        ],
    );
    assert!(!output.status.success());
    let said = crate::stdout(&output);
    assert!(
        said.contains("BROKEN against the anchors") && said.contains("shorter"),
        "{said}"
    );
}

/// With `anchors_required = true`, a call is refused (and does not run) while the webhook is
/// failing, and calls run again once it takes the checkpoints.
#[test]
fn with_anchors_required_calls_are_refused_while_an_anchor_fails_and_run_once_it_is_back() {
    let work = tempfile::tempdir().unwrap();
    let down = work.path().join("webhook-down");
    std::fs::write(&down, "").unwrap();
    let hook = peer_with("webhook_receiver.py", &[down.as_os_str()]);
    let config = format!(
        "[audit]\ncheckpoint_records = 2\nanchors_required = true\n\n{}",
        webhook_config(hook.port)
    );
    let (dir, server, token) = admin_gateway_with_env(&config, &[("HOOK_TOKEN", "t")]);
    assert_eq!(readyz(&server), (200, "ready\n".to_owned()));
    // The first call's records cross the interval: their checkpoint goes to the webhook, which
    // refuses it (whether this call was answered before that depends on the batch's timing).
    kv_set(&server, &token, "before");
    assert_eq!(next_request(&hook)["status"], 503);
    let failing = server.stderr_until("a checkpoint could not be anchored");
    assert!(
        failing
            .last()
            .unwrap()
            .contains("calls are refused meanwhile"),
        "{failing:?}"
    );

    let refused = kv_set(&server, &token, "while-failing");
    let said = refused.to_string();
    assert!(!succeeded(&refused), "{refused}");
    assert!(
        said.contains("the audit record could not be written, so the call did not run"),
        "{refused}"
    );
    assert!(
        !said.contains("127.0.0.1"),
        "an internal detail reached the caller: {refused}"
    );
    // Readiness tells a load balancer so; it does not say which anchor.
    let (status, body) = readyz(&server);
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        "not ready: an audit anchor is failing, and [audit] anchors_required refuses calls\n"
    );

    std::fs::remove_file(&down).unwrap();
    server.stderr_until("checkpoints are anchored again");
    assert_eq!(readyz(&server), (200, "ready\n".to_owned()));
    assert!(succeeded(&kv_set(&server, &token, "after")));
    let got = call(
        &server.url,
        &token,
        None,
        None,
        "kv_get",
        json!({"key": "while-failing"}),
    );
    assert_eq!(
        got["result"]["structuredContent"]["found"], false,
        "the refused call ran: {got}"
    );
    drop(server);
    let _ = dir;
}

/// `audit key --rotate` beside a running serve: the serve's checkpoint signed by the old key
/// announces the new one, which signs from then on; `verify --key OLD` accepts both, the new
/// key alone does not vouch for the old key's checkpoints.
#[test]
fn a_key_rotated_beside_a_running_serve_is_announced_by_the_old_key_and_signs_after() {
    let (dir, server, token) = admin_gateway_with_env("[audit]\ncheckpoint_records = 2\n", &[]);
    let d = dir.path();
    assert!(succeeded(&kv_set(&server, &token, "a")));
    assert!(succeeded(&kv_set(&server, &token, "b")));
    let old = ok(d, &["audit", "key"]).trim().to_owned();
    let rotated = ok(d, &["audit", "key", "--rotate"]);
    let new = ok(d, &["audit", "key"]).trim().to_owned();
    assert_ne!(old, new);
    assert!(
        rotated.contains(&format!("{old} announced {new}")),
        "{rotated}"
    );
    assert!(!d.join("larkgate-data/audit-signing.key.next").exists());
    for key in ["c", "d", "e"] {
        assert!(succeeded(&kv_set(&server, &token, key)));
    }
    server.stop();

    let chained = chained_checkpoints(d);
    let announcement = chained
        .iter()
        .position(|c| c["next_key"] == new.as_str())
        .unwrap_or_else(|| panic!("no checkpoint announces the new key: {chained:#?}"));
    assert_eq!(chained[announcement]["key"], old.as_str());
    assert!(
        chained[..announcement]
            .iter()
            .all(|c| c["key"] == old.as_str())
    );
    assert!(
        chained.len() > announcement + 1
            && chained[announcement + 1..]
                .iter()
                .all(|c| c["key"] == new.as_str()),
        "{chained:#?}"
    );
    let verified = ok(d, &["audit", "verify", "--key", &old]);
    assert!(
        verified.contains(&format!("signed by {old}, {new}")),
        "{verified}"
    );
    let broken = fails(d, &["audit", "verify", "--key", &new]);
    assert!(broken.contains("the audit chain is broken"), "{broken}");
}
