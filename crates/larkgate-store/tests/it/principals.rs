use larkgate_store::{IssuerBinding, Principal, PrincipalKind, StoreError};

use crate::{Place, on_both};

fn alice() -> Principal {
    Principal {
        id: "alice".into(),
        kind: PrincipalKind::User,
        roles: vec!["author".into(), "approver".into(), "author".into()],
        issuer: IssuerBinding::Local,
    }
}

async fn principals_are_added_listed_changed_and_removed(place: Place) {
    let store = place.open().await;
    store.add_principal(alice()).await.unwrap();
    store
        .add_principal(Principal {
            id: "bot".into(),
            kind: PrincipalKind::Service,
            roles: vec![],
            issuer: IssuerBinding::Local,
        })
        .await
        .unwrap();
    let stored = store.principal("alice").await.unwrap().unwrap();
    assert_eq!(
        stored.roles,
        ["approver", "author"],
        "roles are sorted and unique"
    );
    assert_eq!(
        store
            .principals()
            .await
            .unwrap()
            .iter()
            .map(|p| p.id.as_str())
            .collect::<Vec<_>>(),
        ["alice", "bot"]
    );
    store
        .set_roles("bot", vec!["publisher".into()])
        .await
        .unwrap();
    assert_eq!(
        store.principal("bot").await.unwrap().unwrap().roles,
        ["publisher"]
    );
    store.remove_principal("bot").await.unwrap();
    assert_eq!(store.principal("bot").await.unwrap(), None);
}

async fn a_taken_id_a_missing_principal_and_a_bad_role_are_errors(place: Place) {
    let store = place.open().await;
    store.add_principal(alice()).await.unwrap();
    assert!(matches!(
        store.add_principal(alice()).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.set_roles("nobody", vec![]).await,
        Err(StoreError::Missing(_))
    ));
    assert!(matches!(
        store.remove_principal("nobody").await,
        Err(StoreError::Missing(_))
    ));
    assert!(matches!(
        store.set_roles("alice", vec!["a,b".into()]).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(
        store.principal("alice").await.unwrap().unwrap().roles,
        ["approver", "author"]
    );
}

async fn data_survives_reopening_and_migrations_run_once(place: Place) {
    {
        let store = place.open().await;
        store.add_principal(alice()).await.unwrap();
    }
    let store = place.open().await;
    assert!(store.principal("alice").await.unwrap().is_some());
    store.ping().await.unwrap();
    assert!(!store.describe().is_empty());
}

async fn an_issuer_binding_is_kept_changed_and_taken_by_one_first_sign_in(place: Place) {
    let store = place.open().await;
    let acme = IssuerBinding::Issuer("acme".into());
    store
        .add_principal(Principal {
            issuer: acme.clone(),
            ..alice()
        })
        .await
        .unwrap();
    assert_eq!(
        store.principal("alice").await.unwrap().unwrap().issuer,
        acme
    );
    store
        .set_issuer("alice", IssuerBinding::Local)
        .await
        .unwrap();
    assert_eq!(
        store.principal("alice").await.unwrap().unwrap().issuer,
        IssuerBinding::Local
    );
    assert!(matches!(
        store.set_issuer("nobody", acme.clone()).await,
        Err(StoreError::Missing(_))
    ));
    // Only a principal waiting for its first sign-in is bound by one; never a local one.
    assert!(!store.bind_at_first_sign_in("alice", "acme").await.unwrap());
    assert!(!store.bind_at_first_sign_in("nobody", "acme").await.unwrap());
    assert_eq!(
        store.principal("alice").await.unwrap().unwrap().issuer,
        IssuerBinding::Local
    );
    // Two sign-ins through two issuers at once: one binds it, the other is refused.
    store
        .set_issuer("alice", IssuerBinding::FirstSignIn)
        .await
        .unwrap();
    let (first, second) = tokio::join!(
        store.bind_at_first_sign_in("alice", "acme"),
        store.bind_at_first_sign_in("alice", "other"),
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert!(first ^ second, "exactly one binds: {first} {second}");
    let bound = store.principal("alice").await.unwrap().unwrap().issuer;
    let winner = if first { "acme" } else { "other" };
    assert_eq!(bound, IssuerBinding::Issuer(winner.into()));
    assert!(!store.bind_at_first_sign_in("alice", "acme").await.unwrap());
}

/// A store as a larkgate from before issuer bindings left it, with `admin` (holding the first
/// token), `ada` (reached only by signing in), `ci` (a service with a token), `bot` (a service
/// without) and a script, opened by this larkgate.
async fn principals_from_before_bindings_wait_for_a_first_sign_in_unless_they_hold_a_token(
    place: Place,
) {
    match &place {
        Place::Sqlite(_) => {
            drop(place.open().await);
            place
                .execute(
                    "DROP INDEX approvals_by_status; ALTER TABLE approvals DROP COLUMN arguments_bytes;
                     ALTER TABLE principals DROP COLUMN issuer; PRAGMA user_version = 13;",
                )
                .await;
        }
        Place::Postgres(schema) => {
            let older = larkgate_store::PostgresStore::connect(&schema.settings()).unwrap();
            older.migrate_to(4).await.unwrap();
        }
    }
    place
        .execute(
            "INSERT INTO principals (id, kind, roles) VALUES ('admin', 'user', 'admin'),
                ('ada', 'user', 'author'), ('ci', 'service', ''), ('bot', 'service', ''),
                ('script:digest', 'script', 'author');
             INSERT INTO tokens (id, principal, secret_hash, created_by, created_at_ms,
                expires_at_ms, revoked_at_ms)
                VALUES ('t1', 'admin', 'h', 'larkgate', 1, NULL, NULL),
                ('t2', 'ci', 'h', 'admin', 1, NULL, 2);",
        )
        .await;
    let store = place.open().await;
    let bindings: Vec<(String, IssuerBinding)> = store
        .principals()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.issuer))
        .collect();
    let expected = [
        ("ada", IssuerBinding::FirstSignIn),
        ("admin", IssuerBinding::Local),
        ("bot", IssuerBinding::FirstSignIn),
        ("ci", IssuerBinding::Local),
        ("script:digest", IssuerBinding::Local),
    ];
    assert_eq!(
        bindings,
        expected
            .iter()
            .map(|(id, b)| (id.to_string(), b.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        store.principal("ada").await.unwrap().unwrap().roles,
        ["author"],
        "nothing else changes"
    );
    assert!(store.bind_at_first_sign_in("ada", "acme").await.unwrap());
    assert!(!store.bind_at_first_sign_in("admin", "acme").await.unwrap());
}

on_both!(
    an_issuer_binding_is_kept_changed_and_taken_by_one_first_sign_in,
    principals_from_before_bindings_wait_for_a_first_sign_in_unless_they_hold_a_token,
    principals_are_added_listed_changed_and_removed,
    a_taken_id_a_missing_principal_and_a_bad_role_are_errors,
    data_survives_reopening_and_migrations_run_once,
);
