//! Principals, `--as`, calls and approvals from the command line, end to end.

use crate::{fails, ok};

const POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.writer]
call = ["kv_*"]
[policy.approvals]
require = ["kv_delete"]
"#;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(dir.path()), POLICY).unwrap();
    ok(
        dir.path(),
        &["principal", "add", "wes", "--roles", "writer"],
    );
    ok(
        dir.path(),
        &["principal", "add", "alice", "--roles", "approver"],
    );
    dir
}

#[test]
fn principals_are_added_listed_changed_and_removed() {
    let dir = setup();
    let list = ok(dir.path(), &["principal", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("wes") && l.ends_with("writer")),
        "{list}"
    );
    ok(
        dir.path(),
        &["principal", "set-roles", "wes", "--roles", "writer,author"],
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(dir.path(), &["principal", "list", "--json"])).unwrap();
    assert_eq!(json[1]["id"], "wes");
    assert_eq!(json[1]["roles"], serde_json::json!(["author", "writer"]));
    ok(dir.path(), &["principal", "remove", "alice"]);
    assert!(!ok(dir.path(), &["principal", "list"]).contains("alice"));
    assert!(fails(dir.path(), &["principal", "add", "wes"]).contains("already exists"));
    assert!(fails(dir.path(), &["principal", "add", "has space"]).contains("not a principal name"));
    assert!(fails(dir.path(), &["principal", "remove", "ghost"]).contains("does not exist"));
    assert!(
        fails(dir.path(), &["--as", "wes", "principal", "add", "x"])
            .contains("needs the admin role")
    );
    assert!(fails(dir.path(), &["--as", "ghost", "principal", "list"]).contains("no principal"));
}

#[test]
fn a_gated_call_runs_once_after_an_approver_approves_it_from_the_cli() {
    let dir = setup();
    ok(
        dir.path(),
        &[
            "--as",
            "wes",
            "call",
            "kv_set",
            "--arg",
            "key=doomed",
            "--arg",
            "value=1",
        ],
    );
    let refused = fails(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=doomed"],
    );
    assert!(refused.contains("(approval_required)"), "{refused}");
    let pending = ok(dir.path(), &["approvals", "list"]);
    let id = pending
        .split_whitespace()
        .next()
        .expect("one pending approval")
        .to_owned();
    assert!(
        pending.contains("wes") && pending.contains("kv_delete"),
        "{pending}"
    );
    // wes cannot approve (no approver role); alice can.
    assert!(
        fails(dir.path(), &["--as", "wes", "approvals", "approve", &id])
            .contains("may not resolve")
    );
    let approved = ok(dir.path(), &["--as", "alice", "approvals", "approve", &id]);
    assert!(
        approved.contains("wes may call kv_delete once"),
        "{approved}"
    );
    let deleted = ok(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=doomed"],
    );
    assert!(deleted.contains("\"deleted\": true"), "{deleted}");
    let again = fails(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=doomed"],
    );
    assert!(again.contains("(approval_required)"), "{again}");
    assert!(ok(dir.path(), &["approvals", "list", "--status", "used"]).contains(&id));
}

#[test]
fn nobody_approves_their_own_call_and_denials_stick() {
    let dir = setup();
    ok(
        dir.path(),
        &[
            "principal",
            "set-roles",
            "wes",
            "--roles",
            "writer,approver",
        ],
    );
    fails(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=k"],
    );
    let id = ok(dir.path(), &["approvals", "list"])
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let own = fails(dir.path(), &["--as", "wes", "approvals", "approve", &id]);
    assert!(own.contains("its own call"), "{own}");
    ok(dir.path(), &["approvals", "deny", &id]);
    let denied = fails(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=k"],
    );
    assert!(denied.contains("(approval_denied)"), "{denied}");
    assert!(fails(dir.path(), &["approvals", "approve", &id]).contains("already denied"));
}

#[test]
fn call_arguments_are_checked_and_explained() {
    let dir = setup();
    let bad = fails(dir.path(), &["call", "kv_get", "--arg", "key"]);
    assert!(bad.contains("must look like key=value"), "{bad}");
    // A `str` field takes the text as it is...
    let text = ok(dir.path(), &["call", "kv_get", "--arg", "key=3"]);
    assert!(text.contains("\"key\": \"3\""), "{text}");
    // ...and JSON says exactly what it says.
    let wrong = fails(
        dir.path(),
        &["call", "kv_get", "--args-json", r#"{"key": 3}"#],
    );
    assert!(
        wrong.contains("argument `key` must be str, got int"),
        "{wrong}"
    );
    let json = ok(
        dir.path(),
        &[
            "call",
            "kv_get",
            "--args-json",
            r#"{"key": "3", "default": "none"}"#,
        ],
    );
    assert!(json.contains("\"value\": \"none\""), "{json}");
    let not_object = fails(dir.path(), &["call", "kv_get", "--args-json", "[1]"]);
    assert!(not_object.contains("must be a JSON object"), "{not_object}");
}

/// The id in an `approval_required` refusal's text ("... approval (id X)").
fn approval_id_in(text: &str) -> String {
    let (_, rest) = text
        .split_once("needs an approval (id ")
        .unwrap_or_else(|| panic!("no approval id in {text}"));
    rest.split(')').next().unwrap().to_owned()
}

/// Findings 2 and 3 of the hardening issue: an approval a script's run asks for binds to the
/// chain of runs it was made in. Nobody in that chain (who started the run) nor the script's
/// author resolves it, and only a call through the same chain uses it: before, `p3`'s
/// approval of `p1`'s call through `script__w` let `p2`'s identical call through
/// `script__w` succeed, and `p1` could approve its own script's gated write.
#[test]
fn an_approval_asked_for_inside_a_run_binds_to_the_chain_that_asked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        crate::config_path(dir.path()),
        r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.writer]
call = ["kv_*", "script__*"]
[policy.approvals]
require = ["kv_set"]
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("w.star"),
        "def main(*, v: int):\n    return kv_set(key = \"w\", value = str(v))\n",
    )
    .unwrap();
    for (who, roles) in [
        ("ada", "author,writer,approver"),
        ("pat", "publisher"),
        ("p1", "writer,approver"),
        ("p2", "writer,approver"),
        ("p3", "approver"),
    ] {
        ok(dir.path(), &["principal", "add", who, "--roles", roles]);
    }
    ok(
        dir.path(),
        &["--as", "ada", "script", "save", "w", "w.star"],
    );
    ok(dir.path(), &["--as", "pat", "script", "publish", "w"]);
    let call = |who: &str| {
        crate::larkgate_in(
            dir.path(),
            &["--as", who, "call", "script__w", "--arg", "v=2"],
        )
    };

    let refused = call("p1");
    assert!(!refused.status.success());
    let refused = crate::stderr(&refused);
    assert!(refused.contains("approval_required"), "{refused}");
    let id = approval_id_in(&refused);
    let listed = ok(dir.path(), &["approvals", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    // The approvals_list tool's answer: the page, and no next one.
    assert!(listed.get("next").is_none(), "{listed}");
    let listed = &listed["approvals"];
    assert_eq!(listed[0]["principal"], "script:w", "{listed}");
    assert_eq!(listed[0]["through"], serde_json::json!(["p1"]));
    assert_eq!(listed[0]["script_authors"], serde_json::json!(["ada"]));
    // The approver sees the run and its script, and the arguments the script passed.
    assert_eq!(listed[0]["script"], "w v1", "{listed}");
    assert!(listed[0]["run_id"].is_string(), "{listed}");
    assert_eq!(
        listed[0]["arguments"],
        serde_json::json!({"key": "w", "value": "2"}),
        "{listed}"
    );

    // The run's starter and the script's author may not resolve it.
    for barred in ["p1", "ada"] {
        let own = fails(dir.path(), &["--as", barred, "approvals", "approve", &id]);
        assert!(own.contains("inside a script run"), "{barred}: {own}");
    }
    assert!(ok(dir.path(), &["approvals", "list"]).contains(&format!("{id}  pending")),);
    let approved = ok(dir.path(), &["--as", "p3", "approvals", "approve", &id]);
    assert!(
        approved
            .contains("script:w may call kv_set once with those arguments in a run started by p1"),
        "{approved}"
    );

    // Another caller of the same script with the same arguments needs its own approval.
    let other = call("p2");
    assert!(!other.status.success());
    let other = crate::stderr(&other);
    assert!(other.contains("approval_required"), "{other}");
    assert_ne!(approval_id_in(&other), id);

    // The chain that asked uses it, once.
    let ran = call("p1");
    assert!(ran.status.success(), "{}", crate::stderr(&ran));
    assert!(ok(dir.path(), &["approvals", "list", "--status", "used"]).contains(&id));
    let again = call("p1");
    assert!(!again.status.success());
    assert!(crate::stderr(&again).contains("approval_required"));
}

/// Issue 21, part 1: an approver sees what they approve. A pending approval shows the call's
/// canonical arguments (a configured field as `<redacted>`, still bound by the hash) in the CLI,
/// its JSON and the `approvals_list` tool; approve and deny take a reason, recorded with the
/// approval and in the audit chain and told to a denied caller. (That a request nobody decides
/// expires is the platform's test, on a clock it moves.)
#[test]
fn approvers_see_the_arguments_and_give_reasons_a_denied_caller_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        "[policy.roles.writer]\ncall = [\"kv_*\"]\n\
         [policy.approvals]\nrequire = [\"kv_set\"]\nredact = [\"value\"]\n",
    )
    .unwrap();
    ok(d, &["principal", "add", "wes", "--roles", "writer"]);
    ok(d, &["principal", "add", "alice", "--roles", "approver"]);
    let set = |key: &str, value: &str| {
        let (key, value) = (format!("key={key}"), format!("value={value}"));
        crate::larkgate_in(
            d,
            &[
                "--as", "wes", "call", "kv_set", "--arg", &key, "--arg", &value,
            ],
        )
    };
    let refused = crate::stderr(&set("important", "s3cret"));
    let id = approval_id_in(&refused);

    // What the approver sees: the call as it was made, the secret value hidden.
    let listed = ok(d, &["approvals", "list"]);
    assert!(
        listed.contains(r#"kv_set(key="important", value="<redacted>")"#),
        "{listed}"
    );
    assert!(!listed.contains("s3cret"), "{listed}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(d, &["approvals", "list", "--json"])).unwrap();
    let json = &json["approvals"];
    assert_eq!(
        json[0]["arguments"],
        serde_json::json!({"key": "important", "value": "<redacted>"}),
        "{json}"
    );
    assert_eq!(json[0]["id"], id.as_str());
    let tool = ok(d, &["--as", "alice", "call", "approvals_list"]);
    assert!(
        tool.contains("\"<redacted>\"") && !tool.contains("s3cret"),
        "{tool}"
    );

    // Denied with a reason: the caller is told why, and the chain has it.
    ok(
        d,
        &[
            "--as",
            "alice",
            "approvals",
            "deny",
            &id,
            "--reason",
            "that key is in use",
        ],
    );
    let denied = crate::stderr(&set("important", "s3cret"));
    assert!(
        denied.contains("(approval_denied)") && denied.contains("that key is in use"),
        "{denied}"
    );
    // The same key with another value is another call: a request of its own.
    let other = approval_id_in(&crate::stderr(&set("important", "other")));
    assert_ne!(other, id, "the hash covers the redacted field too");
    ok(
        d,
        &[
            "--as",
            "alice",
            "approvals",
            "approve",
            &other,
            "--reason",
            "rotating",
        ],
    );
    let written = ok(
        d,
        &[
            "--as",
            "wes",
            "call",
            "kv_set",
            "--arg",
            "key=important",
            "--arg",
            "value=other",
        ],
    );
    assert!(written.contains("\"created\": true"), "{written}");
    let tail = ok(d, &["audit", "tail", "--principal", "alice", "--json"]);
    assert!(
        tail.contains(&format!("approval {id} for wes denied: that key is in use"))
            && tail.contains(&format!("approval {other} for wes approved: rotating")),
        "{tail}"
    );
    let long = "x".repeat(1001);
    let third = approval_id_in(&crate::stderr(&set("k3", "v")));
    assert!(
        fails(
            d,
            &[
                "--as",
                "alice",
                "approvals",
                "approve",
                &third,
                "--reason",
                &long
            ]
        )
        .contains("at most 1000 bytes")
    );

    // (A request nobody decides in time expires: the platform's approvals tests move its
    // clock past pending_ttl_seconds.)
    // A forged id is unknown, a used one is not approved twice.
    assert!(
        fails(
            d,
            &["--as", "alice", "approvals", "approve", "0123456789abcdef"]
        )
        .contains("no approval")
    );
    assert!(fails(d, &["--as", "alice", "approvals", "approve", &other]).contains("already used"));
}

/// An approver is shown what the call would do, not what its arguments make a terminal show:
/// a key with bidirectional controls (`prod-\u{202e}bd-tset\u{202c}` displays as
/// `prod-test-db`) and terminal escapes is listed with each such character as an escape, and a
/// fullwidth value that shows as another is named with what it shows as.
#[test]
fn approvals_list_shows_hidden_characters_as_escapes_and_names_look_alikes() {
    let dir = setup();
    let key = "prod-\u{202e}bd-tset\u{202c}\u{1b}]0;owned\u{7}";
    let refused = fails(
        dir.path(),
        &[
            "--as",
            "wes",
            "call",
            "kv_delete",
            "--arg",
            &format!("key={key}"),
        ],
    );
    assert!(refused.contains("(approval_required)"), "{refused}");
    fails(
        dir.path(),
        &["--as", "wes", "call", "kv_delete", "--arg", "key=ｐｒｏｄ"],
    );
    let pending = ok(dir.path(), &["approvals", "list"]);
    assert!(
        !pending.contains(['\u{202e}', '\u{202c}', '\u{1b}', '\u{7}']),
        "a hidden character reached the terminal: {pending:?}"
    );
    assert!(
        pending.contains(r#"key="prod-\u202ebd-tset\u202c\u001b]0;owned\u0007""#),
        "{pending}"
    );
    assert!(
        pending.contains(r#"key="ｐｒｏｄ" [look-alikes: "ｐｒｏｄ" shows as "prod"]"#),
        "{pending}"
    );

    // The console's approvals page, as the approver alice opens it.
    let d = dir.path();
    let alice = ok(d, &["token", "create", "--principal", "alice"])
        .trim()
        .to_owned();
    let server = crate::serve::Server::start(d);
    let (status, page) = crate::serve::console_page(&server.url, &alice, "/admin/approvals");
    assert_eq!(status, 200);
    assert!(
        !page.contains(['\u{202e}', '\u{202c}', '\u{1b}', '\u{7}']),
        "a hidden character reached the page"
    );
    assert!(
        page.contains(r"prod-\u202ebd-tset\u202c\u001b]0;owned\u0007"),
        "{page}"
    );
    assert!(
        page.contains("These values show as other values:")
            && page.contains("&quot;ｐｒｏｄ&quot; shows as &quot;prod&quot;"),
        "{page}"
    );
    assert!(server.stop().success());
}

/// The flood that buried approvers: a writer sends gated calls with half a megabyte of
/// arguments each over HTTP. Past the caps, each is refused `limit_exceeded` and recorded
/// nowhere; what is recorded is a preview, so `approvals_list`, the console page and
/// `approvals list` stay small, a page at a time, and say that each is a preview.
#[test]
fn a_flood_of_huge_gated_calls_is_capped_and_approvers_see_small_pages_of_previews() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        POLICY.replace(
            "require = [\"kv_delete\"]",
            "require = [\"kv_delete\", \"kv_set\"]\nmax_pending_per_principal = 5\n\
             max_pending = 6",
        ),
    )
    .unwrap();
    ok(d, &["principal", "add", "wes", "--roles", "writer"]);
    ok(d, &["principal", "add", "ada", "--roles", "writer"]);
    ok(d, &["principal", "add", "alice", "--roles", "approver"]);
    let token = |name: &str| {
        ok(d, &["token", "create", "--principal", name])
            .trim()
            .to_owned()
    };
    let (wes, ada, alice) = (token("wes"), token("ada"), token("alice"));
    let server = crate::serve::Server::start(d);
    let url = server.url.clone();
    let code = |answer: &serde_json::Value| {
        answer["result"]["_meta"]["larkgate/envelope"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned()
    };
    let huge = |i: usize| serde_json::json!({"key": format!("k{i}"), "value": format!("{i}{}", "x".repeat(512 * 1024))});
    let codes: Vec<String> = (0..7)
        .map(|i| {
            code(&crate::traces::call(
                &url,
                &wes,
                None,
                None,
                "kv_set",
                huge(i),
            ))
        })
        .collect();
    assert_eq!(
        codes,
        [
            "approval_required",
            "approval_required",
            "approval_required",
            "approval_required",
            "approval_required",
            "limit_exceeded",
            "limit_exceeded"
        ]
    );
    let refused = crate::traces::call(&url, &wes, None, None, "kv_set", huge(9));
    let message = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        message.contains("you already have 5 calls waiting") && !message.contains("xxxx"),
        "{message}"
    );
    assert_eq!(
        code(&crate::traces::call(
            &url,
            &ada,
            None,
            None,
            "kv_set",
            huge(0)
        )),
        "approval_required"
    );
    let refused = crate::traces::call(&url, &ada, None, None, "kv_set", huge(1));
    let message = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(message.contains("6 calls are already waiting"), "{message}");

    // The approver's tool answers, a page at a time, each approval a preview.
    let first = crate::traces::call(
        &url,
        &alice,
        None,
        None,
        "approvals_list",
        serde_json::json!({}),
    );
    assert_eq!(first["result"]["isError"], false, "{first}");
    let answer = &first["result"]["structuredContent"];
    let listed = answer["approvals"].as_array().unwrap();
    assert_eq!(listed.len(), 6);
    assert!(
        first.to_string().len() < 128 * 1024,
        "{} bytes",
        first.to_string().len()
    );
    for approval in listed {
        assert_eq!(approval["arguments_whole"], false, "{approval}");
        assert!(approval["arguments_bytes"].as_u64().unwrap() > 512 * 1024);
    }
    let paged = crate::traces::call(
        &url,
        &alice,
        None,
        None,
        "approvals_list",
        serde_json::json!({"limit": 4}),
    );
    let next = paged["result"]["structuredContent"]["next"]
        .as_str()
        .unwrap()
        .to_owned();
    let rest = crate::traces::call(
        &url,
        &alice,
        None,
        None,
        "approvals_list",
        serde_json::json!({"limit": 4, "after": next}),
    );
    let rest = &rest["result"]["structuredContent"];
    assert_eq!(rest["approvals"].as_array().unwrap().len(), 2, "{rest}");
    assert!(rest.get("next").is_none(), "{rest}");

    // The console page: small, saying each is a preview, with a link to older ones.
    let (status, page) = crate::serve::console_page(&url, &alice, "/admin/approvals");
    assert_eq!(status, 200);
    assert!(page.len() < 512 * 1024, "{} bytes", page.len());
    assert!(page.contains("A preview:"), "{page}");
    // Approvers see how many wait: in the console's navigation, and on /metrics.
    assert!(
        page.contains("title=\"6 waiting for a decision\""),
        "{page}"
    );
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.ops))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "larkgate_approvals_pending 6"),
        "{metrics}"
    );
    // The command line: a page, and the command that shows the next.
    let listed = ok(d, &["approvals", "list", "--limit", "4"]);
    assert!(listed.contains("[a preview: "), "{listed}");
    let older = listed
        .lines()
        .find_map(|l| l.strip_prefix("older ones: "))
        .unwrap_or_else(|| panic!("{listed}"));
    let args: Vec<&str> = older.split_whitespace().skip(1).collect();
    let rest = ok(d, &args);
    assert_eq!(rest.lines().count(), 2, "{rest}");
    assert!(server.stop().success());
}

/// `approvals list --watch` prints each new request as it comes, with how long it may wait.
#[test]
fn approvals_list_watch_prints_new_requests_as_they_come() {
    use std::io::BufRead;
    let dir = setup();
    let d = dir.path();
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(["approvals", "list", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
    let mut stderr = std::io::BufReader::new(watch.stderr.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "no pending approvals");
    // Ready: it says it is watching.
    loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "watch exited");
        if line.contains("watching for new requests") {
            break;
        }
    }
    let mut ids = Vec::new();
    for key in ["first", "second"] {
        let refused = fails(
            d,
            &[
                "--as",
                "wes",
                "call",
                "kv_delete",
                "--arg",
                &format!("key={key}"),
            ],
        );
        ids.push(approval_id_in(&refused));
    }
    for (id, key) in ids.iter().zip(["first", "second"]) {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        assert!(
            line.starts_with(id.as_str())
                && line.contains(&format!("kv_delete(key=\"{key}\")"))
                && line.contains("expires in 59 min"),
            "{line}"
        );
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

/// `larkgate ... | head`: a reader that stops early ends the command quietly (no "Broken pipe"
/// on stderr, success), here for JSON written through serde (whose error wraps the I/O one).
#[test]
fn a_reader_that_stops_reading_early_ends_the_command_quietly() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        "[policy.roles.writer]\ncall = [\"kv_*\"]\n[policy.approvals]\nrequire = [\"kv_set\"]\n",
    )
    .unwrap();
    ok(d, &["principal", "add", "wes", "--roles", "writer"]);
    // Twenty requests of 8 KiB each: far more than a pipe holds.
    let value = format!("value={}", "v".repeat(8 * 1024));
    for i in 0..20 {
        let refused = crate::larkgate_in(
            d,
            &[
                "--as",
                "wes",
                "call",
                "kv_set",
                "--arg",
                &format!("key=k{i}"),
                "--arg",
                &value,
            ],
        );
        assert!(crate::stderr(&refused).contains("approval_required"));
    }
    let args = [
        "approvals",
        "list",
        "--json",
        "--status",
        "all",
        "--limit",
        "100",
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The reader is gone (as `head` exits), long before the command has written it all.
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", crate::stderr(&output));
    assert_eq!(crate::stderr(&output), "");
}

/// `principal add` refuses a name that differs from an existing one only in case, and says
/// when a role it gives (as `set-roles` does) is one nothing defines.
#[test]
fn principal_add_refuses_case_twins_and_warns_of_roles_nothing_defines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        "[policy.roles.viewer]\ncall = [\"kv_get\"]\n",
    )
    .unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "viewer"]);
    let twin = crate::fails(d, &["principal", "add", "Ada", "--roles", "viewer"]);
    assert!(
        twin.contains(
            "there is already a principal \"ada\", which differs from \"Ada\" only in case"
        ),
        "{twin}"
    );
    let listed = ok(d, &["principal", "list"]);
    assert!(!listed.contains("Ada"), "{listed}");
    // A role nothing defines: added, with a warning; a defined or built-in one: no warning.
    let added = crate::larkgate_in(d, &["principal", "add", "bob", "--roles", "viewr,author"]);
    assert!(added.status.success(), "{}", crate::stderr(&added));
    let warned = crate::stderr(&added);
    assert!(
        warned.contains(
            "warning: the principal \"bob\" has the role \"viewr\", which no [policy.roles] defines"
        ),
        "{warned}"
    );
    assert!(!warned.contains("\"author\""), "{warned}");
    let set = crate::larkgate_in(d, &["principal", "set-roles", "bob", "--roles", "viewer"]);
    assert!(set.status.success());
    assert_eq!(crate::stderr(&set), "");
}
