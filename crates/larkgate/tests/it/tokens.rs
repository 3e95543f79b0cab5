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
    // An id is base64url, so one may start with `-`: it is an id, not an option.
    let dashed = fails(dir, &["token", "revoke", "-PJrZ5mbj7SJ"]);
    assert!(dashed.contains("no token \"-PJrZ5mbj7SJ\""), "{dashed}");
}

#[test]
fn tokens_principals_and_the_audit_chain_are_read_or_managed_while_serve_runs() {
    use crate::serve::{Server, client, token_in};
    use larkgate_upstream::client::Revisions;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d);
    let admin = token_in(&server.first_start);
    let url = server.url.clone();

    // A second token, created beside the running gateway, works at once.
    let created = larkgate_in(d, &["token", "create", "--principal", "admin"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let token = stdout(&created).trim().to_owned();
    let id = token[4..16].to_owned();
    assert!(ok(d, &["token", "list"]).contains(&id));
    assert!(ok(d, &["principal", "list"]).contains("admin"));
    // Changing a principal appends to the audit chain, which the gateway owns: refused, with
    // what to do.
    let busy = fails(d, &["principal", "add", "eve", "--roles", "approver"]);
    assert!(
        busy.contains("another larkgate process is using the audit log"),
        "{busy}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let c = client(&url, &token, Revisions::Latest).await.unwrap();
        let result = c.call_tool("clock_now", serde_json::Map::new()).await;
        assert!(result.is_ok(), "{result:?}");
        c.close().await;
    });

    // The chain reads beside it: what the gateway has flushed, said so on stderr.
    let mut tail = String::new();
    for _ in 0..100 {
        let output = larkgate_in(d, &["audit", "tail"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("a running larkgate holds this audit log"),
            "{}",
            stderr(&output)
        );
        tail = stdout(&output);
        if tail.contains("clock_now") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(tail.contains("clock_now -> ok"), "{tail}");
    assert!(ok(d, &["audit", "verify"]).contains("the chain is intact"));

    // A leaked token is revoked without stopping the gateway: its next request is refused,
    // and the other token keeps working.
    assert!(ok(d, &["token", "revoke", &id]).contains(&id));
    runtime.block_on(async {
        let refused = client(&url, &token, Revisions::Latest).await.unwrap_err();
        assert!(refused.contains("Auth required"), "{refused}");
        let c = client(&url, &admin, Revisions::Latest).await.unwrap();
        assert!(
            c.call_tool("clock_now", serde_json::Map::new())
                .await
                .is_ok()
        );
        c.close().await;
    });

    // Stopped, the chain is read whole (the log opens), with nothing said about a gateway.
    assert!(server.stop().success());
    let verified = larkgate_in(d, &["audit", "verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));
    assert!(stdout(&verified).contains("the chain is intact"));
    assert!(!stderr(&verified).contains("running larkgate"));
}
