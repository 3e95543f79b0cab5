use larkgate_store::KvQuery;

use crate::{Place, on_both};

fn page<'a>(prefix: &'a str, after: Option<&'a str>, limit: usize) -> KvQuery<'a> {
    KvQuery {
        prefix,
        after,
        limit,
    }
}

async fn set_get_and_delete_report_what_happened(place: Place) {
    let store = place.open().await;
    assert_eq!(store.kv_get("k").await.unwrap(), None);
    assert!(store.kv_set("k", "1").await.unwrap(), "created");
    assert!(!store.kv_set("k", "2").await.unwrap(), "replaced");
    assert_eq!(store.kv_get("k").await.unwrap().as_deref(), Some("2"));
    assert!(store.kv_delete("k").await.unwrap());
    assert!(!store.kv_delete("k").await.unwrap());
    assert_eq!(store.kv_get("k").await.unwrap(), None);
}

async fn listing_pages_by_prefix_in_key_order(place: Place) {
    let store = place.open().await;
    for key in ["user:b", "user:a", "user:c", "userx", "team:a", "user:é"] {
        store.kv_set(key, &format!("v-{key}")).await.unwrap();
    }
    let first = store.kv_list(page("user:", None, 2)).await.unwrap();
    assert_eq!(
        first,
        [
            ("user:a".into(), "v-user:a".into()),
            ("user:b".into(), "v-user:b".into())
        ]
    );
    let next = store
        .kv_list(page("user:", Some("user:b"), 10))
        .await
        .unwrap();
    let keys: Vec<&str> = next.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["user:c", "user:é"]);
    let all = store.kv_list(page("", None, 100)).await.unwrap();
    assert_eq!(all.len(), 6);
    // Characters that are special in LIKE patterns are plain here.
    store.kv_set("50%_off", "x").await.unwrap();
    store.kv_set("50abc", "y").await.unwrap();
    let keys: Vec<String> = store
        .kv_list(page("50%", None, 10))
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["50%_off"]);
}

on_both!(
    set_get_and_delete_report_what_happened,
    listing_pages_by_prefix_in_key_order,
);
