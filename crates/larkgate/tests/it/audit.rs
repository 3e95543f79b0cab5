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

/// The Python verifier of bundles `docs/operations.md` gives auditors, written into `dir`.
pub(crate) fn docs_verifier(dir: &std::path::Path) -> std::path::PathBuf {
    let docs = std::fs::read_to_string(crate::root().join("docs/operations.md")).unwrap();
    let section = &docs[docs.find("### Bundles for an auditor").unwrap()..];
    let start = section.find("```python\n").unwrap() + "```python\n".len();
    let script = &section[start..start + section[start..].find("```\n").unwrap()];
    let verifier = dir.join("verify_bundle.py");
    std::fs::write(&verifier, script).unwrap();
    verifier
}

/// The Python verifier `docs/operations.md` gives auditors, as they would run it: it takes
/// a bundle `audit export` wrote and catches each way of tampering with one, as `audit verify
/// --bundle` does.
#[test]
fn the_python_verifier_in_the_docs_accepts_an_exported_bundle_and_catches_each_tampering() {
    let work = tempfile::tempdir().unwrap();
    let verifier = docs_verifier(work.path());

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), "[audit]\ncheckpoint_records = 2\n").unwrap();
    ok(d, &["principal", "add", "wes", "--roles", "admin"]);
    for i in 0..6 {
        let key = format!("key=k{i}");
        ok(
            d,
            &[
                "--as", "wes", "call", "kv_set", "--arg", &key, "--arg", "value=v",
            ],
        );
    }
    let key = ok(d, &["audit", "key"]).trim().to_owned();
    let export = |name: &str, range: &[&str]| {
        let file = work.path().join(name);
        let mut args = vec!["audit", "export"];
        args.extend_from_slice(range);
        args.extend(["--out", file.to_str().unwrap()]);
        ok(d, &args);
        std::fs::read_to_string(file).unwrap()
    };
    let whole = export("whole.jsonl", &["--from", "1"]);
    let early = export("early.jsonl", &["--from", "1", "--to", "3"]);
    let early_end: serde_json::Value = serde_json::from_str(early.lines().last().unwrap()).unwrap();
    // A later range, one record after the early one's end left out.
    let late_from = (early_end["end"].as_u64().unwrap() + 2).to_string();
    let late = export("late.jsonl", &["--from", &late_from]);

    // What the Python verifier and larkgate's say of a bundle's text, given these keys.
    let check = |name: &str, text: &str, keys: &[&str]| -> (Result<String, String>, bool) {
        let file = work.path().join(format!("check-{name}.jsonl"));
        std::fs::write(&file, text).unwrap();
        let output = std::process::Command::new(crate::python())
            .arg(&verifier)
            .arg(&file)
            .args(keys)
            .output()
            .unwrap();
        let python = if output.status.success() {
            Ok(crate::stdout(&output))
        } else {
            Err(crate::stderr(&output))
        };
        let mut args = vec!["audit", "verify", "--bundle", file.to_str().unwrap()];
        for key in keys {
            args.extend(["--key", key]);
        }
        let ours = crate::larkgate_in(work.path(), &args).status.success();
        (python, ours)
    };
    for (name, text) in [("whole", &whole), ("early", &early), ("late", &late)] {
        let (python, ours) = check(name, text, &[&key]);
        let said = python.unwrap_or_else(|e| panic!("the verifier refused {name}: {e}"));
        assert!(said.starts_with("intact: records "), "{said}");
        assert!(ours, "larkgate refused {name}");
    }

    let lines: Vec<&str> = whole.lines().collect();
    let records = lines.len() - 3;
    assert!(records >= 10, "{whole}");
    let joined = |lines: &[String]| lines.join("\n") + "\n";
    let owned: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    // A byte changed in a record.
    let call = 1 + lines[1..]
        .iter()
        .position(|l| l.contains("\"principal\":\"wes\"") && l.contains("\"seq\":5,"))
        .unwrap_or_else(|| panic!("record 5 is no call of wes: {whole}"));
    let mut changed = owned.clone();
    changed[call] = changed[call].replacen("\"wes\"", "\"wex\"", 1);
    // A record removed.
    let mut removed = owned.clone();
    removed.remove(call);
    // The chain rewritten from the middle on with valid hashes.
    let mut rewritten = owned.clone();
    let mut prev: Option<String> = None;
    for line in rewritten.iter_mut().take(records + 1).skip(call) {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut record: larkgate_store::AuditRecord =
            serde_json::from_value(value["record"].take()).unwrap();
        if let Some(prev) = &prev {
            record.prev_hash = prev.clone();
        } else {
            record.principal = "someone-else".into();
        }
        record.hash = larkgate_store::record_hash(&record);
        prev = Some(record.hash.clone());
        *line = serde_json::json!({ "record": record }).to_string();
    }
    // The last checkpoint's signed text changed.
    let mut resigned = owned.clone();
    let at = lines.len() - 2;
    let mut checkpoint: serde_json::Value = serde_json::from_str(&resigned[at]).unwrap();
    checkpoint["checkpoint"]["at_ms"] = serde_json::json!(1);
    resigned[at] = checkpoint.to_string();
    // Two ranges spliced: the early records, then the late ones, under the late checkpoint.
    let early: Vec<&str> = early.lines().collect();
    let late: Vec<&str> = late.lines().collect();
    let spliced: Vec<String> = early[..early.len() - 2]
        .iter()
        .chain(&late[1..])
        .map(|l| l.to_string())
        .collect();

    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(elsewhere.path()), "").unwrap();
    ok(
        elsewhere.path(),
        &["principal", "add", "x", "--roles", "admin"],
    );
    ok(elsewhere.path(), &["--as", "x", "call", "clock_now"]);
    let stranger = ok(elsewhere.path(), &["audit", "key"]).trim().to_owned();

    for (name, text, keys, why) in [
        (
            "changed",
            joined(&changed),
            vec![key.as_str()],
            "was changed",
        ),
        ("removed", joined(&removed), vec![&key], "is out of place"),
        ("rewritten", joined(&rewritten), vec![&key], "sign"),
        (
            "resigned",
            joined(&resigned),
            vec![&key],
            "has a bad signature",
        ),
        ("spliced", joined(&spliced), vec![&key], "is out of place"),
        (
            "stranger",
            whole.clone(),
            vec![&stranger],
            "a key not given",
        ),
        ("no-key", whole.clone(), vec![], "a key not given"),
    ] {
        let (python, ours) = check(name, &text, &keys);
        let said = python
            .err()
            .unwrap_or_else(|| panic!("{name}: the verifier took it"));
        assert!(
            said.contains("BROKEN: ") && said.contains(why),
            "{name}: {said}"
        );
        assert!(!ours, "{name}: larkgate took it");
    }
}
