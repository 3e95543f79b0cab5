//! What tool search saves a model, and what a search costs, on a catalogue of 500 tools from
//! 10 upstreams (`tests/it/catalogue.rs`), served to an admin through two virtual servers of
//! the same tools, one listing them all and one with `tool_search = true`:
//!
//! - the tokens of each server's `tools/list` result, and of a `find_tools` answer (5 tools;
//!   the median and the largest over the 50 questions), all counted with OpenAI's
//!   `o200k_base` tokenizer (tiktoken);
//! - the search's quality on the catalogue's 50 questions with known answers: recall@1,
//!   recall@5 and the mean reciprocal rank within 5;
//! - the latency of `find_tools` (`Platform::find_tools`: the caller's listing, the index and
//!   the ranking), median and p99, against the baseline of the full listing of the same 500
//!   tools (`Platform::list`), measured in the same run with their batches interleaved.
//!
//! `cargo bench -p larkgate-platform --bench tool_search`

#[path = "../tests/it/catalogue.rs"]
mod catalogue;

use std::sync::Arc;
use std::time::{Duration, Instant};

use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::policy::Pattern;
use larkgate_platform::servers::{ServerSpec, VirtualServer};
use larkgate_platform::{Platform, RunContext, SessionIdentity};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore};

fn identity(server: ServerSpec) -> SessionIdentity {
    let principal = Principal {
        id: "bench".into(),
        kind: PrincipalKind::User,
        roles: vec!["admin".into()],
        issuer: IssuerBinding::Local,
    };
    SessionIdentity {
        run: RunContext::direct(principal),
        label: "bench".into(),
        server: Some(Arc::new(
            VirtualServer::new(server).expect("a valid server"),
        )),
    }
}

fn server(name: &str, tool_search: bool) -> ServerSpec {
    ServerSpec {
        name: name.into(),
        tools: vec![Pattern::new("*").unwrap()],
        prefix: true,
        tool_search,
        ..Default::default()
    }
}

fn median_and_p99(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let platform = runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
            .await
            .unwrap();
        let policy = toml::from_str("[roles.admin]\ncall = [\"*\"]\n").unwrap();
        catalogue::register(Platform::builder(store, audit).unwrap().policy(policy)).build()
    });
    let full = identity(server("all", false));
    let searched = identity(server("search", true));
    let tokenizer = tiktoken_rs::o200k_base().expect("the o200k_base tokenizer loads");
    let tokens = |text: &str| tokenizer.encode_with_special_tokens(text).len();

    let full_listing = platform.list(Some(&full));
    let catalogue_tools = full_listing
        .iter()
        .filter(|t| t.name.contains("__"))
        .count();
    let full_tokens = tokens(&serde_json::json!({ "tools": full_listing }).to_string());
    let search_listing = platform.list(Some(&searched));
    let search_tokens = tokens(&serde_json::json!({ "tools": search_listing }).to_string());
    let mut answer_tokens: Vec<usize> = catalogue::QUERIES
        .iter()
        .map(|(query, _)| {
            let arguments = serde_json::json!({ "query": query, "limit": 5 });
            let answer = platform
                .find_tools(Some(&searched), arguments.as_object())
                .unwrap();
            let content = answer.content.unwrap();
            tokens(
                content.blocks[0]
                    .as_text()
                    .map(|t| t.text.as_str())
                    .unwrap_or(""),
            )
        })
        .collect();
    answer_tokens.sort();
    println!(
        "listing tokens (o200k_base): all {} tools listed {full_tokens}; with tool search \
         ({} tools listed) {search_tokens}, {:.1}% of it",
        full_listing.len(),
        search_listing.len(),
        100.0 * search_tokens as f64 / full_tokens as f64,
    );
    println!(
        "a find_tools answer of 5 tools: median {} tokens, largest {}",
        answer_tokens[answer_tokens.len() / 2],
        answer_tokens[answer_tokens.len() - 1],
    );
    assert_eq!(catalogue_tools, 500, "the catalogue has 500 tools");

    let reciprocal: f64 = catalogue::QUERIES
        .iter()
        .map(|(query, expected)| {
            catalogue::found(&platform, &searched, query, 5)
                .iter()
                .position(|name| name == expected)
                .map_or(0.0, |rank| 1.0 / (rank + 1) as f64)
        })
        .sum();
    println!(
        "search quality on {} questions: recall@1 {:.2}, recall@5 {:.2}, MRR@5 {:.2}",
        catalogue::QUERIES.len(),
        catalogue::recall_at(&platform, &searched, 1),
        catalogue::recall_at(&platform, &searched, 5),
        reciprocal / catalogue::QUERIES.len() as f64,
    );
    for (query, expected) in catalogue::QUERIES {
        let found = catalogue::found(&platform, &searched, query, 5);
        if !found.iter().any(|name| name == expected) {
            println!("  missed: {query:?} wants {expected}; found {found:?}");
        }
    }

    // Latency: batches of listings and of searches, interleaved.
    let (mut listings, mut searches) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        for _ in 0..25 {
            let started = Instant::now();
            std::hint::black_box(platform.list(Some(&full)));
            listings.push(started.elapsed());
        }
        for (query, _) in catalogue::QUERIES.iter().take(25) {
            let arguments = serde_json::json!({ "query": query, "limit": 5 });
            let started = Instant::now();
            std::hint::black_box(platform.find_tools(Some(&searched), arguments.as_object()))
                .unwrap();
            searches.push(started.elapsed());
        }
    }
    let (list_median, list_p99) = median_and_p99(listings);
    let (find_median, find_p99) = median_and_p99(searches);
    println!(
        "latency on 500 tools ({} each): full listing (baseline) median {list_median:?}, p99 \
         {list_p99:?}; find_tools median {find_median:?}, p99 {find_p99:?} ({:.1}x the listing)",
        40 * 25,
        find_median.as_secs_f64() / list_median.as_secs_f64(),
    );
}
