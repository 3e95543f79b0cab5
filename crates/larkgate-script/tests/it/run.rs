//! The in-process runner: arguments, results, printing, and every limit the interpreter
//! itself can enforce — under small limits, so hostile scripts fail fast. (Scripts that abort
//! the process, like `[0] * 2000000000`, need the worker process and are not run here.)

use larkgate_binding::{Limits, Map, Value};
use larkgate_script::{RunError, Script, ScriptLimits, run_in_process};

fn small() -> ScriptLimits {
    ScriptLimits {
        max_ticks: 200_000,
        max_memory_bytes: 8 * 1024 * 1024,
        max_call_stack: 50,
        max_print_bytes: 1024,
        values: Limits::new(16, 1_000, 64 * 1024).unwrap(),
        ..ScriptLimits::default()
    }
}

fn run(source: &str, args: &[(&str, Value)]) -> Result<larkgate_script::RunOutput, RunError> {
    let args: Map = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    run_in_process(
        Script {
            filename: "test.star",
            source,
            arguments: &args,
            limits: &small(),
        },
        None,
    )
    .into_result()
}

fn limit_of(source: &str) -> &'static str {
    match run(source, &[]) {
        Err(RunError::Limit { limit, .. }) => limit,
        other => panic!("{source:?} should hit a limit, got {other:?}"),
    }
}

#[test]
fn main_runs_with_its_arguments_and_its_result_and_prints_are_returned() {
    let source = r#"
def main(*, city: str, days: int | None = None):
    """Forecast."""
    days = days or 3
    print("forecast for", city)
    return struct(city = city, days = days, temps = [20.5, 21.0][:days])
"#;
    let out = run(source, &[("city", "Oslo".into())]).unwrap();
    assert_eq!(
        out.result.to_string(),
        r#"{"city":"Oslo","days":3,"temps":[20.5,21.0]}"#
    );
    assert_eq!(out.printed, "forecast for Oslo\n");
    assert!(out.ticks > 0);
    let out = run(source, &[("city", "Oslo".into()), ("days", Value::Int(1))]).unwrap();
    assert_eq!(
        out.result.to_string(),
        r#"{"city":"Oslo","days":1,"temps":[20.5]}"#
    );
}

#[test]
fn arguments_are_bound_to_main_like_a_tools() {
    let source = "def main(*, city: str):\n    return city\n";
    let err = run(source, &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("missing the required argument `city`"),
        "{err}"
    );
    let err = run(source, &[("city", Value::Int(1))]).unwrap_err();
    assert!(
        err.to_string()
            .contains("argument `city` must be str, got int"),
        "{err}"
    );
    let err = run(source, &[("town", "x".into())]).unwrap_err();
    assert!(matches!(err, RunError::InvalidArguments(_)), "{err}");
}

#[test]
fn a_loop_of_4e18_iterations_stops_on_ticks() {
    let source = "def main():\n    for _ in range(2000000000):\n        for _ in range(2000000000):\n            pass\n";
    assert_eq!(limit_of(source), "ticks");
}

#[test]
fn unbounded_recursion_stops_on_the_call_stack() {
    assert_eq!(
        limit_of("def f(n):\n    return f(n + 1)\ndef main():\n    return f(0)\n"),
        "call stack"
    );
}

#[test]
fn a_flood_of_prints_stops_on_printed_bytes() {
    assert_eq!(
        limit_of("def main():\n    for i in range(100000):\n        print('x' * 100)\n"),
        "printed bytes"
    );
}

#[test]
fn a_growing_heap_stops_on_the_heap_limit() {
    let source = "def main():\n    xs = []\n    for i in range(1000000):\n        xs.append([i] * 100)\n    return len(xs)\n";
    let limits = ScriptLimits {
        max_ticks: 100_000_000,
        ..small()
    };
    match run_in_process(
        Script {
            filename: "heap.star",
            source,
            arguments: &Map::new(),
            limits: &limits,
        },
        None,
    )
    .into_result()
    {
        Err(RunError::Limit {
            limit: "memory", ..
        }) => {}
        other => panic!("expected the heap limit, got {other:?}"),
    }
}

#[test]
fn results_over_the_value_limits_or_outside_the_matrix_are_refused() {
    assert_eq!(
        limit_of("def main():\n    return list(range(5000))\n"),
        "result"
    );
    let message = match run("def main():\n    return len\n", &[]) {
        Err(RunError::Limit {
            limit: "result",
            message,
        }) => message,
        other => panic!("{other:?}"),
    };
    assert!(message.contains("type `function`"), "{message}");
    assert_eq!(
        limit_of("def main():\n    a = []\n    a.append(a)\n    return a\n"),
        "result"
    );
}

#[test]
fn a_run_stopped_by_a_limit_keeps_what_it_printed() {
    let source = "def main():\n    print('before')\n    for i in range(2000000000):\n        for j in range(2000000000):\n            pass\n";
    let report = run_in_process(
        Script {
            filename: "p.star",
            source,
            arguments: &Map::new(),
            limits: &small(),
        },
        None,
    );
    assert_eq!(report.printed, "before\n");
    assert!(
        matches!(report.outcome, Err(RunError::Limit { limit: "ticks", .. })),
        "{:?}",
        report.outcome
    );
    assert!(report.usage.ticks > small().max_ticks);
    assert_eq!(
        report.usage.peak_memory_bytes, None,
        "no process of its own"
    );
}

#[test]
fn the_scripts_own_failure_is_reported_as_such() {
    match run("def main():\n    fail('no data for', 'Oslo')\n", &[]) {
        Err(error @ RunError::Raised(_)) => {
            assert!(error.to_string().contains("no data for Oslo"), "{error}");
            assert_eq!(error.code(), larkgate_caller::Code::ScriptFailed);
        }
        other => panic!("{other:?}"),
    }
    match run("def main():\n    return 1 + 'a'\n", &[]) {
        Err(error @ RunError::Raised(_)) => {
            assert_eq!(error.code().as_str(), "script_failed");
        }
        other => panic!("{other:?}"),
    }
}
