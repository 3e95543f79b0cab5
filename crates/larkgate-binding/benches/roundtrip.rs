//! A realistic ~1 MiB JSON document through JSON → Value → Starlark → Value → JSON, against
//! serde_json's own parse + serialize of the same bytes, measured in the same run.
//!
//! Target: the whole round trip within 4× of serde_json's parse + serialize.
//!
//! Criterion measures both; afterwards the bench prints MB/s, the ratio of the medians, and
//! where the round trip spends its time, stage by stage.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use larkgate_binding::{Limits, Value, from_json_slice, from_starlark, to_starlark};
use starlark::values::Heap;

/// A deterministic document shaped like an issue tracker's API response: nested objects,
/// arrays, strings, integers, floats, booleans and nulls, about 1 MiB of text.
fn document() -> Vec<u8> {
    let words = [
        "gateway",
        "script",
        "approval",
        "upstream",
        "starlark",
        "limit",
        "audit",
        "token",
        "policy",
        "session",
        "latency",
        "federation",
        "canonical",
        "budget",
        "refusal",
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let sentence = |n: usize, next: &mut dyn FnMut() -> u64| {
        (0..n)
            .map(|_| words[(next() % words.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut records = Vec::new();
    let mut size = 0;
    let mut id = 0u64;
    while size < 1024 * 1024 {
        id += 1;
        let comments: Vec<serde_json::Value> = (0..next() % 4)
            .map(|c| {
                serde_json::json!({
                    "id": id * 10 + c,
                    "body": sentence(12, &mut next),
                    "reactions": {"plus_one": next() % 20, "heart": next() % 5, "confused": 0},
                    "edited": next() % 3 == 0,
                })
            })
            .collect();
        let record = serde_json::json!({
            "id": id,
            "number": 1000 + id,
            "title": sentence(6, &mut next),
            "state": if next() % 2 == 0 { "open" } else { "closed" },
            "score": (next() % 10_000) as f64 / 997.0,
            "ratio": -((next() % 1000) as f64) * 1.5e-3,
            "locked": false,
            "milestone": null,
            "labels": (0..next() % 4).map(|_| sentence(1, &mut next)).collect::<Vec<_>>(),
            "author": {
                "login": format!("user{}", next() % 5000),
                "id": next() % 1_000_000_000,
                "site_admin": next() % 50 == 0,
                "avatar_url": format!("https://avatars.example.com/u/{}?v=4", next() % 100_000),
            },
            "comments": comments,
            "created_at": format!("2026-{:02}-{:02}T{:02}:00:00Z", 1 + next() % 12, 1 + next() % 28, next() % 24),
        });
        size += record.to_string().len() + 1;
        records.push(record);
    }
    serde_json::to_vec(&serde_json::json!({ "total_count": records.len(), "items": records }))
        .expect("serializes")
}

/// Limits that admit the document: it holds more than the default 100,000 nodes.
fn limits() -> Limits {
    Limits::new(64, 1_000_000, 16 * 1024 * 1024).expect("positive")
}

fn baseline(text: &[u8]) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_slice(text).expect("parses");
    serde_json::to_vec(&value).expect("serializes")
}

fn roundtrip(text: &[u8]) -> Vec<u8> {
    let limits = limits();
    let value = from_json_slice(text, limits).expect("converts");
    let back = Heap::temp(|heap| {
        let star = to_starlark(&value, heap, limits).expect("to starlark");
        from_starlark(star, limits).expect("from starlark")
    });
    serde_json::to_vec(&back).expect("serializes")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn bench(c: &mut Criterion) {
    let text = document();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&roundtrip(&text)).unwrap(),
        serde_json::from_slice::<serde_json::Value>(&text).unwrap(),
        "the round trip must return the document unchanged"
    );
    let mut group = c.benchmark_group("json_roundtrip_1mib");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(30);
    group.bench_function("baseline: serde_json parse + serialize", |b| {
        b.iter(|| baseline(black_box(&text)))
    });
    group.bench_function(
        "larkgate: JSON -> Value -> Starlark -> Value -> JSON",
        |b| b.iter(|| roundtrip(black_box(&text))),
    );
    group.finish();

    // The ratio, from interleaved runs so both see the same machine conditions.
    let rounds = 41;
    let (mut base, mut ours) = (Vec::new(), Vec::new());
    let mut stages: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        let t = Instant::now();
        black_box(baseline(black_box(&text)));
        base.push(t.elapsed());

        let t = Instant::now();
        black_box(roundtrip(black_box(&text)));
        ours.push(t.elapsed());

        let limits = limits();
        let t = Instant::now();
        let value = from_json_slice(&text, limits).unwrap();
        stages[0].push(t.elapsed());
        let back: Value = Heap::temp(|heap| {
            let t = Instant::now();
            let star = to_starlark(&value, heap, limits).unwrap();
            stages[1].push(t.elapsed());
            let t = Instant::now();
            let back = from_starlark(star, limits).unwrap();
            stages[2].push(t.elapsed());
            back
        });
        let t = Instant::now();
        black_box(serde_json::to_vec(&back).unwrap());
        stages[3].push(t.elapsed());
    }
    let mb = text.len() as f64 / 1e6;
    let (base, ours) = (median(base), median(ours));
    println!();
    println!("document: {} bytes", text.len());
    println!(
        "baseline serde_json parse + serialize: {:>8.2?}  {:>7.1} MB/s",
        base,
        mb / base.as_secs_f64()
    );
    println!(
        "larkgate round trip:                   {:>8.2?}  {:>7.1} MB/s",
        ours,
        mb / ours.as_secs_f64()
    );
    println!(
        "ratio (larkgate / baseline): {:.2}x  (target: at most 4x)",
        ours.as_secs_f64() / base.as_secs_f64()
    );
    for (name, samples) in [
        "JSON -> Value",
        "Value -> Starlark",
        "Starlark -> Value",
        "Value -> JSON",
    ]
    .iter()
    .zip(stages)
    {
        println!("  stage {name:<18} {:>8.2?}", median(samples));
    }
}

/// What passing a call's arguments on to an upstream costs: the canonical form an approver is
/// shown (`canonical_map_to_json`) against the plain conversion used before it
/// (`map_to_json`), in the same run, on a tool call's typical arguments and on the 1 MiB
/// document.
fn passing_on(c: &mut Criterion) {
    use larkgate_binding::{Map, canonical_map_to_json, map_to_json};
    let call = br#"{"city": "Oslo", "days": 3, "units": "metric", "threshold": 0.25,
        "tags": ["rain", "wind"], "window": {"from": 1.0, "to": 17.5}}"#;
    let document = document();
    let as_map = |text: &[u8]| match from_json_slice(text, limits()).unwrap() {
        Value::Map(map) => map,
        _ => unreachable!("an object"),
    };
    // (name, arguments, rounds of the interleaved comparison)
    let cases: [(&str, Map, usize); 2] = [
        ("a tool call", as_map(call), 20_001),
        ("1 MiB", as_map(&document), 21),
    ];
    let mut group = c.benchmark_group("arguments_passed_on");
    for (name, map, _) in &cases {
        group.bench_function(format!("baseline map_to_json: {name}"), |b| {
            b.iter(|| map_to_json(black_box(map)))
        });
        group.bench_function(format!("canonical_map_to_json: {name}"), |b| {
            b.iter(|| canonical_map_to_json(black_box(map)))
        });
    }
    group.finish();
    for (name, map, rounds) in &cases {
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..*rounds {
            let t = Instant::now();
            black_box(map_to_json(black_box(map)));
            base.push(t.elapsed());
            let t = Instant::now();
            black_box(canonical_map_to_json(black_box(map)));
            ours.push(t.elapsed());
        }
        let (base, ours) = (median(base), median(ours));
        println!(
            "arguments passed on, {name}: map_to_json {base:.2?}, canonical_map_to_json \
             {ours:.2?}, ratio {:.2}x",
            ours.as_secs_f64() / base.as_secs_f64()
        );
    }
}

criterion_group!(benches, bench, passing_on);
criterion_main!(benches);
