//! Script drafts, published versions (with the author's roles captured at publish time) and
//! runs.

use larkgate_store::{
    IssuerBinding, Principal, PrincipalKind, Publication, Run, RunStats, RunStatus, ScriptPin,
    Store, StoreError,
};
use larkgate_wire::{Code, RunKind};

use crate::{Place, draft, on_both};

async fn with_author(store: &dyn Store) {
    store
        .add_principal(Principal {
            id: "ada".into(),
            kind: PrincipalKind::User,
            roles: vec!["author".into(), "writer".into()],
            issuer: IssuerBinding::Local,
        })
        .await
        .unwrap();
}

async fn a_draft_belongs_to_its_author(place: Place) {
    let store = place.open().await;
    store
        .save_draft(draft("digest", "def main():\n    pass\n", "ada", 1))
        .await
        .unwrap();
    store
        .save_draft(draft("digest", "def main():\n    return 1\n", "ada", 2))
        .await
        .unwrap();
    let saved = store.draft("digest").await.unwrap().unwrap();
    assert_eq!(saved.source, "def main():\n    return 1\n");
    assert_eq!(saved.updated_at_ms, 2);
    let err = store
        .save_draft(draft("digest", "x", "mallory", 3))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("by ada")),
        "{err}"
    );
    assert_eq!(store.draft("digest").await.unwrap().unwrap().author, "ada");
    assert_eq!(store.drafts().await.unwrap().len(), 1);
}

async fn publishing_numbers_versions_and_captures_the_authors_roles_then(place: Place) {
    let store = place.open().await;
    with_author(&*store).await;
    store
        .save_draft(draft("digest", "v1", "ada", 1))
        .await
        .unwrap();
    let v1 = store
        .publish(Publication {
            name: "digest",
            source: "v1",
            hash: "h1",
            publisher: "pat",
            pins: &[],
            now_ms: 10,
        })
        .await
        .unwrap();
    assert_eq!(
        (v1.version, v1.author.as_str(), v1.publisher.as_str()),
        (1, "ada", "pat")
    );
    assert_eq!(v1.author_roles, ["author", "writer"]);
    // The author's roles change; a new version captures the new ones, the old one keeps its.
    store.set_roles("ada", vec!["author".into()]).await.unwrap();
    store
        .save_draft(draft("digest", "v2", "ada", 11))
        .await
        .unwrap();
    let v2 = store
        .publish(Publication {
            name: "digest",
            source: "v2",
            hash: "h2",
            publisher: "pat",
            pins: &[],
            now_ms: 20,
        })
        .await
        .unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.author_roles, ["author"]);
    let history = store.versions("digest").await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        history[0].author_roles,
        ["author", "writer"],
        "versions are immutable"
    );
    assert_eq!(history[0].source, "v1");
    let latest = store.latest_versions().await.unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].version, 2);
    assert_eq!(store.latest_version("digest").await.unwrap(), Some(v2));
    assert_eq!(store.latest_version("never").await.unwrap(), None);
}

/// Publishing one draft at once through two processes sharing the store, many times over:
/// every publish gets a version of its own, numbered one after another.
async fn concurrent_publishes_number_versions_one_after_another(place: Place) {
    let handles = [place.open().await, place.open().await];
    with_author(&*handles[0]).await;
    handles[0]
        .save_draft(draft("digest", "v", "ada", 1))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let store = handles[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            store
                .publish(Publication {
                    name: "digest",
                    source: "v",
                    hash: "h",
                    publisher: "pat",
                    pins: &[],
                    now_ms: 10,
                })
                .await
                .unwrap()
                .version
        }));
    }
    let mut versions = Vec::new();
    for task in tasks {
        versions.push(task.await.unwrap());
    }
    versions.sort();
    assert_eq!(versions, (1..=12).collect::<Vec<u32>>());
    let stored: Vec<u32> = handles[1]
        .versions("digest")
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(stored, (1..=12).collect::<Vec<u32>>());
    assert_eq!(
        handles[1]
            .latest_version("digest")
            .await
            .unwrap()
            .unwrap()
            .version,
        12
    );
}

async fn publishing_refuses_a_missing_draft_a_changed_draft_and_a_departed_author(place: Place) {
    let store = place.open().await;
    assert!(matches!(
        store
            .publish(Publication {
                name: "nope",
                source: "x",
                hash: "h",
                publisher: "pat",
                pins: &[],
                now_ms: 1
            })
            .await,
        Err(StoreError::Missing(_))
    ));
    with_author(&*store).await;
    store
        .save_draft(draft("digest", "checked", "ada", 1))
        .await
        .unwrap();
    store
        .save_draft(draft("digest", "changed since", "ada", 2))
        .await
        .unwrap();
    let err = store
        .publish(Publication {
            name: "digest",
            source: "checked",
            hash: "h",
            publisher: "pat",
            pins: &[],
            now_ms: 3,
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("changed while it was being published"),
        "{err}"
    );
    store.remove_principal("ada").await.unwrap();
    let err = store
        .publish(Publication {
            name: "digest",
            source: "changed since",
            hash: "h",
            publisher: "pat",
            pins: &[],
            now_ms: 4,
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no longer a registered principal"),
        "{err}"
    );
    assert!(store.versions("digest").await.unwrap().is_empty());
}

fn run(id: &str) -> Run {
    Run {
        id: id.into(),
        script: Some("digest".into()),
        version: Some(1),
        hash: "h".into(),
        kind: RunKind::Published,
        principal: "script:digest".into(),
        status: RunStatus::Running,
        result: None,
        error_code: None,
        error: None,
        stats: RunStats::default(),
        started_at_ms: 5,
        finished_at_ms: None,
        started_by: Some("ada".into()),
        review: None,
    }
}

async fn a_version_keeps_the_upstream_tools_it_was_published_against(place: Place) {
    let store = place.open().await;
    with_author(&*store).await;
    store
        .save_draft(draft("digest", "v1", "ada", 1))
        .await
        .unwrap();
    let pins = vec![ScriptPin {
        tool: "github__search_issues".into(),
        alias: "github".into(),
        upstream_tool: "search_issues".into(),
        hash: "abc".into(),
    }];
    let v1 = store
        .publish(Publication {
            name: "digest",
            source: "v1",
            hash: "h1",
            publisher: "pat",
            pins: &pins,
            now_ms: 10,
        })
        .await
        .unwrap();
    assert_eq!(v1.pins.as_deref(), Some(pins.as_slice()));
    assert_eq!(store.latest_version("digest").await.unwrap(), Some(v1));
    assert_eq!(store.versions("digest").await.unwrap()[0].pins, Some(pins));
}

async fn the_newest_successful_review_of_exactly_a_source_is_found(place: Place) {
    let store = place.open().await;
    let review = |id: &str, hash: &str, status: RunStatus, started: i64| Run {
        kind: RunKind::Review,
        hash: hash.into(),
        status,
        started_at_ms: started,
        principal: "ada".into(),
        version: None,
        review: Some(format!(
            r#"{{"intended_writes":[{{"tool":"kv_set","arguments":{{"key":"{id}"}}}}]}}"#
        )),
        ..run(id)
    };
    for r in [
        review("old", "h", RunStatus::Succeeded, 1),
        review("new", "h", RunStatus::Succeeded, 2),
        review("failed", "h", RunStatus::Failed, 3),
        review("other-source", "h2", RunStatus::Succeeded, 4),
        Run {
            kind: RunKind::Draft,
            started_at_ms: 5,
            ..run("not-a-review")
        },
    ] {
        store.start_run(r).await.unwrap();
    }
    let found = store.latest_review("digest", "h").await.unwrap().unwrap();
    assert_eq!(found.id, "new");
    assert!(found.review.unwrap().contains("\"new\""));
    assert_eq!(
        store
            .latest_review("digest", "h2")
            .await
            .unwrap()
            .unwrap()
            .id,
        "other-source"
    );
    assert_eq!(store.latest_review("digest", "h3").await.unwrap(), None);
    assert_eq!(store.latest_review("other", "h").await.unwrap(), None);
}

async fn runs_are_recorded_when_they_start_and_when_they_end(place: Place) {
    let store = place.open().await;
    store.start_run(run("r1")).await.unwrap();
    assert_eq!(
        store.run("r1").await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert!(matches!(
        store.start_run(run("r1")).await,
        Err(StoreError::Conflict(_))
    ));
    let finished = Run {
        status: RunStatus::Succeeded,
        result: Some(r#"{"n":1}"#.into()),
        stats: RunStats {
            tool_calls: 3,
            paces: 1,
            duration_ms: 40,
            peak_memory_bytes: Some(1 << 20),
        },
        finished_at_ms: Some(45),
        ..run("r1")
    };
    store.finish_run(finished.clone()).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), finished);
    assert!(matches!(
        store.finish_run(run("ghost")).await,
        Err(StoreError::Missing(_))
    ));
    assert_eq!(store.run("ghost").await.unwrap(), None);
}

async fn a_failed_runs_kind_and_code_read_back_as_they_were_written(place: Place) {
    let store = place.open().await;
    for (id, kind, code) in [
        ("d", RunKind::Draft, Code::ScriptFailed),
        ("p", RunKind::Published, Code::LimitExceeded),
        ("r", RunKind::Review, Code::ApprovalRequired),
    ] {
        let failed = Run {
            kind,
            status: RunStatus::Failed,
            error_code: Some(code),
            error: Some("why".into()),
            finished_at_ms: Some(9),
            ..run(id)
        };
        store.start_run(run(id)).await.unwrap();
        store.finish_run(failed.clone()).await.unwrap();
        let read = store.run(id).await.unwrap().unwrap();
        assert_eq!((read.kind, read.error_code), (kind, Some(code)), "{id}");
        assert_eq!(read, failed);
    }
}

on_both!(
    concurrent_publishes_number_versions_one_after_another,
    a_draft_belongs_to_its_author,
    publishing_numbers_versions_and_captures_the_authors_roles_then,
    publishing_refuses_a_missing_draft_a_changed_draft_and_a_departed_author,
    a_version_keeps_the_upstream_tools_it_was_published_against,
    the_newest_successful_review_of_exactly_a_source_is_found,
    runs_are_recorded_when_they_start_and_when_they_end,
    a_failed_runs_kind_and_code_read_back_as_they_were_written,
);
