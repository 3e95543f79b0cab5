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

/// Reads the audit chain beside a running gateway until `wanted` is in it (its flusher moves
/// records into the store every 50 ms).
fn tail_until(d: &std::path::Path, wanted: &str) -> String {
    let mut tail = String::new();
    for _ in 0..100 {
        let output = larkgate_in(d, &["audit", "tail", "-n", "200"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("a running larkgate holds this audit log"),
            "{}",
            stderr(&output)
        );
        tail = stdout(&output);
        if tail.contains(wanted) {
            return tail;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{wanted:?} never reached the audit chain:\n{tail}");
}

#[test]
fn the_operator_manages_tokens_principals_and_approvals_beside_serve_and_each_change_is_chained() {
    operator_beside_serve("");
}

/// The same on PostgreSQL: the operator's events reach the gateway's chain through the
/// database's inbox.
#[test]
fn the_operator_works_beside_serve_on_postgres_too() {
    let (_schema, section) = crate::postgres_store();
    operator_beside_serve(&section);
}

/// The operator's commands beside a running `serve`, on the store `extra` configures.
fn operator_beside_serve(extra: &str) {
    use crate::serve::{Server, client, token_in};
    use larkgate_upstream::client::Revisions;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        format!(
            "[policy.roles.admin]\ncall = [\"*\"]\n[policy.approvals]\nrequire = [\"kv_delete\"]\n{extra}"
        ),
    )
    .unwrap();
    let server = Server::start(d);
    let admin = token_in(&server.first_start);
    let url = server.url.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // Principals and tokens, beside the running gateway.
    ok(d, &["principal", "add", "eve", "--roles", "approver"]);
    ok(d, &["principal", "add", "tmp"]);
    ok(d, &["principal", "set-roles", "tmp", "--roles", "writer"]);
    assert!(ok(d, &["principal", "list"]).contains("writer"));
    ok(d, &["principal", "remove", "tmp"]);
    let created = larkgate_in(d, &["token", "create", "--principal", "eve"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let eve = stdout(&created).trim().to_owned();
    let eve_id = eve[4..16].to_owned();
    assert!(ok(d, &["token", "list"]).contains(&eve_id));
    // A command that records calls needs the chain itself: refused, saying what to do instead.
    let busy = fails(d, &["call", "clock_now"]);
    assert!(busy.contains("owns the audit log"), "{busy}");
    assert!(busy.contains("larkgate client call TOOL"), "{busy}");

    // An approval requested through the gateway is resolved beside it, by eve, whom the
    // gateway has never seen before; the call then goes through.
    let approval = runtime.block_on(async {
        let c = client(&url, &admin, Revisions::Latest).await.unwrap();
        let args = serde_json::json!({"key": "k"});
        let gated = c
            .call_tool("kv_delete", args.as_object().unwrap().clone())
            .await
            .unwrap();
        let envelope =
            gated.meta.clone().expect("an envelope in _meta").0["larkgate/envelope"].clone();
        assert_eq!(envelope["code"], "approval_required", "{envelope}");
        c.close().await;
        envelope["approval_id"].as_str().unwrap().to_owned()
    });
    assert!(ok(d, &["approvals", "list"]).contains(&approval));
    let approved = ok(d, &["--as", "eve", "approvals", "approve", &approval]);
    assert!(
        approved.contains("admin may call kv_delete once"),
        "{approved}"
    );
    runtime.block_on(async {
        let c = client(&url, &admin, Revisions::Latest).await.unwrap();
        let args = serde_json::json!({"key": "k"});
        let done = c
            .call_tool("kv_delete", args.as_object().unwrap().clone())
            .await
            .unwrap();
        assert_ne!(done.is_error, Some(true), "{done:?}");
        c.close().await;
        // eve's token, created beside the gateway, works for her.
        let c = client(&url, &eve, Revisions::Latest).await.unwrap();
        let listed = c
            .call_tool("approvals_list", serde_json::Map::new())
            .await
            .unwrap();
        assert_ne!(listed.is_error, Some(true), "{listed:?}");
        c.close().await;
    });

    // A leaked token is revoked without stopping the gateway: its next request is refused,
    // and the other token keeps working.
    assert!(ok(d, &["token", "revoke", &eve_id]).contains(&eve_id));
    runtime.block_on(async {
        let refused = client(&url, &eve, Revisions::Latest).await.unwrap_err();
        assert!(refused.contains("401 Unauthorized"), "{refused}");
        let c = client(&url, &admin, Revisions::Latest).await.unwrap();
        assert!(
            c.call_tool("clock_now", serde_json::Map::new())
                .await
                .is_ok()
        );
        c.close().await;
    });

    // Every change made beside the gateway is in its chain, in the order it was made; the
    // gateway chains them as it adopts them (within its 50 ms flush, and before a call under an
    // approval), so among its own records they may come a little later than they happened
    // (their time says when).
    tail_until(d, "clock_now -> ok");
    let tail = tail_until(d, &format!("revoked token {eve_id}"));
    let in_order = |wanted: &[&str]| {
        let mut from = 0;
        for wanted in wanted {
            let at = tail[from..]
                .find(wanted)
                .unwrap_or_else(|| panic!("{wanted:?} not after position {from}:\n{tail}"));
            from += at + wanted.len();
        }
    };
    in_order(&[
        "added principal eve (user) with roles [approver]",
        "added principal tmp",
        "set roles of tmp to [writer]",
        "removed principal tmp",
        &format!("created token {eve_id} for eve"),
        &format!("approval {approval} for admin approved"),
        &format!("revoked token {eve_id}"),
    ]);
    in_order(&[
        "first start: created the principal admin",
        "kv_delete -> approval_required",
        // The call under the approval comes after the approval, wherever it was resolved.
        &format!("approval {approval} for admin approved"),
        &format!("kv_delete [direct] (under approval {approval})"),
        "kv_delete -> ok",
        "clock_now -> ok",
    ]);
    assert!(tail.contains("event    operator"), "{tail}");
    assert!(tail.contains("event    eve"), "{tail}");
    assert!(ok(d, &["audit", "verify"]).contains("the chain is intact"));

    // Stopped, the chain is read whole (the log opens), with nothing said about a gateway,
    // and each handed-over event is in it once.
    assert!(server.stop().success());
    let verified = larkgate_in(d, &["audit", "verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));
    assert!(stdout(&verified).contains("the chain is intact"));
    assert!(!stderr(&verified).contains("running larkgate"));
    let tail = ok(d, &["audit", "tail", "-n", "200"]);
    assert_eq!(tail.matches("added principal eve").count(), 1, "{tail}");
    assert_eq!(tail.matches("revoked token").count(), 1, "{tail}");
}

#[test]
fn a_token_valid_past_the_year_9999_is_listed_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["principal", "add", "agent", "--roles", "author"]);
    ok(
        dir,
        &[
            "token",
            "create",
            "--principal",
            "agent",
            "--expires",
            "1000000years",
        ],
    );
    let listed = ok(dir, &["token", "list"]);
    assert!(
        listed.contains("valid until 9999-12-31T23:59:59.999Z"),
        "{listed}"
    );
}
