//! Script memory through `larkgate serve`: every run's worker is capped at its memory limit,
//! the runs going at once stay within the memory budget, and the server keeps serving while
//! they hit their limits. Memory is read the way an operator reads it, from `/proc`: the
//! proportional set size (`Pss`, what `smem` and `ps_mem` show) of the server and of each of its
//! worker processes, in which the program's pages they all map count once in all rather than
//! once per process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use larkgate_upstream::client::Revisions;

use crate::ok;
use crate::serve::{admin_gateway, client, client_with};

/// A dict of 10^7 ints: about 480 MiB of container storage, which the interpreter's own heap
/// limit does not count.
const DICT_OF_10E7: &str =
    "def main():\n    d = {}\n    for i in range(10000000):\n        d[i] = i\n    return len(d)\n";

const MIB: u64 = 1024 * 1024;

/// The resident memory of process `pid` (its `Pss`), in bytes (0 once it is gone).
fn resident(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // `pid (comm) state ppid ...`: the fields after the last `)`.
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// The most memory the server and its workers held together, sampled every few milliseconds
/// until stopped: the sum, and each part of it at that moment.
#[derive(Debug, Default, Clone)]
struct Peak {
    total: u64,
    server: u64,
    workers: Vec<u64>,
    samples: u64,
}

fn sample(server: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Peak> {
    std::thread::spawn(move || {
        let mut peak = Peak::default();
        while !stop.load(Ordering::Relaxed) {
            let own = resident(server);
            let workers: Vec<u64> = children(server).into_iter().map(resident).collect();
            let total = own + workers.iter().sum::<u64>();
            peak.samples += 1;
            if total > peak.total {
                peak = Peak {
                    total,
                    server: own,
                    workers,
                    samples: peak.samples,
                };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    })
}

fn object(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().unwrap().clone()
}

fn envelope(result: &rmcp::model::CallToolResult) -> serde_json::Value {
    result.meta.clone().expect("an envelope in _meta").0["larkgate/envelope"].clone()
}

/// The server's metrics, from its operational endpoints' base URL.
async fn metrics(base: &str) -> String {
    let response = reqwest::get(format!("{base}/metrics")).await.unwrap();
    response.text().await.unwrap()
}

/// The value of a metric in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn eight_runs_of_a_dict_of_10e7_ints_at_once_stay_within_the_budget_while_the_server_serves() {
    // The default memory limit; a budget of 1 GiB, room for three runs' reservations (256 MiB
    // and a worker's 32 MiB each): the others wait their turn. The memory limit is what must
    // stop each run, so the wall time limit is far off: on a busy machine a run takes longer to
    // reach its memory limit, never less memory.
    let budget = 1024 * MIB;
    let (_dir, server, token) = admin_gateway(&format!(
        "[scripts]\nmemory_budget_bytes = {budget}\nstart_wait_ms = 600000\nmax_wall_time_ms = 600000\n"
    ));
    let url = server.url.clone();
    let base = server.ops.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample(server.pid(), stop.clone());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let (outcomes, probes, reserved) = runtime.block_on(async {
        let runs: Vec<_> = (0..8)
            .map(|_| {
                let (url, token) = (url.clone(), token.clone());
                tokio::spawn(async move {
                    // A run may wait its turn up to start_wait_ms, then run: the client waits
                    // as long (its default round trip of 30 s is not what is tested here).
                    let limits = larkgate_upstream::client::UpstreamLimits {
                        call_timeout: Duration::from_secs(1200),
                        ..Default::default()
                    };
                    let c = client_with(&url, &token, Revisions::Latest, limits)
                        .await
                        .unwrap();
                    let result = c
                        .call_tool(
                            "script_run_draft",
                            object(serde_json::json!({"source": DICT_OF_10E7})),
                        )
                        .await
                        .unwrap();
                    (result, started.elapsed())
                })
            })
            .collect();
        // Throughout, another client calls a tool and reads the metrics; every answer must
        // come, and come as success.
        let prober = {
            let (url, token, base) = (url.clone(), token.clone(), base.clone());
            let done = stop.clone();
            tokio::spawn(async move {
                let c = client(&url, &token, Revisions::Latest).await.unwrap();
                let (mut probes, mut reserved) = (Vec::new(), Vec::new());
                while !done.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let result = c
                        .call_tool("clock_now", object(serde_json::json!({})))
                        .await;
                    let answered = result.is_ok_and(|r| r.is_error != Some(true));
                    probes.push((started.elapsed(), asked.elapsed(), answered));
                    let text = metrics(&base).await;
                    reserved
                        .push(metric(&text, "larkgate_script_memory_reserved_bytes").unwrap_or(0));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                (probes, reserved)
            })
        };
        let mut outcomes = Vec::new();
        for run in runs {
            outcomes.push(run.await.unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        let (probes, reserved) = prober.await.unwrap();
        (outcomes, probes, reserved)
    });
    let peak = sampler.join().unwrap();
    let last_ended = outcomes.iter().map(|(_, at)| *at).max().unwrap();
    eprintln!(
        "8 runs in {last_ended:?}; peak of the sum {} MiB (server {} MiB, workers {:?} MiB) over {} samples; reserved at most {} MiB",
        peak.total / MIB,
        peak.server / MIB,
        peak.workers.iter().map(|w| w / MIB).collect::<Vec<_>>(),
        peak.samples,
        reserved.iter().max().unwrap() / MIB,
    );
    for (result, _) in &outcomes {
        assert_eq!(result.is_error, Some(true), "{result:?}");
        let envelope = envelope(result);
        assert_eq!(envelope["code"], "limit_exceeded", "{envelope}");
        let message = envelope["message"].as_str().unwrap();
        assert!(
            message.contains("exceeded its memory limit: an allocation of"),
            "{message}"
        );
    }
    assert!(
        peak.total <= budget,
        "the server and its workers held {} MiB together, over the {} MiB budget: {peak:?}",
        peak.total / MIB,
        budget / MIB
    );
    // The runs did queue: never more than three reservations, and three at some point.
    let most = *reserved.iter().max().unwrap();
    assert_eq!(most, 3 * 288 * MIB, "{reserved:?}");
    // Serving throughout: every probe answered, and answered while runs were going.
    assert!(
        probes.iter().all(|(_, _, answered)| *answered),
        "{probes:?}"
    );
    // Bounds measured against the runs themselves, so a slow machine moves both: the first run
    // to end took one run's time; no probe took half of that (none waited on a run), and while
    // runs went, probes kept being answered, never as much as a run's time apart.
    let first_ended = outcomes.iter().map(|(_, at)| *at).min().unwrap();
    let slowest = probes.iter().map(|(_, took, _)| *took).max().unwrap();
    assert!(
        slowest < first_ended / 2,
        "a probe took {slowest:?}; the first run ended after {first_ended:?}"
    );
    let during: Vec<Duration> = probes
        .iter()
        .filter(|(at, _, _)| *at < last_ended)
        .map(|(at, _, _)| *at)
        .collect();
    assert!(
        during.len() >= 4,
        "{} probes answered in {last_ended:?}",
        during.len()
    );
    let widest = during
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .chain([during[0], last_ended - during[during.len() - 1]])
        .max()
        .unwrap();
    assert!(
        widest < first_ended,
        "no probe was answered for {widest:?} while runs went; the first run ended after {first_ended:?}"
    );
    eprintln!("probes: {} answered, slowest {slowest:?}", probes.len());
}

#[test]
fn a_run_that_does_not_get_its_turn_in_time_is_refused_saying_why_and_is_not_recorded() {
    // A budget of exactly one run's reservation, and half a second of waiting.
    let (dir, server, token) = admin_gateway(&format!(
        "[scripts]\nmemory_budget_bytes = {}\nstart_wait_ms = 500\nmax_wall_time_ms = 60000\nmax_ticks = 100000000000\n",
        288 * MIB
    ));
    let url = server.url.clone();
    let base = server.ops.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let forever =
            "def main():\n    n = 0\n    for i in range(2000000000):\n        n += 1\n    return n\n";
        let holder = {
            let (url, token) = (url.clone(), token.clone());
            tokio::spawn(async move {
                let c = client(&url, &token, Revisions::Latest).await.unwrap();
                c.call_tool(
                    "script_run_draft",
                    object(serde_json::json!({"source": forever})),
                )
                .await
            })
        };
        let mut going = false;
        // Readiness, however long a busy machine takes to start a worker.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let text = metrics(&base).await;
            if metric(&text, "larkgate_active_runs") == Some(1) {
                assert_eq!(
                    metric(&text, "larkgate_script_memory_reserved_bytes"),
                    Some(288 * MIB)
                );
                going = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(going, "the first run never started");
        let c = client(&url, &token, Revisions::Latest).await.unwrap();
        let result = c
            .call_tool(
                "script_run_draft",
                object(serde_json::json!({"source": "def main():\n    return 1\n"})),
            )
            .await
            .unwrap();
        assert_eq!(result.is_error, Some(true), "{result:?}");
        let envelope = envelope(&result);
        assert_eq!(envelope["code"], "limit_exceeded", "{envelope}");
        assert_eq!(
            envelope["message"],
            "the run did not get its turn within 0.5 s: runs going: 1 of at most 32, holding \
             288 MiB of the 288 MiB script memory budget; each run reserves 288 MiB (its \
             memory limit and its worker's own 32 MiB)"
        );
        assert!(
            envelope["hint"]
                .as_str()
                .unwrap()
                .contains("raise [scripts] memory_budget_bytes"),
            "{envelope}"
        );
        holder.abort();
    });
    drop(server);
    // Only the run that got its turn was recorded.
    let db = rusqlite::Connection::open(dir.path().join("larkgate-data/larkgate.sqlite3")).unwrap();
    let runs: i64 = db
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1);
}

#[test]
fn check_explains_memory_settings_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = BTreeMap::from([
        (
            "max_heap_bytes = 268435456",
            "scripts.max_heap_bytes is now scripts.max_memory_bytes",
        ),
        (
            "max_memory_bytes = 1048576",
            "scripts.max_memory_bytes must be at least 16777216",
        ),
        (
            "max_memory_bytes = 1073741824\nmax_address_space_bytes = 1073741824",
            "scripts.max_address_space_bytes (1073741824) must be at least max_memory_bytes",
        ),
        (
            "memory_budget_bytes = 268435456",
            "scripts.memory_budget_bytes (268435456) is less than one run reserves (301989888",
        ),
        (
            "start_wait_ms = 0",
            "scripts.start_wait_ms must be at least 1",
        ),
    ]);
    for (keys, expected) in cases {
        std::fs::write(crate::config_path(d), format!("[scripts]\n{keys}\n")).unwrap();
        let output = crate::fails(d, &["check"]);
        assert!(output.contains(expected), "{keys}: {output}");
    }
    // A memory limit above 256 MiB takes the address space up with it.
    std::fs::write(
        crate::config_path(d),
        "[scripts]\nmax_memory_bytes = 2147483648\n",
    )
    .unwrap();
    ok(d, &["check"]);
}

#[test]
fn a_script_calling_a_script_when_the_budget_holds_one_run_fails_after_the_wait_not_forever() {
    // The outer run holds the whole budget; the run it asks for can never get a turn until it
    // ends, and it will not end before that run does: the bounded wait breaks the circle.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        format!(
            "[scripts]\nmemory_budget_bytes = {}\nstart_wait_ms = 300\n",
            288 * MIB
        ),
    )
    .unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "admin"]);
    std::fs::write(d.join("inner.star"), "def main():\n    return 1\n").unwrap();
    std::fs::write(
        d.join("outer.star"),
        "def main():\n    return call(\"script__inner\")\n",
    )
    .unwrap();
    for name in ["inner", "outer"] {
        ok(
            d,
            &[
                "--as",
                "ada",
                "script",
                "save",
                name,
                &format!("{name}.star"),
            ],
        );
        ok(d, &["--as", "ada", "script", "publish", name]);
    }
    let started = Instant::now();
    let output = crate::fails(d, &["--as", "ada", "run", "--script", "outer"]);
    assert!(
        output.contains("limit_exceeded") && output.contains("did not get its turn within 0.3 s"),
        "{output}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}
