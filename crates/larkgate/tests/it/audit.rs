//! `larkgate audit verify|tail|head` on a real data directory, including tampering.

use crate::{fails, ok};

fn with_history() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(dir.path(), &["principal", "add", "wes", "--roles", "admin"]);
    for i in 0..3 {
        ok(
            dir.path(),
            &[
                "--as",
                "wes",
                "call",
                "kv_set",
                "--arg",
                &format!("key=k{i}"),
                "--arg",
                "value=v",
            ],
        );
    }
    fails(dir.path(), &["--as", "wes", "call", "no_such_tool"]);
    dir
}

fn raw(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join("larkgate-data").join("larkgate.sqlite3")).unwrap()
}

#[test]
fn tail_shows_calls_and_refusals_and_filters() {
    let dir = with_history();
    let tail = ok(dir.path(), &["audit", "tail", "-n", "3"]);
    assert_eq!(tail.lines().count(), 3, "{tail}");
    let last = tail.lines().last().unwrap();
    assert!(last.contains("refusal") && last.contains("wes"), "{tail}");
    assert!(tail.contains("no_such_tool -> not_found"), "{tail}");
    let only = ok(dir.path(), &["audit", "tail", "--tool", "kv_set", "--json"]);
    assert_eq!(only.lines().count(), 6, "3 intents and 3 outcomes: {only}");
    // Nothing matching: nothing on stdout, and a word on stderr for whoever reads it.
    let none = crate::larkgate_in(dir.path(), &["audit", "tail", "--tool", "nothing_like_it"]);
    assert!(none.status.success());
    assert_eq!(crate::stdout(&none), "");
    assert!(crate::stderr(&none).contains("no audit records match"));
    let head = ok(dir.path(), &["audit", "head"]);
    let (seq, hash) = head.trim().split_once(' ').unwrap();
    assert_eq!(seq, "8", "1 event + 3 × 2 + 1 refusal");
    assert_eq!(hash.len(), 64);
}

#[test]
fn verify_passes_an_intact_chain() {
    let dir = with_history();
    let report = ok(dir.path(), &["audit", "verify"]);
    assert!(report.contains("checked 8 records"), "{report}");
    assert!(report.contains("the chain is intact"), "{report}");
    // Against the head `audit head` printed (kept elsewhere), as printed.
    let head = ok(dir.path(), &["audit", "head"]);
    let report = ok(dir.path(), &["audit", "verify", "--head", head.trim()]);
    assert!(report.contains("the chain is intact"), "{report}");
    let ahead = format!("9:{}", head.trim().split_once(' ').unwrap().1);
    let broken = crate::fails(dir.path(), &["audit", "verify", "--head", &ahead]);
    assert!(broken.contains("the audit chain is broken"), "{broken}");
    let error = crate::fails(dir.path(), &["audit", "verify", "--head", "8"]);
    assert!(error.contains("is not SEQ:HASH"), "{error}");
}

#[test]
fn verify_names_an_edited_record() {
    let dir = with_history();
    raw(dir.path())
        .execute("UPDATE audit SET tool = 'kv_get' WHERE seq = 3", [])
        .unwrap();
    let output = crate::larkgate_in(dir.path(), &["audit", "verify"]);
    assert!(!output.status.success());
    assert!(
        crate::stdout(&output).contains("BROKEN at record 3"),
        "{}",
        crate::stdout(&output)
    );
}

#[test]
fn verify_names_a_deleted_middle_record() {
    let dir = with_history();
    raw(dir.path())
        .execute("DELETE FROM audit WHERE seq = 4", [])
        .unwrap();
    let output = crate::larkgate_in(dir.path(), &["audit", "verify"]);
    assert!(!output.status.success());
    let text = crate::stdout(&output);
    assert!(
        text.contains("BROKEN at record 5: expected sequence 4"),
        "{text}"
    );
}

#[test]
fn verify_detects_deleted_last_records() {
    let dir = with_history();
    raw(dir.path())
        .execute("DELETE FROM audit WHERE seq >= 7", [])
        .unwrap();
    let output = crate::larkgate_in(dir.path(), &["audit", "verify"]);
    assert!(!output.status.success());
    let text = crate::stdout(&output);
    assert!(
        text.contains("BROKEN head: the head is at sequence 8 but the last record is 6"),
        "{text}"
    );
}
