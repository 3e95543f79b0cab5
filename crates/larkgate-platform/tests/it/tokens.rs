//! Bearer tokens against hostile presentations, on a real SQLite store.

use std::time::Duration;

use larkgate_platform::tokens::{TOKEN_PREFIX, TokenError, create, verify};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, PrincipalStore, SqliteStore};

async fn store_with(principals: &[(&str, &[&str])]) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    for (id, roles) in principals {
        store
            .add_principal(Principal {
                id: id.to_string(),
                kind: PrincipalKind::User,
                roles: roles.iter().map(|r| r.to_string()).collect(),
                issuer: IssuerBinding::Local,
            })
            .await
            .unwrap();
    }
    (dir, store)
}

#[tokio::test]
async fn a_token_authenticates_its_principal_with_the_roles_it_has_now() {
    let (_dir, store) = store_with(&[("ada", &["author"])]).await;
    let new = create(&store, "ada", "operator", None, 1_000)
        .await
        .unwrap();
    assert!(new.token.starts_with(TOKEN_PREFIX));
    assert_eq!(new.token.len(), TOKEN_PREFIX.len() + 12 + 1 + 43);
    // Only a hash is stored.
    let stored = store.token(&new.record.id).await.unwrap().unwrap();
    assert!(!new.token.contains(&stored.secret_hash));
    let secret = &new.token[TOKEN_PREFIX.len() + 13..];
    assert_ne!(stored.secret_hash, secret);
    let who = verify(&store, &new.token, 2_000).await.unwrap();
    assert_eq!(who.id, "ada");
    store
        .set_roles("ada", vec!["author".into(), "publisher".into()])
        .await
        .unwrap();
    let who = verify(&store, &new.token, 3_000).await.unwrap();
    assert_eq!(who.roles, vec!["author".to_owned(), "publisher".to_owned()]);
}

#[tokio::test]
async fn every_bad_token_is_refused_alike() {
    let (_dir, store) = store_with(&[("ada", &["author"]), ("bob", &[])]).await;
    let good = create(&store, "ada", "operator", None, 0)
        .await
        .unwrap()
        .token;
    let expiring = create(&store, "ada", "operator", Some(Duration::from_secs(60)), 0)
        .await
        .unwrap();
    let revoked = create(&store, "ada", "operator", None, 0).await.unwrap();
    store.revoke_token(&revoked.record.id, 10).await.unwrap();
    let orphan = create(&store, "bob", "operator", None, 0)
        .await
        .unwrap()
        .token;
    store.remove_principal("bob").await.unwrap();

    let id = &good[TOKEN_PREFIX.len()..TOKEN_PREFIX.len() + 12];
    let mut flipped = good.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let other_id = format!(
        "{TOKEN_PREFIX}AAAAAAAAAAAA{}",
        &good[TOKEN_PREFIX.len() + 12..]
    );

    let table: Vec<(&str, String)> = vec![
        ("empty", String::new()),
        ("no prefix", good[TOKEN_PREFIX.len()..].to_owned()),
        ("another prefix", good.replacen(TOKEN_PREFIX, "ghp_", 1)),
        ("truncated", good[..good.len() - 1].to_owned()),
        ("extended", format!("{good}A")),
        ("one secret character changed", flipped),
        ("a real secret under another id", other_id),
        ("just the id", format!("{TOKEN_PREFIX}{id}_")),
        (
            "not base64url",
            good.replace(&good[good.len() - 3..], "+/="),
        ),
        (
            "SQL in the id",
            format!("{TOKEN_PREFIX}' OR 1=1 --_{}", "A".repeat(43)),
        ),
        ("revoked", revoked.token.clone()),
        ("expired", expiring.token.clone()),
        ("principal removed", orphan),
        ("a huge header", "A".repeat(1 << 20)),
    ];
    for (case, token) in table {
        let error = verify(&store, &token, 120_000).await.unwrap_err();
        assert!(matches!(error, TokenError::Invalid), "{case}: {error}");
        assert_eq!(error.to_string(), "the token is not valid", "{case}");
    }
    // The expiring token worked before it expired; the good one still works.
    assert!(verify(&store, &expiring.token, 59_999).await.is_ok());
    assert!(verify(&store, &good, 120_000).await.is_ok());
    // Surrounding whitespace from a copied header is tolerated.
    assert!(verify(&store, &format!(" {good}\n"), 120_000).await.is_ok());
}

#[tokio::test]
async fn tokens_are_listed_by_principal_and_revocation_keeps_its_first_time() {
    let (_dir, store) = store_with(&[("ada", &[]), ("cy", &[])]).await;
    let a = create(&store, "ada", "operator", None, 1).await.unwrap();
    create(&store, "cy", "operator", None, 2).await.unwrap();
    assert_eq!(store.tokens(None).await.unwrap().len(), 2);
    assert_eq!(store.tokens(Some("ada")).await.unwrap().len(), 1);
    assert!(store.revoke_token(&a.record.id, 5).await.unwrap());
    assert!(store.revoke_token(&a.record.id, 9).await.unwrap());
    assert_eq!(
        store
            .token(&a.record.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_ms,
        Some(5)
    );
    assert!(!store.revoke_token("nope", 5).await.unwrap());
    // Two tokens never share an id or a secret.
    let b = create(&store, "ada", "operator", None, 3).await.unwrap();
    assert_ne!(a.record.id, b.record.id);
    assert_ne!(a.record.secret_hash, b.record.secret_hash);
}
