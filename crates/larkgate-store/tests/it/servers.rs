//! Stored virtual servers: added once per name, replaced only when they exist, removed, and
//! every change seen by another process through the revision.

use larkgate_store::{ServerRecord, ServerSave, StoreError};

use crate::{Place, on_both};

fn server(name: &str, spec: &str, by: &str) -> ServerRecord {
    ServerRecord {
        name: name.to_owned(),
        spec: spec.to_owned(),
        added_by: by.to_owned(),
        added_at_ms: 5,
    }
}

async fn a_server_is_added_once_replaced_only_if_it_exists_and_persists(place: Place) {
    {
        let store = place.open().await;
        store
            .save_server(
                server("triage", "{\"tools\":[\"a\"]}", "ann"),
                ServerSave::New,
            )
            .await
            .unwrap();
        // A second add of the name is a conflict, and keeps the first.
        let again = store
            .save_server(
                server("triage", "{\"tools\":[\"b\"]}", "bob"),
                ServerSave::New,
            )
            .await
            .unwrap_err();
        assert!(matches!(again, StoreError::Conflict(_)), "{again:?}");
        // Replacing one that does not exist adds nothing.
        let missing = store
            .save_server(server("ops", "{}", "bob"), ServerSave::Replace)
            .await
            .unwrap_err();
        assert!(matches!(missing, StoreError::Missing(_)), "{missing:?}");
        store
            .save_server(server("alpha", "{}", "ann"), ServerSave::New)
            .await
            .unwrap();
    }
    let store = place.open().await;
    assert_eq!(
        store.servers().await.unwrap(),
        vec![
            server("alpha", "{}", "ann"),
            server("triage", "{\"tools\":[\"a\"]}", "ann")
        ]
    );
    store
        .save_server(
            server("triage", "{\"tools\":[\"c\"]}", "bob"),
            ServerSave::Replace,
        )
        .await
        .unwrap();
    assert_eq!(
        store.servers().await.unwrap()[1],
        server("triage", "{\"tools\":[\"c\"]}", "bob")
    );
    assert!(store.remove_server("triage").await.unwrap());
    assert!(!store.remove_server("triage").await.unwrap());
    assert_eq!(
        store.servers().await.unwrap(),
        vec![server("alpha", "{}", "ann")]
    );
}

async fn every_change_to_servers_moves_the_revision_another_process_reads(place: Place) {
    // Two handles on one store, as `larkgate server ...` beside a running `serve`.
    let cli = place.open().await;
    let gateway = place.open().await;
    let mut seen = gateway.servers_revision().await.unwrap();
    let mut moved = async |what: &str| {
        let now = gateway.servers_revision().await.unwrap();
        assert!(now > seen, "{what} did not move the revision");
        seen = now;
    };
    cli.save_server(server("triage", "{}", "ann"), ServerSave::New)
        .await
        .unwrap();
    moved("adding a server").await;
    cli.save_server(server("triage", "{\"x\":1}", "ann"), ServerSave::Replace)
        .await
        .unwrap();
    moved("replacing it").await;
    cli.remove_server("triage").await.unwrap();
    moved("removing it").await;
    // What changes nothing does not move it; nor do upstreams.
    assert!(!cli.remove_server("triage").await.unwrap());
    cli.save_upstream(larkgate_store::UpstreamRecord {
        alias: "weather".into(),
        config: "{}".into(),
        added_by: "ann".into(),
        added_at_ms: 5,
    })
    .await
    .unwrap();
    assert_eq!(gateway.servers_revision().await.unwrap(), seen);
}

on_both!(
    a_server_is_added_once_replaced_only_if_it_exists_and_persists,
    every_change_to_servers_moves_the_revision_another_process_reads,
);
