//! `larkgate backup` while `serve` runs under load, and `larkgate restore` into a new data
//! directory: everything an operator keeps comes back, the audit chain verifies against the
//! head the backup recorded and is the original's own, and the records journaled when the
//! backup was taken are in it. What a backup or restore must refuse, it refuses whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::serve::Server;
use crate::{fails, ok};

const POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.reader]
call = ["kv_get", "clock_now"]
[policy.approvals]
require = ["kv_delete"]
"#;

/// The JSON `listed`, one value or one per line, without its `age_seconds` fields.
fn ageless(listed: &str) -> String {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(fields) => {
                fields.remove("age_seconds");
                fields.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let values: Vec<serde_json::Value> = serde_json::Deserializer::from_str(listed)
        .into_iter()
        .map(|value| {
            let mut value = value.unwrap_or_else(|e| panic!("{e}: {listed}"));
            strip(&mut value);
            value
        })
        .collect();
    assert!(!values.is_empty(), "approvals are listed: {listed}");
    serde_json::to_string(&values).unwrap()
}

/// What an operator keeps in a data directory, as the commands that read it list it; `list`
/// runs one of them on the data directory and answers what it printed.
fn kept(list: impl Fn(&[&str]) -> String) -> Vec<String> {
    let aliases = |json: String| -> String {
        let listed: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut aliases: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["alias"].as_str().unwrap().to_owned())
            .collect();
        aliases.sort();
        aliases.join(",")
    };
    vec![
        list(&["principal", "list", "--json"]),
        list(&["token", "list"]),
        list(&["script", "list"]),
        // How old each approval is counts from now, which is not what a backup keeps.
        ageless(&list(&[
            "approvals",
            "list",
            "--status",
            "all",
            "--limit",
            "100",
            "--json",
        ])),
        aliases(list(&["upstream", "list", "--json"])),
    ]
}

#[test]
fn a_backup_made_under_load_restores_every_record_and_a_chain_the_original_vouches_for() {
    let peer = crate::upstreams::weather();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(
        d,
        &[
            "principal",
            "add",
            "ada",
            "--roles",
            "admin,author,publisher",
        ],
    );
    ok(d, &["principal", "add", "bob", "--roles", "reader"]);
    let token = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let bob = ok(d, &["token", "create", "--principal", "bob"])
        .trim()
        .to_owned();
    std::fs::write(
        d.join("greet.star"),
        "def main():\n    return {\"hi\": 1}\n",
    )
    .unwrap();
    ok(d, &["--as", "ada", "script", "save", "greet", "greet.star"]);
    ok(d, &["--as", "ada", "script", "publish", "greet"]);
    ok(
        d,
        &[
            "upstream",
            "add",
            "weather",
            &peer.url,
            "--allow",
            "127.0.0.1",
        ],
    );
    let server = Server::start(d);
    // A pending approval.
    let gated = crate::traces::call(
        &server.url,
        &token,
        None,
        None,
        "kv_delete",
        serde_json::json!({"key": "k"}),
    );
    assert!(gated.to_string().contains("approval_required"), "{gated}");

    // Load: a client writing as fast as it is answered, until the backup is done.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    // Told once 20 calls are answered: some are then journaled but not yet chained.
    let (twenty, some_answered) = std::sync::mpsc::channel();
    let load = {
        let (stop, answered, url, token) = (
            stop.clone(),
            answered.clone(),
            server.url.clone(),
            token.clone(),
        );
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let result = crate::traces::call(
                    &url,
                    &token,
                    None,
                    None,
                    "kv_set",
                    serde_json::json!({"key": format!("load-{n}"), "value": "x"}),
                );
                assert_ne!(result["result"]["isError"], true, "{result}");
                n += 1;
                answered.store(n, Ordering::SeqCst);
                if n == 20 {
                    let _ = twenty.send(());
                }
            }
        })
    };
    some_answered
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the load answered 20 calls before the backup");
    let before = answered.load(Ordering::SeqCst);
    let said = ok(d, &["backup", "b.sqlite3"]);
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    assert!(said.contains("recorded in the backup"), "{said}");
    assert!(
        said.contains("2 principals, 2 tokens, 1 published scripts, 1 approvals, 1 upstreams"),
        "{said}"
    );

    // Restored into a new data directory, served again.
    let restored = tempfile::tempdir().unwrap();
    let r = restored.path().join("larkgate-data");
    let r_arg = r.to_str().unwrap();
    let backup = d.join("b.sqlite3");
    let b_arg = backup.to_str().unwrap();
    let said = ok(d, &["--data-dir", r_arg, "restore", b_arg]);
    assert!(
        said.contains("the audit chain verifies up to record"),
        "{said}"
    );
    std::fs::copy(crate::config_path(d), r.join("larkgate.toml")).unwrap();
    let in_restored = |args: &[&str]| {
        let mut all = vec!["--data-dir", r_arg];
        all.extend_from_slice(args);
        ok(restored.path(), &all)
    };
    let verified = in_restored(&["audit", "verify"]);
    assert!(
        verified.contains("the chain is intact from record 1 to record")
            && verified.contains("this store is a backup taken at"),
        "{verified}"
    );
    // Every record answered before the backup began is in it.
    let records: Vec<serde_json::Value> = in_restored(&[
        "audit", "tail", "-n", "100000", "--json", "--tool", "kv_set",
    ])
    .lines()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    let outcomes = records.iter().filter(|r| r["code"] == "ok").count();
    assert!(
        outcomes >= before,
        "{outcomes} kv_set outcomes in the backup, {before} answered before it"
    );
    // Its head is one the original's chain holds.
    let head = in_restored(&["audit", "head"]);
    let head = head
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(":");
    assert!(ok(d, &["audit", "verify", "--head", &head]).contains("the chain is intact"));

    let original = kept(|args| ok(d, args));
    assert!(server.stop().success());
    let copied = kept(|args| in_restored(args));
    assert_eq!(original, copied);

    // Served again from the restored directory: the tokens work, the policy applies.
    let server = Server::start(restored.path());
    assert!(server.first_start.is_empty(), "{}", server.first_start);
    let read = crate::traces::call(
        &server.url,
        &bob,
        None,
        None,
        "kv_get",
        serde_json::json!({"key": "load-0"}),
    );
    assert_eq!(read["result"]["structuredContent"]["value"], "x", "{read}");
    assert!(server.stop().success());
}

/// What must not happen, does not: a backup over an existing file, a restore over a store,
/// a restore of a file that is not a backup or whose chain was edited; each says why and
/// leaves nothing behind.
#[test]
fn backup_and_restore_refuse_to_overwrite_and_to_restore_what_does_not_verify() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), POLICY).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    ok(
        d,
        &[
            "--as", "ada", "call", "kv_set", "--arg", "key=a", "--arg", "value=1",
        ],
    );
    std::fs::write(d.join("taken"), "x").unwrap();
    let refused = fails(d, &["backup", "taken"]);
    assert!(refused.contains("exists already"), "{refused}");
    assert_eq!(std::fs::read_to_string(d.join("taken")).unwrap(), "x");
    ok(d, &["backup", "b.sqlite3"]);
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("partial") || name.contains("written"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Over the directory it came from.
    let refused = fails(d, &["restore", "b.sqlite3"]);
    assert!(refused.contains("holds a store already"), "{refused}");

    // A store that is not a backup: the data directory's own database.
    let target = dir.path().join("new");
    let t = target.to_str().unwrap();
    let database = d.join("larkgate-data/larkgate.sqlite3");
    let refused = fails(d, &["--data-dir", t, "restore", database.to_str().unwrap()]);
    assert!(
        refused.contains("not a backup made by `larkgate backup`"),
        "{refused}"
    );

    // A backup whose chain was edited afterwards.
    std::fs::copy(d.join("b.sqlite3"), d.join("edited.sqlite3")).unwrap();
    let edited = rusqlite::Connection::open(d.join("edited.sqlite3")).unwrap();
    let changed = edited
        .execute(
            "UPDATE audit SET principal = 'mallory' WHERE principal = 'ada'",
            [],
        )
        .unwrap();
    assert!(changed > 0);
    drop(edited);
    let refused = fails(d, &["--data-dir", t, "restore", "edited.sqlite3"]);
    assert!(
        refused.contains("does not verify") && refused.contains("nothing was restored"),
        "{refused}"
    );
    let made: Vec<_> = std::fs::read_dir(&target)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect()
        })
        .unwrap_or_default();
    assert!(made.is_empty(), "{made:?}");

    // The untouched backup restores.
    let said = ok(d, &["--data-dir", t, "restore", "b.sqlite3"]);
    assert!(said.contains("1 principals"), "{said}");
}
