//! Scripts' entry points: what `main` may take, and the refusals for everything else.

use larkgate_binding::FieldShape;
use larkgate_script::{ScriptError, entry_point, parse};

fn shape(source: &str) -> Result<Vec<FieldShape>, ScriptError> {
    let ast = parse("test.star", source)?;
    Ok(entry_point(&ast)?.input.to_fields())
}

fn refused(source: &str) -> String {
    shape(source).expect_err(source).to_string()
}

#[test]
fn main_parameters_form_the_input_shape() {
    let source = r#"
def helper(x):
    return x

def main(*, city: str, days: int | None = None, metric: bool, scale: float|None=None):
    """Forecast for a city.

    Days default to 3.
    """
    return {"city": city}
"#;
    let ast = parse("forecast.star", source).unwrap();
    let entry = entry_point(&ast).unwrap();
    assert_eq!(
        entry.input.to_fields(),
        [
            FieldShape::new("city", "str", true),
            FieldShape::new("days", "int | None", false),
            FieldShape::new("metric", "bool", true),
            FieldShape::new("scale", "float | None", false),
        ]
    );
    assert_eq!(
        entry.description.as_deref(),
        Some("Forecast for a city.\n\n    Days default to 3.")
    );
    assert_eq!(
        entry.input.signature("script__forecast", "any"),
        "script__forecast(*, city: str, days: int | None = None, metric: bool, scale: float | None = None) -> any"
    );
}

#[test]
fn a_main_without_parameters_has_the_empty_shape() {
    assert_eq!(shape("def main():\n    return 1\n").unwrap(), []);
    assert_eq!(
        shape("def main(*, x: None | str = None):\n    pass\n").unwrap(),
        [FieldShape::new("x", "str | None", false)]
    );
}

#[test]
fn every_malformed_entry_point_is_refused_with_a_reason() {
    let table = [
        ("x = 1\n", "no top-level `main`"),
        (
            "def main():\n    pass\ndef main():\n    pass\n",
            "more than once",
        ),
        ("def main(city: str):\n    pass\n", "must be keyword-only"),
        ("def main(*, city):\n    pass\n", "needs a type"),
        (
            "def main(*, city: str = 'x'):\n    pass\n",
            "defaults to `'x'`",
        ),
        ("def main(*, city: list[str]):\n    pass\n", "list[str]"),
        (
            "def main(*, city: str | None):\n    pass\n",
            "write `city: str | None = None`",
        ),
        (
            "def main(*, city: str = None):\n    pass\n",
            "its type is `str | None`",
        ),
        (
            "def main(*args):\n    pass\n",
            "only named keyword-only parameters",
        ),
        (
            "def main(**kwargs):\n    pass\n",
            "only named keyword-only parameters",
        ),
        ("def main(*, a: int, a: int):\n    pass\n", "does not parse"),
    ];
    for (source, expected) in table {
        let message = refused(source);
        assert!(message.contains(expected), "{source:?}: {message}");
    }
}

#[test]
fn load_is_refused_with_larkgates_own_message() {
    let message = refused("load('other.star', 'x')\ndef main():\n    pass\n");
    assert!(
        message.starts_with("load() is not available in larkgate scripts"),
        "{message}"
    );
}

#[test]
fn a_syntax_error_is_reported_as_such() {
    let message = refused("def main(:\n");
    assert!(
        message.starts_with("the script does not parse"),
        "{message}"
    );
    // `while` is reserved in this dialect, not a loop.
    assert!(refused("def main():\n    while True:\n        pass\n").contains("does not parse"));
}
