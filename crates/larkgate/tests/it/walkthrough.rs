//! The README's walkthrough, step by step, as a new user runs it: `larkgate serve` on the
//! embedded defaults, the token from its first start, `larkgate client` to list tools, run the
//! example draft, publish it and call it as a tool, an approval, and the audit log.

use std::path::Path;
use std::process::{Command, Output};

use crate::ok;
use crate::serve::{Server, token_in};

/// `larkgate client ARGS...` with `token` in `LARKGATE_TOKEN`, as the README runs it: no
/// `--url`, so it finds the server that `serve` announced in `./larkgate-data` (here on a port
/// of its own; `url` is only checked against what it finds).
fn client(dir: &Path, url: &str, token: &str, args: &[&str]) -> Output {
    let announced = std::fs::read_to_string(dir.join("larkgate-data/serve.url")).unwrap();
    assert_eq!(announced.trim(), url);
    Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir)
        .env("LARKGATE_TOKEN", token)
        .arg("client")
        .args(args)
        .output()
        .unwrap()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn succeeds(output: Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    json(&output)
}

#[test]
fn the_readme_walkthrough_works() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let greet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/greet.star");
    let greet = greet.to_str().unwrap();

    // The first start prints the admin's token.
    let server = Server::start(d);
    let admin = token_in(&server.first_start);
    let url = server.url.clone();
    let list = client(d, &url, &admin, &["list"]);
    let listing = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(list.status.success(), "{listing}");
    assert!(listing.contains("kv_get(*, key: str"), "{listing}");
    assert!(listing.contains("script_run_draft("), "{listing}");
    succeeds(client(d, &url, &admin, &["call", "clock_now"]));

    // A draft: saved, run (read-only: the write is refused inside the run), published,
    // called as a tool (now it may write).
    let saved = succeeds(client(
        d,
        &url,
        &admin,
        &[
            "call",
            "script_save_draft",
            "--arg",
            "name=greet",
            "--arg-file",
            &format!("source={greet}"),
        ],
    ));
    assert_eq!(
        saved["signature"],
        "main(*, name: str, greeting: str | None = None) -> any"
    );
    let ran = succeeds(client(
        d,
        &url,
        &admin,
        &[
            "call",
            "script_run_draft",
            "--args-json",
            r#"{"name": "greet", "args": {"name": "Ada"}}"#,
        ],
    ));
    assert_eq!(ran["result"]["remembered"], false, "{ran}");
    assert_eq!(ran["printed"], "not remembered: write_barrier\n");
    // Reviewed by effect: the write is recorded, not made, and answered as an intended write.
    let reviewed = succeeds(client(
        d,
        &url,
        &admin,
        &[
            "call",
            "script_run_draft",
            "--args-json",
            r#"{"name": "greet", "review": true, "args": {"name": "Ada"}}"#,
        ],
    ));
    assert_eq!(
        reviewed["intended_writes"],
        serde_json::json!([{"tool": "kv_set", "arguments": {"key": "greeted:Ada", "value": "1"}}]),
        "{reviewed}"
    );
    assert_eq!(reviewed["printed"], "remembered\n");
    succeeds(client(
        d,
        &url,
        &admin,
        &["call", "script_publish", "--arg", "name=greet"],
    ));
    let called = succeeds(client(
        d,
        &url,
        &admin,
        &["call", "script__greet", "--arg", "name=Ada"],
    ));
    assert_eq!(called["result"]["remembered"], true, "{called}");
    let run = succeeds(client(
        d,
        &url,
        &admin,
        &[
            "call",
            "run_get",
            "--arg",
            &format!("run_id={}", called["run_id"].as_str().unwrap()),
        ],
    ));
    assert_eq!(run["principal"], "script:greet");
    assert!(server.stop().success());

    // An approval gate on script tools, and an approver.
    std::fs::write(
        crate::config_path(d),
        "[policy.roles.admin]\ncall = [\"*\"]\n[policy.approvals]\nrequire = [\"script__*\"]\n",
    )
    .unwrap();
    ok(d, &["principal", "add", "eve", "--roles", "approver"]);
    let eve = ok(d, &["token", "create", "--principal", "eve"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let url = server.url.clone();
    let gated = client(
        d,
        &url,
        &admin,
        &["call", "script__greet", "--arg", "name=Bo"],
    );
    assert!(!gated.status.success());
    let envelope = json(&gated);
    assert_eq!(envelope["code"], "approval_required", "{envelope}");
    let id = envelope["approval_id"].as_str().unwrap();
    let pending = succeeds(client(d, &url, &eve, &["call", "approvals_list"]));
    assert_eq!(pending["approvals"][0]["id"], id);
    succeeds(client(
        d,
        &url,
        &eve,
        &["call", "approvals_approve", "--arg", &format!("id={id}")],
    ));
    let approved = succeeds(client(
        d,
        &url,
        &admin,
        &["call", "script__greet", "--arg", "name=Bo"],
    ));
    assert_eq!(
        approved["result"]["message"],
        "Hello, Bo! (greeting number 1)"
    );
    assert!(server.stop().success());

    let tail = ok(d, &["audit", "tail", "-n", "30"]);
    assert!(tail.contains("script__greet"), "{tail}");
    assert!(tail.contains("approval_required"), "{tail}");
    assert!(ok(d, &["audit", "verify"]).contains("intact"));
}
