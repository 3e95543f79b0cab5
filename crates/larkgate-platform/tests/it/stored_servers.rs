//! Virtual servers added at run time ([`larkgate_platform::added_servers`]), on a real
//! SQLite store: served at once where added, followed by another process's table, the
//! configuration file's winning a name both have, a bad stored record or a failing store never
//! taking down what is served, and the bounds held.

use larkgate_platform::added_servers::{self as stored, MAX_STORED, ServerError};
use larkgate_platform::policy::Pattern;
use larkgate_platform::servers::{ServerSpec, ServerTable, Servers};
use larkgate_store::ServerStore;

use crate::harness::Harness;

fn spec(name: &str, tools: &[&str]) -> ServerSpec {
    ServerSpec {
        name: name.to_owned(),
        tools: tools.iter().map(|p| Pattern::new(p).unwrap()).collect(),
        prefix: true,
        ..ServerSpec::default()
    }
}

async fn harness() -> Harness {
    Harness::with(|b| b.servers(Servers::new(vec![spec("team", &["clock_now"])]).unwrap())).await
}

async fn add(h: &Harness, spec: ServerSpec, replace: bool) -> Result<stored::Saved, ServerError> {
    let registry = h.platform.registry();
    stored::add(
        h.platform.services(),
        h.platform.servers(),
        Some(&registry),
        spec,
        replace,
        "root",
    )
    .await
}

fn invalid(result: Result<stored::Saved, ServerError>) -> String {
    match result {
        Err(ServerError::Invalid(message)) => message,
        other => panic!("should be refused as invalid: {other:?}"),
    }
}

fn tools_of(table: &ServerTable, name: &str) -> Option<Vec<String>> {
    table.get(name).map(|server| server.view().tools)
}

#[tokio::test]
async fn a_server_added_is_served_at_once_and_followed_by_another_process() {
    let h = harness().await;
    let table = h.platform.servers();
    let mut changes = table.changes();
    let saved = add(&h, spec("notes", &["kv_get", "kv_set", "nope_*"]), false)
        .await
        .unwrap();
    assert_eq!(saved.path, "/mcp/notes");
    assert_eq!(saved.tools_served, Some(2));
    assert_eq!(saved.warnings.len(), 1, "{:?}", saved.warnings);
    assert!(saved.warnings[0].contains("\"nope_*\" matches no tool now"));
    assert_eq!(
        tools_of(table, "notes").unwrap(),
        ["kv_get", "kv_set", "nope_*"]
    );
    assert!(changes.has_changed().unwrap(), "sessions are told");
    changes.mark_unchanged();

    // Another process on the store (a replica, or `serve` beside the command) follows.
    let beside = ServerTable::new(Servers::default());
    assert!(beside.get("notes").is_none());
    beside.follow(h.store.as_ref()).await.unwrap();
    assert!(beside.get("notes").is_some());
    let mut beside_changes = beside.changes();

    // Replaced: both serve the new definition; each told once.
    add(&h, spec("notes", &["kv_get"]), true).await.unwrap();
    assert_eq!(tools_of(table, "notes").unwrap(), ["kv_get"]);
    assert!(changes.has_changed().unwrap());
    beside.follow(h.store.as_ref()).await.unwrap();
    assert_eq!(tools_of(&beside, "notes").unwrap(), ["kv_get"]);
    assert!(beside_changes.has_changed().unwrap());
    beside_changes.mark_unchanged();
    // Following again with nothing changed tells nobody.
    beside.follow(h.store.as_ref()).await.unwrap();
    assert!(!beside_changes.has_changed().unwrap());

    // Removed: gone from both.
    assert!(
        stored::remove(h.platform.services(), table, "notes", "root")
            .await
            .unwrap()
    );
    assert!(table.get("notes").is_none());
    beside.follow(h.store.as_ref()).await.unwrap();
    assert!(beside.get("notes").is_none());
    assert!(
        !stored::remove(h.platform.services(), table, "notes", "root")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_configuration_file_wins_a_name_and_a_change_must_say_what_it_means() {
    let h = harness().await;
    let table = h.platform.servers();
    let refused = invalid(add(&h, spec("team", &["kv_get"]), false).await);
    assert!(
        refused.contains("configured in the configuration file; change it there"),
        "{refused}"
    );
    let refused = invalid(add(&h, spec("team", &["kv_get"]), true).await);
    assert!(refused.contains("configured in the configuration file"));
    add(&h, spec("notes", &["kv_get"]), false).await.unwrap();
    let refused = invalid(add(&h, spec("notes", &["kv_set"]), false).await);
    assert!(
        refused.contains("was added already; pass replace"),
        "{refused}"
    );
    let refused = invalid(add(&h, spec("other", &["kv_set"]), true).await);
    assert!(
        refused.contains("no server \"other\" added at run time"),
        "{refused}"
    );

    // The file gains the name later (a reload): the file's is served, the stored one shown
    // as shadowed; once the file drops it, the stored one is served again.
    table.configure(
        Servers::new(vec![
            spec("team", &["clock_now"]),
            spec("notes", &["kv_list"]),
        ])
        .unwrap(),
    );
    assert_eq!(tools_of(table, "notes").unwrap(), ["kv_list"]);
    let entries = table.entries();
    let shadowed: Vec<_> = entries
        .iter()
        .filter(|e| e.server.name == "notes")
        .map(|e| (e.added.is_some(), e.shadowed))
        .collect();
    assert_eq!(shadowed, [(false, false), (true, true)]);
    table.configure(Servers::new(vec![spec("team", &["clock_now"])]).unwrap());
    assert_eq!(tools_of(table, "notes").unwrap(), ["kv_get"]);
}

#[tokio::test]
async fn a_bad_record_or_a_failing_store_never_takes_down_what_is_served() {
    let h = harness().await;
    let table = h.platform.servers();
    add(&h, spec("notes", &["kv_get"]), false).await.unwrap();
    // Records written by something else: one that does not read, one that names another
    // server, one that no server may be (`prefix = false` over several sources).
    let raw = rusqlite::Connection::open(h.dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    for (name, spec) in [
        ("garbled", "{not json"),
        ("liar", r#"{"name": "notes", "tools": ["*"]}"#),
        (
            "mix",
            r#"{"name": "mix", "prefix": false, "tools": ["a__*", "b__*"]}"#,
        ),
    ] {
        raw.execute(
            "INSERT INTO servers (name, spec, added_by, added_at_ms) VALUES (?1, ?2, 'x', 1)",
            [name, spec],
        )
        .unwrap();
    }
    table.follow(h.store.as_ref()).await.unwrap();
    for name in ["garbled", "liar", "mix"] {
        assert!(table.get(name).is_none(), "{name} is not served");
    }
    assert_eq!(tools_of(table, "notes").unwrap(), ["kv_get"], "the rest is");

    // The store fails: following says so, and what is served stays.
    raw.execute_batch("DROP TABLE server_revision").unwrap();
    let failed = table.follow(h.store.as_ref()).await.unwrap_err();
    assert!(
        failed.contains("the stored servers cannot be read"),
        "{failed}"
    );
    assert_eq!(tools_of(table, "notes").unwrap(), ["kv_get"]);
    // A change the store cannot take is larkgate's failure, not the caller's, and keeps
    // nothing.
    let failed = add(&h, spec("more", &["kv_get"]), false).await;
    assert!(matches!(failed, Err(ServerError::Failed(_))), "{failed:?}");
    let kept: i64 = raw
        .query_row(
            "SELECT count(*) FROM servers WHERE name = 'more'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn the_store_keeps_a_bounded_number_of_servers_with_bounded_definitions() {
    let h = harness().await;
    for i in 0..MAX_STORED {
        add(&h, spec(&format!("s{i}"), &["kv_get"]), false)
            .await
            .unwrap();
    }
    let refused = invalid(add(&h, spec("one-more", &["kv_get"]), false).await);
    assert!(
        refused.contains("holds 100 servers, its most; remove one first"),
        "{refused}"
    );
    // A replacement is not one more.
    add(&h, spec("s0", &["kv_set"]), true).await.unwrap();

    let h = harness().await;
    let mut long = spec("long", &["kv_get"]);
    long.description = Some("x".repeat(2001));
    assert!(invalid(add(&h, long, false).await).contains("longer than 2000 characters"));
    let many: Vec<String> = (0..101).map(|i| format!("kv_{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let refused = invalid(add(&h, spec("many", &many), false).await);
    assert!(
        refused.contains("tools has 101 patterns, more than 100"),
        "{refused}"
    );
    let refused = invalid(add(&h, spec("../mcp", &["kv_get"]), false).await);
    assert!(refused.contains("cannot be a server's name"), "{refused}");
    assert!(
        h.store.servers().await.unwrap().is_empty(),
        "nothing refused was kept"
    );
}
