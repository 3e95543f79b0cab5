//! Starlark conversion: the admitted kinds, refusals, cycles and shared substructure.

use larkgate_binding::{
    Error, ErrorKind, LimitExceeded, Limits, Map, Value, from_starlark, map_to_starlark,
    to_starlark,
};
use starlark::values::Heap;

use crate::support::{limits, map1, with_starlark};

fn convert(program: &str, limits: Limits) -> Result<Value, Error> {
    with_starlark(program, |v| from_starlark(v, limits))
}

fn refused(program: &str) -> Error {
    convert(program, Limits::default()).expect_err(program)
}

#[test]
fn admitted_kinds_convert() {
    let value = convert(
        r#"{"none": None, "t": True, "i": -7, "big": 9223372036854775807, "f": 2.5,
            "s": "héllo", "l": [1, [2]], "tu": (1, "a"), "st": struct(b = 1, a = "x"),
            "d": {"z": 1}}"#,
        Limits::default(),
    )
    .unwrap();
    let expected = serde_json::json!({
        "none": null, "t": true, "i": -7, "big": i64::MAX, "f": 2.5, "s": "héllo",
        "l": [1, [2]], "tu": [1, "a"], "st": {"a": "x", "b": 1}, "d": {"z": 1}
    });
    assert_eq!(
        value,
        larkgate_binding::from_json(&expected, Limits::default()).unwrap()
    );
}

#[test]
fn bools_are_not_ints_and_ints_are_not_floats() {
    assert_eq!(convert("True", Limits::default()), Ok(Value::Bool(true)));
    assert_eq!(convert("1", Limits::default()), Ok(Value::Int(1)));
    assert_eq!(
        convert("1.0", Limits::default()),
        Ok(Value::float(1.0).unwrap())
    );
    assert_eq!(
        convert("-9223372036854775808", Limits::default()),
        Ok(Value::Int(i64::MIN))
    );
}

#[test]
fn every_refused_kind_says_what_and_where() {
    let table = [
        ("[1, 9223372036854775808]", "$[1]", "signed 64-bit range"),
        ("{'a': -9223372036854775809}", "$.a", "signed 64-bit range"),
        ("[float('nan')]", "$[0]", "only finite floats"),
        ("{'x': [float('inf')]}", "$.x[0]", "only finite floats"),
        ("[len]", "$[0]", "type `function`"),
        ("def f():\n    pass\n[f]", "$[0]", "type `function`"),
        ("range(3)", "$", "type `range`"),
        ("{1: 'a'}", "$", "dict keys must be strings"),
        ("{'k': {(1, 2): 'a'}}", "$.k", "dict keys must be strings"),
        ("[b'bytes']", "$[0]", "type `bytes`"),
    ];
    for (program, path, reason) in table {
        let err = refused(program);
        assert_eq!(err.kind(), ErrorKind::UnsupportedValue, "{program}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("at {path}:")),
            "{program}: {message}"
        );
        assert!(message.contains(reason), "{program}: {message}");
    }
}

#[test]
fn a_big_integer_is_refused_without_printing_its_digits() {
    let err = refused("x = 7\nfor _ in range(12):\n    x = x * x\nx");
    let message = err.to_string();
    assert!(message.contains("signed 64-bit range"), "{message}");
    assert!(
        message.len() < 400,
        "the message grew with the number: {message}"
    );
}

#[test]
fn active_cycles_are_refused() {
    for program in [
        "a = []\na.append(a)\na",
        "d = {}\nd['self'] = d\nd",
        "a = []\nb = [a]\na.append(b)\n{'root': a}",
    ] {
        let err = refused(program);
        assert_eq!(err.kind(), ErrorKind::UnsupportedValue, "{program}");
        assert!(err.to_string().contains("active cycle"), "{program}: {err}");
    }
}

#[test]
fn shared_substructure_is_allowed_and_counted_at_each_occurrence() {
    // b is shared: [b, b] is 1 + 2 + 2 * 2 = 7 nodes.
    let program = "b = [1, 2]\n[b, b]";
    assert!(convert(program, limits(4, 7, 100)).is_ok());
    let err = convert(program, limits(4, 6, 100)).unwrap_err();
    assert!(matches!(
        err,
        Error::ValueLimit {
            limit: LimitExceeded::Nodes { max: 6 },
            ..
        }
    ));
}

#[test]
fn exponential_sharing_fails_on_the_node_budget_not_after_2_to_the_60_steps() {
    // 60 levels of `a = [a, a]` is about 2^61 nodes unfolded, at depth 61: within the default
    // depth of 64, so only the node budget can stop it, and it must do so quickly.
    let program = "a = [0]\nfor _ in range(60):\n    a = [a, a]\na";
    let err = convert(program, Limits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueLimit {
                limit: LimitExceeded::Nodes { max: 100_000 },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn depth_nodes_and_bytes_are_exact_at_the_limit_from_starlark() {
    // depth 3, 4 nodes, 3 bytes
    let program = "[[['abc']]]";
    assert!(convert(program, limits(3, 4, 3)).is_ok());
    assert!(matches!(
        convert(program, limits(2, 4, 3)),
        Err(Error::ValueLimit {
            limit: LimitExceeded::Depth { max: 2 },
            ..
        })
    ));
    assert!(matches!(
        convert(program, limits(3, 3, 3)),
        Err(Error::ValueLimit {
            limit: LimitExceeded::Nodes { max: 3 },
            ..
        })
    ));
    assert!(matches!(
        convert(program, limits(3, 4, 2)),
        Err(Error::ValueLimit {
            limit: LimitExceeded::Bytes { max: 2 },
            ..
        })
    ));
    // Dict keys count as bytes, not nodes: {"ab": 1} is 2 nodes and 2 bytes.
    assert!(convert("{'ab': 1}", limits(1, 2, 2)).is_ok());
    assert!(convert("{'ab': 1}", limits(1, 2, 1)).is_err());
    assert!(convert("{'ab': 1}", limits(1, 1, 2)).is_err());
}

#[test]
fn depth_nodes_and_bytes_are_exact_at_the_limit_to_starlark() {
    let value = Value::List(vec![Value::List(vec![Value::from("abc")])]);
    Heap::temp(|heap| {
        assert!(to_starlark(&value, heap, limits(2, 3, 3)).is_ok());
        assert!(matches!(
            to_starlark(&value, heap, limits(1, 3, 3)),
            Err(Error::ValueLimit {
                limit: LimitExceeded::Depth { max: 1 },
                ..
            })
        ));
        assert!(matches!(
            to_starlark(&value, heap, limits(2, 2, 3)),
            Err(Error::ValueLimit {
                limit: LimitExceeded::Nodes { max: 2 },
                ..
            })
        ));
        assert!(matches!(
            to_starlark(&value, heap, limits(2, 3, 2)),
            Err(Error::ValueLimit {
                limit: LimitExceeded::Bytes { max: 2 },
                ..
            })
        ));
    });
}

#[test]
fn values_become_the_starlark_kinds_a_script_expects() {
    let value = map1(
        "items",
        Value::List(vec![
            Value::Int(1),
            Value::float(0.5).unwrap(),
            Value::Null,
            Value::from("s"),
        ]),
    );
    Heap::temp(|heap| {
        let v = to_starlark(&value, heap, Limits::default()).unwrap();
        assert_eq!(v.get_type(), "dict");
        assert_eq!(v.to_repr(), r#"{"items": [1, 0.5, None, "s"]}"#);
        let mut map = Map::new();
        map.insert("k".to_owned(), Value::Bool(false));
        let d = map_to_starlark(&map, heap, Limits::default()).unwrap();
        assert_eq!(d.to_repr(), r#"{"k": False}"#);
    });
}

#[test]
fn frozen_module_values_convert_like_live_ones() {
    use starlark::environment::{Globals, LibraryExtension, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    let program = "x = {'a': [1, (2, 'b')], 's': struct(k = None), 'd': {'n': 1.5}}";
    let ast = AstModule::parse("frozen.star", program.to_owned(), &Dialect::Extended).unwrap();
    let globals = Globals::extended_by(&[LibraryExtension::StructType]);
    let frozen = Module::with_temp_heap(|module| {
        Evaluator::new(&module).eval_module(ast, &globals).unwrap();
        module.freeze().unwrap()
    });
    let x = frozen.get("x").unwrap();
    let value = from_starlark(x.value(), Limits::default()).unwrap();
    assert_eq!(
        value.to_string(),
        r#"{"a":[1,[2,"b"]],"d":{"n":1.5},"s":{"k":null}}"#
    );
}
