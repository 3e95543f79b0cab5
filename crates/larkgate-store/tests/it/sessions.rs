//! 2025-11-25 sessions as replicas share them: caps that hold across processes opening at
//! once, expiry moved by use, and a closed or expired session that no replica can continue.

use larkgate_store::{NewSession, SessionCapReached};

use crate::{Place, on_both};

/// Session `id` of `owner`, opened at `now_ms` until `expires_at_ms`, under caps of 5 per
/// principal and 8 in all.
fn new(id: impl Into<String>, owner: &str, now_ms: i64, expires_at_ms: i64) -> NewSession {
    NewSession {
        id: id.into(),
        owner: owner.to_owned(),
        now_ms,
        expires_at_ms,
        per_principal: 5,
        total: 8,
    }
}

async fn caps_hold_across_processes_opening_at_once(place: Place) {
    // Two handles (two replicas) open 12 sessions each for ada at once: at most 5 are hers.
    let handles = [place.open().await, place.open().await];
    let mut tasks = Vec::new();
    for (h, store) in handles.iter().enumerate() {
        for i in 0..12 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .open_session(new(format!("s{h}-{i}"), "ada", 1_000, 61_000))
                    .await
                    .unwrap()
            }));
        }
    }
    let mut opened = 0;
    for task in tasks {
        match task.await.unwrap() {
            None => opened += 1,
            Some(cap) => assert_eq!(cap, SessionCapReached::PerPrincipal),
        }
    }
    assert_eq!(opened, 5);
    // Bob has room for 3 more before the total of 8.
    let store = &handles[1];
    for i in 0..3 {
        assert_eq!(
            store
                .open_session(new(format!("b{i}"), "bob", 1_000, 61_000))
                .await
                .unwrap(),
            None
        );
    }
    assert_eq!(
        store
            .open_session(new("b3", "bob", 1_000, 61_000))
            .await
            .unwrap(),
        Some(SessionCapReached::Total)
    );
    // Once they have expired, they count no more.
    assert_eq!(
        store
            .open_session(new("later", "bob", 61_000, 121_000))
            .await
            .unwrap(),
        None
    );
}

async fn a_session_is_seen_by_every_process_until_it_expires_or_closes(place: Place) {
    let one = place.open().await;
    let two = place.open().await;
    assert_eq!(
        one.open_session(new("s1", "ada", 1_000, 11_000))
            .await
            .unwrap(),
        None
    );
    let seen = two.session("s1", 2_000).await.unwrap().unwrap();
    assert_eq!(seen.owner, "ada");
    assert_eq!(seen.state, None);
    one.save_session_state("s1", r#"{"initialize_params":{}}"#)
        .await
        .unwrap();
    let seen = two.session("s1", 2_000).await.unwrap().unwrap();
    assert_eq!(seen.state.as_deref(), Some(r#"{"initialize_params":{}}"#));
    // Used: its expiry moves (never back).
    two.touch_session("s1", 21_000).await.unwrap();
    two.touch_session("s1", 15_000).await.unwrap();
    assert_eq!(
        one.session("s1", 2_000)
            .await
            .unwrap()
            .unwrap()
            .expires_at_ms,
        21_000
    );
    assert!(one.session("s1", 20_999).await.unwrap().is_some());
    assert_eq!(one.session("s1", 21_000).await.unwrap(), None);
    assert_eq!(one.session("unknown", 2_000).await.unwrap(), None);
    two.close_session("s1").await.unwrap();
    assert_eq!(one.session("s1", 2_000).await.unwrap(), None);
}

on_both!(
    caps_hold_across_processes_opening_at_once,
    a_session_is_seen_by_every_process_until_it_expires_or_closes,
);
