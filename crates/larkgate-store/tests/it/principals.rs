use larkgate_store::{Principal, PrincipalKind, StoreError};

use crate::{Place, on_both};

fn alice() -> Principal {
    Principal {
        id: "alice".into(),
        kind: PrincipalKind::User,
        roles: vec!["author".into(), "approver".into(), "author".into()],
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

on_both!(
    principals_are_added_listed_changed_and_removed,
    a_taken_id_a_missing_principal_and_a_bad_role_are_errors,
    data_survives_reopening_and_migrations_run_once,
);
