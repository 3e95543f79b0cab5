//! JSON conversion: the number matrix, refusals with paths, and exact limit boundaries.

use larkgate_binding::{
    Error, ErrorKind, LimitExceeded, Limits, Value, from_json, from_json_object, from_json_slice,
    to_json,
};
use serde_json::json;

use crate::support::{flat_list, limits, nested_list};

/// Parses text with serde_json first (as an MCP SDK would), then converts.
fn via_value(text: &str, limits: Limits) -> Result<Value, Error> {
    let parsed: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
    from_json(&parsed, limits)
}

/// Both ways in must agree, on success and on failure.
fn both(text: &str, limits: Limits) -> Result<Value, Error> {
    let a = via_value(text, limits);
    let b = from_json_slice(text.as_bytes(), limits);
    assert_eq!(a, b, "from_json and from_json_slice disagree on {text}");
    a
}

#[test]
fn number_literals_are_classified_not_rounded() {
    let d = Limits::default();
    assert_eq!(both("100", d), Ok(Value::Int(100)));
    assert_eq!(both("-0", d), Ok(Value::Int(0)));
    assert_eq!(both("1E2", d), Ok(Value::float(100.0).unwrap()));
    assert_eq!(both("100.0", d), Ok(Value::float(100.0).unwrap()));
    assert_eq!(both("-1.5e-3", d), Ok(Value::float(-0.0015).unwrap()));
    assert_eq!(both("9223372036854775807", d), Ok(Value::Int(i64::MAX)));
    assert_eq!(both("-9223372036854775808", d), Ok(Value::Int(i64::MIN)));
}

#[test]
fn integers_outside_i64_are_refused_naming_the_path() {
    let d = Limits::default();
    for literal in [
        "9223372036854775808",
        "18446744073709551615",
        "-9223372036854775809",
        "100000000000000000000000000000",
    ] {
        let text = format!(r#"{{"items": [1, 2, 3, {{"price": {literal}}}]}}"#);
        let err = both(&text, d).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsupportedValue, "{literal}");
        let message = err.to_string();
        assert!(message.contains("$.items[3].price"), "{message}");
        assert!(message.contains(literal), "{message}");
        assert!(message.contains("signed 64-bit range"), "{message}");
    }
}

#[test]
fn floats_outside_f64_are_refused() {
    for literal in ["1e400", "-1e400", "1.7976931348623159e308"] {
        let err = both(&format!("[{literal}]"), Limits::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsupportedValue, "{literal}");
        assert!(err.to_string().contains("$[0]"), "{err}");
        assert!(err.to_string().contains("64-bit float"), "{err}");
    }
}

#[test]
fn keys_that_are_not_identifiers_are_quoted_in_paths() {
    let err = both(r#"{"a b": {"x": 1e999}}"#, Limits::default()).unwrap_err();
    assert!(err.to_string().contains(r#"$["a b"].x"#), "{err}");
}

#[test]
fn malformed_text_is_an_argument_error_with_its_position() {
    for text in [
        "",
        "{",
        "[1,]",
        "nul",
        "{\"a\" 1}",
        "[1] [2]",
        "\"\\ud800\"",
    ] {
        let err = from_json_slice(text.as_bytes(), Limits::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{text:?}");
        assert!(err.to_string().starts_with("malformed JSON"), "{err}");
    }
}

#[test]
fn depth_is_exact_at_the_limit_for_every_way_in() {
    for depth in [1, 2, 5, 64] {
        let at = to_json(&nested_list(depth)).to_string();
        let past = to_json(&nested_list(depth + 1)).to_string();
        let l = limits(depth, 1_000, 1_000);
        assert_eq!(both(&at, l), Ok(nested_list(depth)), "depth {depth}");
        let err = both(&past, l).unwrap_err();
        assert!(
            matches!(err, Error::ValueLimit { limit: LimitExceeded::Depth { max }, .. } if max == depth),
            "{err}"
        );
    }
    // Maps count the same as lists.
    let map_depth_2 = r#"{"a": {"b": 1}}"#;
    assert!(both(map_depth_2, limits(2, 10, 100)).is_ok());
    assert!(both(map_depth_2, limits(1, 10, 100)).is_err());
    // A bare scalar has depth 0: any positive limit admits it.
    assert_eq!(both("7", limits(1, 1, 1)), Ok(Value::Int(7)));
}

#[test]
fn nodes_are_exact_at_the_limit_and_keys_do_not_count() {
    // [0, 0, 0] is four nodes: the list and three integers.
    let text = to_json(&flat_list(3)).to_string();
    assert!(both(&text, limits(4, 4, 10)).is_ok());
    let err = both(&text, limits(4, 3, 10)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueLimit {
                limit: LimitExceeded::Nodes { max: 3 },
                ..
            }
        ),
        "{err}"
    );
    // {"a": 1, "b": 2} is three nodes: keys are not nodes.
    assert!(both(r#"{"a": 1, "b": 2}"#, limits(4, 3, 10)).is_ok());
    assert!(both(r#"{"a": 1, "b": 2}"#, limits(4, 2, 10)).is_err());
}

#[test]
fn bytes_count_strings_and_keys_exactly() {
    // "héllo" is 6 bytes of UTF-8; the key "k" is 1.
    let text = r#"{"k": "héllo"}"#;
    assert!(both(text, limits(4, 10, 7)).is_ok());
    let err = both(text, limits(4, 10, 6)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueLimit {
                limit: LimitExceeded::Bytes { max: 6 },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("$.k"), "{err}");
}

#[test]
fn a_limit_error_names_the_container_where_the_budget_ran_out() {
    let text = r#"{"outer": {"list": [[1], [2], [[3]]]}}"#;
    let err = both(text, limits(4, 100, 100)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "value limit exceeded at $.outer.list[2][0]: containers are nested deeper than \
         max_depth = 4"
    );
}

#[test]
fn arguments_objects_are_the_root_container() {
    let object = json!({"key": "a", "n": [1, 2]});
    let map = from_json_object(object.as_object().unwrap(), limits(2, 5, 100)).unwrap();
    assert_eq!(map.len(), 2);
    // {key, n: [1, 2]}: 5 nodes, depth 2.
    assert!(from_json_object(object.as_object().unwrap(), limits(1, 5, 100)).is_err());
    assert!(from_json_object(object.as_object().unwrap(), limits(2, 4, 100)).is_err());
}

#[test]
fn output_is_canonical_json_with_sorted_keys_and_floats_kept_as_floats() {
    let value = both(
        r#"{"b": 1.0, "a": [true, null, "x"], "c": -0.0}"#,
        Limits::default(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        r#"{"a":[true,null,"x"],"b":1.0,"c":-0.0}"#
    );
    assert_eq!(
        value.to_string(),
        r#"{"a":[true,null,"x"],"b":1.0,"c":-0.0}"#
    );
    assert_eq!(
        to_json(&value).to_string(),
        r#"{"a":[true,null,"x"],"b":1.0,"c":-0.0}"#
    );
}

#[test]
fn the_arbitrary_precision_number_key_is_not_a_back_door() {
    // serde_json hands numbers to visitors under this key; a document that spells it out
    // must not smuggle a value past the matrix.
    let err = from_json_slice(
        br#"{"$serde_json::private::Number": "1e999"}"#,
        Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsupportedValue, "{err}");
}
