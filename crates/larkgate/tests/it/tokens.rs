//! `larkgate token ...`: created for registered principals only, shown once, listed without
//! secrets, revoked by id, managed by admins only.

use crate::{fails, larkgate_in, ok, stderr, stdout};

#[test]
fn tokens_are_created_shown_once_listed_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let missing = fails(dir, &["token", "create", "--principal", "ghost"]);
    assert!(
        missing.contains("there is no principal \"ghost\""),
        "{missing}"
    );

    ok(dir, &["principal", "add", "agent", "--roles", "author"]);
    let created = larkgate_in(
        dir,
        &[
            "token",
            "create",
            "--principal",
            "agent",
            "--expires",
            "30d",
        ],
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let token = stdout(&created).trim().to_owned();
    assert!(token.starts_with("lgt_") && token.len() == 60, "{token}");
    assert!(stderr(&created).contains("only time it is shown"));
    let id = &token[4..16];

    let listed = ok(dir, &["token", "list"]);
    assert!(listed.contains(id) && listed.contains("agent"), "{listed}");
    assert!(listed.contains("valid until"), "{listed}");
    assert!(!listed.contains(&token[17..]), "the secret is never listed");
    // The database holds no secret either.
    let secret = &token.as_bytes()[17..];
    for file in ["larkgate.sqlite3", "larkgate.sqlite3-wal"] {
        let bytes = std::fs::read(dir.join("larkgate-data").join(file)).unwrap_or_default();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret), "{file}");
    }

    let refused = fails(dir, &["--as", "agent", "token", "list"]);
    assert!(refused.contains("needs the admin role"), "{refused}");

    // Revoking by id or by the whole token.
    assert!(ok(dir, &["token", "revoke", &token]).contains(id));
    assert!(ok(dir, &["token", "list", "--principal", "agent"]).contains("revoked"));
    let unknown = fails(dir, &["token", "revoke", "nope"]);
    assert!(unknown.contains("no token"), "{unknown}");
}
