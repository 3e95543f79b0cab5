//! Input shapes: validation, keyword-only binding and its messages, schemas and signatures.

use larkgate_binding::{
    ErrorKind, FieldShape, InputShape, Map, Value, bind_shape, validate_input_shape,
};
use starlark::values::Heap;

fn kv_get_shape() -> Vec<FieldShape> {
    vec![
        FieldShape::new("key", "str", true),
        FieldShape::new("default", "str | None", false),
    ]
}

#[test]
fn validate_input_shape_accepts_exactly_what_plans_produce() {
    let accepted: &[&[(&str, &str, bool)]] = &[
        &[],
        &[("a", "str", true)],
        &[
            ("a", "int", true),
            ("b", "bool", true),
            ("c", "float", true),
        ],
        &[("a", "str | None", false), ("b", "int | None", false)],
        &[("a", "bool | None", false), ("b", "float | None", false)],
        &[("None", "str", true)],
    ];
    for fields in accepted {
        let shape: Vec<FieldShape> = fields
            .iter()
            .map(|(n, t, r)| FieldShape::new(*n, *t, *r))
            .collect();
        assert!(validate_input_shape(&shape).is_ok(), "{shape:?}");
    }
    let refused: &[&[(&str, &str, bool)]] = &[
        &[("a", "unsupported", true)],
        &[("a", "unsupported | None", false)],
        &[("a", "str", false)],       // optional without | None
        &[("a", "str | None", true)], // required with | None
        &[("a", "str|None", false)],  // not the exact notation
        &[("a", "Optional[str]", false)],
        &[("a", "list[str]", true)],
        &[("a", "dict[str, int]", true)],
        &[("a", "any", true)],
        &[("a", "None", false)],
        &[("a", "", true)],
        &[("a", "str | None | None", false)],
        &[("a", "str", true), ("a", "int", true)], // duplicate
        &[("def", "str", true)],
        &[("my-key", "str", true)],
        &[("", "str", true)],
        &[("1a", "str", true)],
    ];
    for fields in refused {
        let shape: Vec<FieldShape> = fields
            .iter()
            .map(|(n, t, r)| FieldShape::new(*n, *t, *r))
            .collect();
        let err = validate_input_shape(&shape).expect_err(&format!("{shape:?}"));
        assert_eq!(err.kind(), ErrorKind::InvalidPlan, "{shape:?}");
    }
}

/// Binds a Starlark call `kv_get(<call>)`, where `call` is Starlark argument syntax.
fn bind(call: &str) -> Result<Map, larkgate_binding::Error> {
    // Evaluate the arguments in Starlark so their values are real Starlark values.
    let program =
        format!("def capture(*args, **kwargs):\n    return (args, kwargs)\ncapture({call})");
    crate::support::with_starlark(&program, |v| {
        let tuple = starlark::values::tuple::TupleRef::from_value(v).unwrap();
        let args = starlark::values::tuple::TupleRef::from_value(tuple.content()[0]).unwrap();
        let kwargs = starlark::values::dict::DictRef::from_value(tuple.content()[1]).unwrap();
        let named: Vec<(&str, starlark::values::Value<'_>)> = kwargs
            .iter()
            .map(|(k, v)| (k.unpack_str().unwrap(), v))
            .collect();
        bind_shape("kv_get", &kv_get_shape(), args.content(), &named)
    })
}

fn message(call: &str) -> String {
    let err = bind(call).expect_err(call);
    assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{call}");
    err.to_string()
}

#[test]
fn keyword_arguments_bind_to_a_fresh_canonical_map() {
    let map = bind("key = 'a', default = 'b'").unwrap();
    assert_eq!(map.get("key"), Some(&Value::from("a")));
    assert_eq!(map.get("default"), Some(&Value::from("b")));
}

#[test]
fn an_explicit_none_for_an_optional_field_is_the_same_as_omitting_it() {
    assert_eq!(
        bind("key = 'a', default = None").unwrap(),
        bind("key = 'a'").unwrap()
    );
    assert!(
        !bind("key = 'a', default = None")
            .unwrap()
            .contains_key("default")
    );
}

#[test]
fn positional_arguments_are_refused_with_the_keyword_form() {
    assert_eq!(
        message("'a'"),
        "kv_get() takes keyword arguments only, but got 1 positional argument: call kv_get(key=...)"
    );
    assert!(message("'a', 'b'").contains("got 2 positional arguments"));
}

#[test]
fn unknown_keywords_are_refused_naming_the_accepted_ones() {
    assert_eq!(
        message("ky = 'a'"),
        "kv_get() got an unexpected keyword argument `ky`; did you mean `key`?; it accepts: key, default"
    );
    assert_eq!(
        message("key = 'a', colour = 'red'"),
        "kv_get() got an unexpected keyword argument `colour`; it accepts: key, default"
    );
}

#[test]
fn a_missing_required_field_is_named() {
    assert_eq!(
        message("default = 'x'"),
        "kv_get() is missing the required argument `key` (str): call kv_get(key=...)"
    );
    assert!(message("").contains("missing the required argument `key`"));
}

#[test]
fn a_wrong_type_names_the_field_the_expected_and_the_received_type() {
    assert_eq!(
        message("key = 1"),
        "kv_get(): argument `key` must be str, got int"
    );
    assert_eq!(
        message("key = ['a']"),
        "kv_get(): argument `key` must be str, got list"
    );
    assert_eq!(
        message("key = 'a', default = 2.5"),
        "kv_get(): argument `default` must be str | None, got float"
    );
    assert_eq!(
        message("key = None"),
        "kv_get(): argument `key` is required and cannot be None; pass a str"
    );
}

#[test]
fn scalars_are_checked_strictly_except_exact_int_to_float() {
    let shape = InputShape::new(vec![
        FieldShape::new("n", "int", true),
        FieldShape::new("x", "float", true),
        FieldShape::new("b", "bool", true),
    ])
    .unwrap();
    let mut args = Map::new();
    args.insert("n".into(), Value::Int(3));
    args.insert("x".into(), Value::Int(2));
    args.insert("b".into(), Value::Bool(true));
    let bound = shape.bind_map("t", &args).unwrap();
    assert_eq!(bound.get("x"), Some(&Value::float(2.0).unwrap()));

    let mut bad = args.clone();
    bad.insert("n".into(), Value::Bool(true));
    assert_eq!(
        shape.bind_map("t", &bad).unwrap_err().to_string(),
        "t(): argument `n` must be int, got bool"
    );
    let mut bad = args.clone();
    bad.insert("b".into(), Value::Int(1));
    assert!(shape.bind_map("t", &bad).is_err());
    let mut bad = args.clone();
    bad.insert("x".into(), Value::Int(i64::MAX));
    assert!(
        shape
            .bind_map("t", &bad)
            .unwrap_err()
            .to_string()
            .contains("too large to be an exact float")
    );
    let mut bad = args;
    bad.insert("n".into(), Value::float(1.0).unwrap());
    assert!(shape.bind_map("t", &bad).is_err());
}

#[test]
fn starlark_bools_are_not_ints() {
    let shape = vec![FieldShape::new("n", "int", true)];
    Heap::temp(|_| {
        let named = [("n", starlark::values::Value::new_bool(true))];
        let err = bind_shape("t", &shape, &[], &named).unwrap_err();
        assert_eq!(err.to_string(), "t(): argument `n` must be int, got bool");
    });
}

#[test]
fn an_empty_shape_takes_no_arguments() {
    let shape = InputShape::new(vec![]).unwrap();
    let mut args = Map::new();
    args.insert("x".into(), Value::Int(1));
    assert_eq!(
        shape.bind_map("clock_now", &args).unwrap_err().to_string(),
        "clock_now() got an unexpected keyword argument `x`; clock_now() takes no arguments"
    );
    assert_eq!(shape.signature("clock_now", "dict"), "clock_now() -> dict");
}

#[test]
fn the_json_schema_is_generated_from_the_shape() {
    let shape = InputShape::new(kv_get_shape()).unwrap();
    insta::assert_json_snapshot!("kv_get_input_schema", shape.json_schema());
    assert_eq!(
        shape.signature("kv_get", "dict"),
        "kv_get(*, key: str, default: str | None = None) -> dict"
    );
}
