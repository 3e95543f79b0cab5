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

/// Checkpoints are signed with the data directory's key, made at the first command that
/// chains calls (said on stderr, the file its owner's only); `audit key` prints its public half;
/// `audit verify --key` checks every checkpoint against the keys given and names one it does
/// not hold; a key that is no key is refused saying so. Sealed with the credential key when one
/// is set, the key does not open without it.
#[test]
fn checkpoints_are_signed_by_the_directory_s_key_and_checked_against_the_keys_held() {
    use std::os::unix::fs::PermissionsExt as _;
    let history = |dir: &std::path::Path, env: &[(&str, &str)]| {
        std::fs::write(crate::config_path(dir), "[audit]\ncheckpoint_records = 2\n").unwrap();
        ok(dir, &["principal", "add", "wes", "--roles", "admin"]);
        let mut said = String::new();
        for i in 0..3 {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
                .current_dir(dir)
                .envs(env.iter().copied())
                .args([
                    "--as",
                    "wes",
                    "call",
                    "kv_set",
                    "--arg",
                    &format!("key=k{i}"),
                ])
                .args(["--arg", "value=v"])
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", crate::stderr(&output));
            said.push_str(&crate::stderr(&output));
        }
        said
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fresh = fails(d, &["audit", "key"]);
    assert!(fresh.contains("has no audit signing key yet"), "{fresh}");
    let said = history(d, &[]);
    assert_eq!(
        said.matches("made the audit signing key").count(),
        1,
        "{said}"
    );
    let key = ok(d, &["audit", "key"]).trim().to_owned();
    assert!(said.contains(&key) && said.contains("not sealed"), "{said}");
    let file = d.join("larkgate-data").join("audit-signing.key");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let verified = ok(d, &["audit", "verify", "--key", &key]);
    assert!(
        verified.contains(&format!(
            "signed checkpoints, signed by {key} (keys you gave"
        )),
        "{verified}"
    );
    assert!(verified.contains("the chain is intact"), "{verified}");

    // Another directory's key is not this chain's.
    let elsewhere = tempfile::tempdir().unwrap();
    history(elsewhere.path(), &[]);
    let other = ok(elsewhere.path(), &["audit", "key"]).trim().to_owned();
    assert_ne!(other, key);
    let output = crate::larkgate_in(d, &["audit", "verify", "--key", &other]);
    assert!(!output.status.success());
    let said = crate::stdout(&output);
    assert!(
        said.contains("BROKEN checkpoint") && said.contains("a key you did not give"),
        "{said}"
    );
    let refused = fails(d, &["audit", "verify", "--key", "not-a-key"]);
    assert!(
        refused.contains("is not an Ed25519 public key"),
        "{refused}"
    );

    // Sealed with the credential key: it does not open without it, nor with another.
    let sealed = tempfile::tempdir().unwrap();
    let credential = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let said = history(sealed.path(), &[("LARKGATE_CREDENTIAL_KEY", credential)]);
    assert!(said.contains("sealed with the credential key"), "{said}");
    let text =
        std::fs::read_to_string(sealed.path().join("larkgate-data/audit-signing.key")).unwrap();
    assert!(
        text.starts_with("larkgate audit signing key v1 sealed\n"),
        "{text}"
    );
    let refused = fails(sealed.path(), &["--as", "wes", "call", "clock_now"]);
    assert!(
        refused.contains("is sealed with a credential key: set LARKGATE_CREDENTIAL_KEY"),
        "{refused}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(sealed.path())
        .env(
            "LARKGATE_CREDENTIAL_KEY",
            "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=",
        )
        .args(["--as", "wes", "call", "clock_now"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        crate::stderr(&output).contains("does not open with this credential key"),
        "{}",
        crate::stderr(&output)
    );
}
