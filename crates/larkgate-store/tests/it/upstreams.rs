//! Stored upstreams and tool pins survive a reopen; removing an upstream removes its pins.

use larkgate_store::{PinStatus, ToolPin, UpstreamCredentials, UpstreamRecord};

use crate::{Place, on_both};

fn sealed(alias: &str, sealed: Vec<u8>, updated_at_ms: i64) -> UpstreamCredentials {
    UpstreamCredentials {
        alias: alias.to_owned(),
        sealed,
        updated_at_ms,
    }
}

fn pin(tool: &str, status: PinStatus) -> ToolPin {
    ToolPin {
        alias: "weather".into(),
        tool: tool.into(),
        hash: format!("hash-{tool}"),
        definition: format!("{{\"name\":\"{tool}\"}}"),
        status,
        pending: (status == PinStatus::Quarantined)
            .then(|| ("new-hash".to_owned(), "{\"name\":\"changed\"}".to_owned())),
        reviewed_by: None,
        updated_at_ms: 7,
    }
}

async fn upstreams_and_pins_persist_and_go_together(place: Place) {
    {
        let store = place.open().await;
        store
            .save_upstream(UpstreamRecord {
                alias: "weather".into(),
                config: "{\"url\":\"https://weather.example/mcp\"}".into(),
                added_by: "operator".into(),
                added_at_ms: 5,
            })
            .await
            .unwrap();
        store
            .save_pins(vec![
                pin("forecast", PinStatus::Approved),
                pin("alerts", PinStatus::Quarantined),
            ])
            .await
            .unwrap();
    }
    let store = place.open().await;
    let upstreams = store.upstreams().await.unwrap();
    assert_eq!(upstreams.len(), 1);
    assert_eq!(upstreams[0].added_by, "operator");
    let pins = store.pins("weather").await.unwrap();
    assert_eq!(
        pins,
        vec![
            pin("alerts", PinStatus::Quarantined),
            pin("forecast", PinStatus::Approved)
        ]
    );
    // Replacing a pin keeps one row per tool.
    let mut reviewed = pin("alerts", PinStatus::Approved);
    reviewed.pending = None;
    reviewed.reviewed_by = Some("operator".into());
    store.save_pins(vec![reviewed.clone()]).await.unwrap();
    assert_eq!(store.pins("weather").await.unwrap()[0], reviewed);

    assert!(store.remove_upstream("weather").await.unwrap());
    assert!(store.upstreams().await.unwrap().is_empty());
    assert!(store.pins("weather").await.unwrap().is_empty());
    assert!(!store.remove_upstream("weather").await.unwrap());
}

async fn every_change_to_upstreams_or_pins_moves_the_revision_another_process_reads(place: Place) {
    // Two handles on one store, as `larkgate upstream ...` beside a running `serve`.
    let cli = place.open().await;
    let gateway = place.open().await;
    let mut seen = gateway.upstreams_revision().await.unwrap();
    let mut moved = async |what: &str| {
        let now = gateway.upstreams_revision().await.unwrap();
        assert!(now > seen, "{what} did not move the revision");
        seen = now;
    };
    cli.save_upstream(UpstreamRecord {
        alias: "weather".into(),
        config: "{}".into(),
        added_by: "operator".into(),
        added_at_ms: 5,
    })
    .await
    .unwrap();
    moved("adding an upstream").await;
    cli.save_pins(vec![pin("forecast", PinStatus::Quarantined)])
        .await
        .unwrap();
    moved("a new pin").await;
    cli.save_pins(vec![pin("forecast", PinStatus::Approved)])
        .await
        .unwrap();
    moved("approving a pin").await;
    cli.remove_upstream("weather").await.unwrap();
    moved("removing the upstream").await;
    // Nothing else moves it: statuses are the gateway's own writes.
    gateway
        .save_upstream_statuses(vec![larkgate_store::UpstreamStatusRecord {
            alias: "weather".into(),
            status: "{\"connected\":false}".into(),
            updated_at_ms: 9,
        }])
        .await
        .unwrap();
    assert_eq!(gateway.upstreams_revision().await.unwrap(), seen);
    let statuses = cli.upstream_statuses().await.unwrap();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].status, "{\"connected\":false}");
    // A new set replaces the old one whole.
    gateway.save_upstream_statuses(Vec::new()).await.unwrap();
    assert!(cli.upstream_statuses().await.unwrap().is_empty());
}

async fn sealed_credentials_persist_are_replaced_and_go_with_their_upstream(place: Place) {
    {
        let store = place.open().await;
        assert_eq!(store.upstream_credentials("weather").await.unwrap(), None);
        store
            .save_upstream_credentials(sealed("weather", vec![1, 2, 3], 5))
            .await
            .unwrap();
        store
            .save_upstream_credentials(sealed("weather", vec![4, 5], 6))
            .await
            .unwrap();
        store
            .save_upstream_credentials(sealed("other", vec![9], 6))
            .await
            .unwrap();
    }
    let store = place.open().await;
    assert_eq!(
        store.upstream_credentials("weather").await.unwrap(),
        Some(vec![4, 5]),
        "the second save replaced the first, and both survived a reopen"
    );
    let revision = store.upstreams_revision().await.unwrap();
    store
        .save_upstream(UpstreamRecord {
            alias: "weather".into(),
            config: "{}".into(),
            added_by: "operator".into(),
            added_at_ms: 5,
        })
        .await
        .unwrap();
    assert!(store.remove_upstream("weather").await.unwrap());
    assert_eq!(
        store.upstream_credentials("weather").await.unwrap(),
        None,
        "removing the upstream forgot its credentials"
    );
    assert!(store.upstreams_revision().await.unwrap() > revision);
    assert!(store.remove_upstream_credentials("other").await.unwrap());
    assert!(!store.remove_upstream_credentials("other").await.unwrap());
    assert_eq!(store.upstream_credentials("other").await.unwrap(), None);
}

on_both!(
    upstreams_and_pins_persist_and_go_together,
    every_change_to_upstreams_or_pins_moves_the_revision_another_process_reads,
    sealed_credentials_persist_are_replaced_and_go_with_their_upstream,
);
