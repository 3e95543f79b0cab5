//! `larkgate run` and `larkgate script ...` as a user runs them: drafts in a worker process,
//! publishing with the author's roles, published runs as `script:NAME`.

use crate::{fails, larkgate_in, ok, stderr, stdout};

const POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.writer]
call = ["kv_*", "clock_now"]
"#;

const GREET: &str = r#"
def main(*, name: str):
    """Greets, and tries to remember it."""
    seen = kv_get(key = name, default = "0")["value"]
    saved = try_call("kv_set", key = name, value = str(int(seen) + 1))
    print("saved" if saved.ok else "not saved: " + saved.error.code)
    return {"hello": name, "saved": saved.ok}
"#;

fn setup() -> tempfile::TempDir {
    setup_with("")
}

/// [`setup`] with `extra` appended to the configuration (a `[store]` section).
fn setup_with(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(dir.path()), format!("{POLICY}{extra}")).unwrap();
    std::fs::write(dir.path().join("greet.star"), GREET).unwrap();
    ok(
        dir.path(),
        &["principal", "add", "ada", "--roles", "author,writer"],
    );
    ok(
        dir.path(),
        &["principal", "add", "pat", "--roles", "publisher"],
    );
    dir
}

#[test]
fn a_file_runs_as_a_draft_that_may_only_read() {
    let dir = setup();
    let output = larkgate_in(
        dir.path(),
        &["--as", "ada", "run", "greet.star", "--arg", "name=Ada"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(result, serde_json::json!({"hello": "Ada", "saved": false}));
    let err = stderr(&output);
    assert!(err.contains("not saved: write_barrier"), "{err}");
    assert!(err.contains("succeeded as ada, 1 tool calls"), "{err}");
}

#[test]
fn publishing_captures_the_authors_roles_and_the_script_runs_as_itself() {
    publish_and_run(&setup());
}

#[test]
fn publishing_and_running_on_postgres_work_as_on_sqlite() {
    let (_schema, section) = crate::postgres_store();
    let dir = setup_with(&section);
    publish_and_run(&dir);
    assert!(!dir.path().join("larkgate-data/larkgate.sqlite3").exists());
    let runs = ok(dir.path(), &["runs", "list"]);
    assert!(runs.contains("greet"), "{runs}");
    assert!(ok(dir.path(), &["audit", "verify"]).contains("intact"));
}

fn publish_and_run(dir: &tempfile::TempDir) {
    assert!(
        fails(dir.path(), &["script", "save", "greet", "greet.star"]).contains("registered author")
    );
    ok(
        dir.path(),
        &["--as", "ada", "script", "save", "greet", "greet.star"],
    );
    assert!(
        fails(dir.path(), &["--as", "ada", "script", "publish", "greet"])
            .contains("publisher role")
    );
    let published = ok(dir.path(), &["--as", "pat", "script", "publish", "greet"]);
    assert!(
        published.contains("runs as script:greet with ada's roles [author,writer]"),
        "{published}"
    );
    let output = larkgate_in(
        dir.path(),
        &["run", "--script", "greet", "--arg", "name=Ada"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("\"saved\": true"),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains("succeeded as script:greet"),
        "{}",
        stderr(&output)
    );
    let history = ok(dir.path(), &["script", "history", "greet"]);
    assert!(
        history.starts_with("v1") && history.contains("published by pat"),
        "{history}"
    );
    let tail = ok(
        dir.path(),
        &["audit", "tail", "--principal", "script:greet"],
    );
    assert!(tail.contains("kv_set -> ok [published]"), "{tail}");
}

/// What the command line shows of a refused save and of a warning. (Every check a save makes
/// is the script service's test, `larkgate-scripts/tests/it/drafts.rs`.)
#[test]
fn a_refused_save_and_a_warning_are_shown_with_their_place() {
    let dir = setup();
    std::fs::write(
        dir.path().join("slip.star"),
        "def main():\n    return kv_gett(key = \"k\")\n",
    )
    .unwrap();
    let err = fails(
        dir.path(),
        &["--as", "ada", "script", "save", "slip", "slip.star"],
    );
    assert!(
        err.contains("slip was not saved")
            && err.contains("slip.star:2:12-19: Use of undefined variable `kv_gett`"),
        "{err}"
    );
    let listed = ok(dir.path(), &["--as", "ada", "script", "list"]);
    assert!(!listed.contains("slip"), "nothing was saved: {listed}");
    // A warning does not refuse: it is shown.
    std::fs::write(
        dir.path().join("warned.star"),
        "def main():\n    unused = kv_get(key = \"k\")\n    return 1\n",
    )
    .unwrap();
    let saved = larkgate_in(
        dir.path(),
        &["--as", "ada", "script", "save", "warned", "warned.star"],
    );
    assert!(saved.status.success(), "{}", stderr(&saved));
    assert!(
        stderr(&saved).contains("warning: warned.star:2:5-11: Unused assignment of `unused`"),
        "{}",
        stderr(&saved)
    );
}

#[test]
fn a_hostile_run_fails_cleanly_and_the_next_run_works() {
    let dir = setup();
    std::fs::write(
        dir.path().join("boom.star"),
        "def main():\n    return len([0] * 2000000000)\n",
    )
    .unwrap();
    let err = fails(dir.path(), &["run", "boom.star"]);
    assert!(err.contains("the run failed (limit_exceeded)"), "{err}");
    let err = fails(dir.path(), &["run", "greet.star"]);
    assert!(
        err.contains("missing the required argument `name`"),
        "{err}"
    );
    assert!(
        ok(
            dir.path(),
            &["--as", "ada", "run", "greet.star", "--arg", "name=x"]
        )
        .contains("hello")
    );
}

/// The run id from `larkgate run`'s stats line on stderr.
fn run_id(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("run run-"))
        .unwrap_or_else(|| panic!("no stats line in {stderr}"));
    line["run ".len()..line.find(':').unwrap()].to_owned()
}

#[test]
fn a_saved_draft_runs_by_name_only_for_its_author_and_is_recorded() {
    let dir = setup();
    ok(
        dir.path(),
        &["--as", "ada", "script", "save", "greet", "greet.star"],
    );
    ok(
        dir.path(),
        &["principal", "add", "bob", "--roles", "author"],
    );
    // (Whose draft runs is the script service's test, `larkgate-scripts/tests/it/authority.rs`.)

    let output = larkgate_in(
        dir.path(),
        &[
            "--as", "ada", "run", "--draft", "greet", "--arg", "name=Ada",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("not saved: write_barrier"), "{err}");
    let id = run_id(&err);
    let record: serde_json::Value =
        serde_json::from_str(&ok(dir.path(), &["runs", "show", &id])).unwrap();
    assert_eq!(record["script"], "greet");
    assert_eq!(record["kind"], "draft");
    assert_eq!(record["principal"], "ada");
    assert_eq!(record["status"], "succeeded");
    // kv_get left the engine; kv_set was refused by the draft barrier before it could.
    assert_eq!(record["tool_calls"], 1);
    assert!(
        record["peak_memory_bytes"].as_u64().unwrap() > 1_000_000,
        "{record}"
    );
    assert!(record["hash"].as_str().unwrap().len() >= 64, "{record}");
    // The run's principal may read its record; another principal may not.
    assert!(ok(dir.path(), &["--as", "ada", "runs", "show", &id]).contains(&id));
    let err = fails(dir.path(), &["--as", "bob", "runs", "show", &id]);
    assert!(err.contains("no run"), "{err}");

    // Listed: in the same record as `runs show` and the runs_list tool give.
    let listed: serde_json::Value =
        serde_json::from_str(&ok(dir.path(), &["--as", "ada", "runs", "list", "--json"])).unwrap();
    assert_eq!(listed[0], record, "one shape for a run");
    let tool = ok(
        dir.path(),
        &["--as", "ada", "call", "runs_list", "--arg", "script=greet"],
    );
    let tool: serde_json::Value = serde_json::from_str(&tool).unwrap();
    assert_eq!(tool["runs"][0], record, "{tool}");
    let shown = ok(dir.path(), &["--as", "ada", "runs", "list"]);
    assert!(
        shown.contains(&id) && shown.contains("succeeded") && shown.contains("greet (draft)"),
        "{shown}"
    );
    // Filters, and what nobody else may read is not listed.
    for (args, expected) in [
        (vec!["--status", "failed"], "no runs match"),
        (vec!["--script", "other"], "no runs match"),
        (vec!["--principal", "ada", "--since", "1h"], id.as_str()),
    ] {
        let mut all = vec!["--as", "ada", "runs", "list"];
        all.extend(args.iter().copied());
        assert!(ok(dir.path(), &all).contains(expected), "{args:?}");
    }
    assert!(ok(dir.path(), &["--as", "bob", "runs", "list"]).contains("no runs match"));
    // The operator (an admin) sees every run.
    assert!(ok(dir.path(), &["runs", "list"]).contains(&id));
    let bad = fails(
        dir.path(),
        &["--as", "ada", "runs", "list", "--status", "done"],
    );
    assert!(bad.contains("running, succeeded or failed"), "{bad}");
    let bad = fails(dir.path(), &["--as", "ada", "runs", "list", "--limit", "0"]);
    assert!(bad.contains("limit is 1 to 1000"), "{bad}");
}

#[test]
fn a_failed_run_shows_what_it_printed_and_records_the_error() {
    let dir = setup();
    std::fs::write(
        dir.path().join("fails.star"),
        "def main():\n    print('looking for the key')\n    fail('the key is missing')\n",
    )
    .unwrap();
    let output = larkgate_in(dir.path(), &["run", "fails.star"]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("looking for the key"), "{err}");
    assert!(err.contains("the key is missing"), "{err}");
    let record: serde_json::Value =
        serde_json::from_str(&ok(dir.path(), &["runs", "show", &run_id(&err)])).unwrap();
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error_code"], "script_failed");
    assert!(
        record["error"]
            .as_str()
            .unwrap()
            .contains("the key is missing"),
        "{record}"
    );
}

const COUNTDOWN: &str = r#"
def main(*, n: int):
    """Counts down by calling itself as a tool."""
    if n == 0:
        return 0
    return script.countdown(n = n - 1)["result"] + 1
"#;

/// A data directory where `countdown` is published and authors may call script tools, with
/// `extra` appended to the configuration.
fn countdown_published(extra: &str) -> tempfile::TempDir {
    let dir = setup();
    std::fs::write(
        crate::config_path(dir.path()),
        format!("{POLICY}[policy.roles.author]\ncall = [\"script__*\"]\n{extra}"),
    )
    .unwrap();
    std::fs::write(dir.path().join("countdown.star"), COUNTDOWN).unwrap();
    ok(
        dir.path(),
        &[
            "--as",
            "ada",
            "script",
            "save",
            "countdown",
            "countdown.star",
        ],
    );
    ok(
        dir.path(),
        &["--as", "pat", "script", "publish", "countdown"],
    );
    dir
}

/// `[scripts] max_depth` reaches the script service, and a depth of 0 is refused. (Nesting
/// itself is the script service's test, `larkgate-scripts/tests/it/nesting.rs`.)
#[test]
fn the_nesting_depth_limit_is_the_configured_one() {
    let dir = countdown_published("[scripts]\nmax_depth = 2\n");
    // Depth 1 calls depth 2, which may call no third level.
    let err = fails(
        dir.path(),
        &["run", "--script", "countdown", "--arg", "n=2"],
    );
    assert!(err.contains("limit_exceeded"), "{err}");
    assert!(err.contains("at most 2 deep"), "{err}");
    // A depth of 0 is not a configuration larkgate starts with.
    std::fs::write(
        crate::config_path(dir.path()),
        format!("{POLICY}[scripts]\nmax_depth = 0\n"),
    )
    .unwrap();
    let err = fails(dir.path(), &["check"]);
    assert!(
        err.contains("scripts.max_depth must be at least 1"),
        "{err}"
    );
}

/// The pids of `parent`'s child processes.
fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the fields after the last ')'.
        let ppid = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .nth(1);
        if ppid == Some(parent.to_string().as_str()) {
            found.push(pid);
        }
    }
    found
}

/// Whether `pid` is a process that still runs (not gone, not a zombie).
pub(crate) fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn ctrl_c_stops_larkgate_run_with_its_worker_and_records_the_run_cancelled() {
    use std::os::unix::process::CommandExt as _;
    let dir = setup();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        format!("{POLICY}[scripts]\nmax_wall_time_ms = 600000\nmax_ticks = 100000000000\n"),
    )
    .unwrap();
    std::fs::write(
        d.join("forever.star"),
        "def main():\n    n = 0\n    for i in range(2000000000):\n        n += 1\n    return n\n",
    )
    .unwrap();
    // In its own process group, as a shell starts a foreground command.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(["--as", "ada", "run", "forever.star"])
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut workers = Vec::new();
    for _ in 0..500 {
        workers = children(cli.id());
        if !workers.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(workers.len(), 1, "one worker runs the script");
    // The run is recorded as started before the script runs; wait for it.
    let db = d.join("larkgate-data/larkgate.sqlite3");
    for _ in 0..500 {
        let started = rusqlite::Connection::open(&db)
            .and_then(|c| c.query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0)))
            .unwrap_or(0);
        if started == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Ctrl-C: SIGINT to the foreground group, which holds the command but not its worker.
    let group = format!("-{}", cli.id());
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", "--", &group])
            .status()
            .unwrap()
            .success()
    );
    let output = cli.wait_with_output().unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("stopped by Ctrl-C"),
        "{}",
        stderr(&output)
    );
    // The worker did not outlive it, and the run says what happened.
    let mut alive = true;
    for _ in 0..250 {
        alive = running(workers[0]);
        if !alive {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive, "the worker {} still runs", workers[0]);
    let (status, error): (String, String) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT status, error FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(status, "failed");
    assert!(error.contains("cancelled"), "{error}");
}

const REVIEW_POLICY: &str = r#"
[policy.roles.admin]
call = ["*"]
[policy.roles.writer]
call = ["kv_*", "clock_now"]
[policy.approvals]
require = ["kv_delete"]
redact = ["value"]
[[policy.rate_limits]]
per = "principal_tool"
tools = ["kv_set"]
calls = 1
period_seconds = 3600
[policy.publishing]
require_review = true
"#;

/// Reads, then writes twice (once through a computed name), and tries a tool its author may
/// not call.
const TIDY: &str = r#"
def main(*, name: str):
    """Counts a visit and clears the old record."""
    seen = kv_get(key = name, default = "0")["value"]
    first = kv_set(key = name, value = "secret-" + str(int(seen) + 1))
    second = call("kv_" + "delete", key = "old-" + name)
    sneaky = try_call("script_" + "publish", name = "tidy")
    return {"first": first, "second": second, "sneaky": sneaky.ok}
"#;

#[test]
fn a_review_run_records_what_a_draft_would_write_and_publishing_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(crate::config_path(dir.path()), REVIEW_POLICY).unwrap();
    std::fs::write(dir.path().join("tidy.star"), TIDY).unwrap();
    ok(
        dir.path(),
        &["principal", "add", "ada", "--roles", "author,writer"],
    );
    ok(
        dir.path(),
        &["principal", "add", "pat", "--roles", "publisher"],
    );
    ok(
        dir.path(),
        &[
            "call",
            "kv_set",
            "--arg",
            "key=old-Ada",
            "--arg",
            "value=kept",
        ],
    );
    ok(
        dir.path(),
        &["--as", "ada", "script", "save", "tidy", "tidy.star"],
    );

    // The policy wants a review before publishing: none yet, so nothing is published.
    let refused = fails(dir.path(), &["--as", "pat", "script", "publish", "tidy"]);
    assert!(
        refused.contains("no successful review run")
            && refused.contains("larkgate run --draft tidy --review"),
        "{refused}"
    );
    assert!(fails(dir.path(), &["script", "history", "tidy"]).contains("no published versions"));

    // A plain draft run stops at the first write.
    let plain = fails(
        dir.path(),
        &["--as", "ada", "run", "--draft", "tidy", "--arg", "name=Ada"],
    );
    assert!(plain.contains("write_barrier"), "{plain}");

    // A review run goes on past it: twice, neither rate-limited (one kv_set an hour) nor gated
    // (kv_delete needs an approval), and nothing is written.
    for _ in 0..2 {
        let output = larkgate_in(
            dir.path(),
            &[
                "--as", "ada", "run", "--draft", "tidy", "--review", "--arg", "name=Ada",
            ],
        );
        assert!(output.status.success(), "{}", stderr(&output));
        let result: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(
            result,
            serde_json::json!({
                "first": {"intercepted": true, "tool": "kv_set", "write": 1},
                "second": {"intercepted": true, "tool": "kv_delete", "write": 2},
                "sneaky": false,
            })
        );
        let err = stderr(&output);
        assert!(
            err.contains("review: 2 intended writes (recorded, not made):")
                && err.contains(r#"1. kv_set(key="Ada", value="<redacted>")"#)
                && err.contains(r#"2. kv_delete(key="old-Ada")"#),
            "{err}"
        );
        assert!(
            !err.contains("secret-1"),
            "a redacted value is never shown: {err}"
        );
    }
    let kept = ok(dir.path(), &["call", "kv_get", "--arg", "key=old-Ada"]);
    assert!(kept.contains("kept"), "{kept}");
    let unset = ok(
        dir.path(),
        &[
            "call",
            "kv_get",
            "--arg",
            "key=Ada",
            "--arg",
            "default=none",
        ],
    );
    assert!(unset.contains("none"), "{unset}");
    let approvals = ok(dir.path(), &["approvals", "list"]);
    assert!(!approvals.contains("kv_delete"), "{approvals}");

    // The record keeps the intended writes; the audit has one review record per write, and
    // the refused publish as a refusal.
    let listed: serde_json::Value =
        serde_json::from_str(&ok(dir.path(), &["--as", "ada", "runs", "list", "--json"])).unwrap();
    let record = &listed[0];
    assert_eq!(record["kind"], "review");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(
        record["intended_writes"],
        serde_json::json!([
            {"tool": "kv_set", "arguments": {"key": "Ada", "value": "<redacted>"}},
            {"tool": "kv_delete", "arguments": {"key": "old-Ada"}, "approval": "needed"},
        ])
    );
    let tail = ok(dir.path(), &["audit", "tail", "--principal", "ada"]);
    let reviews: Vec<&str> = tail.lines().filter(|l| l.contains(" review ")).collect();
    assert_eq!(reviews.len(), 4, "{tail}");
    assert!(
        reviews[0].contains("kv_set [review]") && reviews[0].contains("intended write 1"),
        "{tail}"
    );
    assert!(
        tail.contains("script_publish -> not_found [review]"),
        "{tail}"
    );
    assert!(ok(dir.path(), &["audit", "verify"]).contains("intact"));

    // A dry run shows what publishing would bring; publishing shows it again.
    let shown = ok(
        dir.path(),
        &["--as", "pat", "script", "publish", "tidy", "--dry-run"],
    );
    assert!(
        shown.contains("a first version")
            && shown.contains("reviewed by run run-")
            && shown.contains("as ada: 2 intended writes:")
            && shown.contains(r#"2. kv_delete(key="old-Ada")"#)
            && shown.contains("nothing published: --dry-run"),
        "{shown}"
    );
    assert!(fails(dir.path(), &["script", "history", "tidy"]).contains("no published versions"));
    let published = ok(dir.path(), &["--as", "pat", "script", "publish", "tidy"]);
    assert!(
        published.contains(r#"1. kv_set(key="Ada", value="<redacted>")"#)
            && published.contains("published tidy version 1"),
        "{published}"
    );

    // A changed source needs its own review; the publisher then sees the diff.
    let changed = TIDY.replace("\"old-\" + name", "\"older-\" + name");
    std::fs::write(dir.path().join("tidy.star"), changed).unwrap();
    ok(
        dir.path(),
        &["--as", "ada", "script", "save", "tidy", "tidy.star"],
    );
    let refused = fails(dir.path(), &["--as", "pat", "script", "publish", "tidy"]);
    assert!(refused.contains("no successful review run"), "{refused}");
    // Through the tools this time: a review run, then a publish that answers the diff.
    let review = ok(
        dir.path(),
        &[
            "--as",
            "ada",
            "call",
            "script_run_draft",
            "--args-json",
            r#"{"name": "tidy", "review": true, "args": {"name": "Bo"}}"#,
        ],
    );
    let review: serde_json::Value = serde_json::from_str(&review).unwrap();
    assert_eq!(
        review["intended_writes"][1],
        serde_json::json!({"tool": "kv_delete", "arguments": {"key": "older-Bo"}, "approval": "needed"}),
        "{review}"
    );
    let bad = fails(
        dir.path(),
        &[
            "--as",
            "ada",
            "call",
            "script_run_draft",
            "--args-json",
            r#"{"name": "tidy", "review": "yes", "args": {"name": "Bo"}}"#,
        ],
    );
    assert!(bad.contains("`review` must be true or false"), "{bad}");
    let dry: serde_json::Value = serde_json::from_str(&ok(
        dir.path(),
        &[
            "--as",
            "pat",
            "call",
            "script_publish",
            "--args-json",
            r#"{"name": "tidy", "dry_run": true}"#,
        ],
    ))
    .unwrap();
    assert_eq!(
        (&dry["published"], &dry["version"], &dry["publisher"]),
        (
            &serde_json::json!(false),
            &serde_json::json!(2),
            &serde_json::Value::Null
        ),
        "{dry}"
    );
    assert_eq!(
        ok(dir.path(), &["script", "history", "tidy"])
            .lines()
            .count(),
        1
    );
    let published = ok(
        dir.path(),
        &[
            "--as",
            "pat",
            "call",
            "script_publish",
            "--arg",
            "name=tidy",
        ],
    );
    let published: serde_json::Value = serde_json::from_str(&published).unwrap();
    assert_eq!(published["published"], true);
    assert_eq!(published["version"], 2);
    assert_eq!(published["tool"], "script__tidy");
    assert_eq!(published["publisher"], "pat");
    assert_eq!(published["previous_version"], 1);
    let diff = published["diff"].as_str().unwrap();
    assert!(
        diff.contains("--- tidy v1")
            && diff.contains(r#"-    second = call("kv_" + "delete", key = "old-" + name)"#)
            && diff.contains(r#"+    second = call("kv_" + "delete", key = "older-" + name)"#),
        "{diff}"
    );
    assert_eq!(published["review"]["run_id"], review["run_id"]);
}
