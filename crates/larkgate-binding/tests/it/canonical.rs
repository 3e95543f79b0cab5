//! Canonical JSON against RFC 8785's own examples.

use larkgate_binding::{Limits, Value, canonical_json, from_json_slice};

fn canonical_of(text: &str) -> String {
    canonical_json(&from_json_slice(text.as_bytes(), Limits::default()).unwrap())
}

#[test]
fn numbers_print_as_ecmascript_prints_them() {
    // RFC 8785, appendix B, where the value is a finite double.
    let table = [
        ("0", "0"),
        ("-0.0", "0"),
        ("0.0", "0"),
        ("1.0", "1"),
        ("1E2", "100"),
        ("5e-324", "5e-324"),
        ("-5e-324", "-5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("-1.7976931348623157e308", "-1.7976931348623157e+308"),
        ("9007199254740992.0", "9007199254740992"),
        ("-9007199254740992.0", "-9007199254740992"),
        ("295147905179352830000.0", "295147905179352830000"),
        ("1e21", "1e+21"),
        ("1e-7", "1e-7"),
        ("0.000001", "0.000001"),
        ("333333333.3333333", "333333333.3333333"),
        ("9007199254740991", "9007199254740991"),
        ("-9007199254740991", "-9007199254740991"),
    ];
    for (input, expected) in table {
        assert_eq!(canonical_of(input), expected, "{input}");
    }
}

#[test]
fn integers_beyond_two_to_the_53_stay_exact_and_distinct() {
    assert_eq!(
        canonical_json(&Value::Int(9007199254740993)),
        "9007199254740993"
    );
    assert_ne!(
        canonical_json(&Value::Int(9007199254740992)),
        canonical_json(&Value::Int(9007199254740993))
    );
    assert_eq!(
        canonical_json(&Value::Int(i64::MIN)),
        "-9223372036854775808"
    );
}

#[test]
fn members_sort_by_utf16_code_units() {
    // RFC 8785, section 3.2.3.
    let input = r#"{"€":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","😀":"Emoji: Grinning Face","\u0080":"Control","ö":"Latin Small Letter O With Diaeresis"}"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(canonical_of(input), expected);
}

#[test]
fn strings_use_the_minimal_escapes() {
    let input = r#"{"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}"#;
    // RFC 8785, section 3.2.2.2.
    let expected =
        "{\"literals\":[null,true,false],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(canonical_of(input), expected);
    assert_eq!(canonical_of(r#""\u007f\u2028""#), "\"\u{7f}\u{2028}\"");
}

#[test]
fn the_same_arguments_in_any_encoding_give_the_same_text() {
    let a = canonical_of(r#"{"b": [1.0, 2], "a": {"y": null, "x": "\u0041"}}"#);
    let b = canonical_of(r#"{ "a" : { "x" : "A", "y" : null }, "b" : [ 1E0, 2 ] }"#);
    assert_eq!(a, b);
    assert_eq!(a, r#"{"a":{"x":"A","y":null},"b":[1,2]}"#);
}

/// What is passed on to another server is the canonical form an approver is shown: the same
/// value, written with the same numbers, whatever encoding the caller used.
#[test]
fn arguments_passed_on_are_the_canonical_form() {
    let table = [
        r#"{"n": 1.0}"#,
        r#"{"n": 1E2, "m": -0.0}"#,
        r#"{"n": 1e21, "m": 0.1, "k": 5e-324}"#,
        r#"{"n": [1.0, 2.50, {"x": 3.0}], "s": "a\u00e9", "b": true, "z": null}"#,
        r#"{"big": 9007199254740993, "neg": -9223372036854775808}"#,
    ];
    for text in table {
        let value = from_json_slice(text.as_bytes(), Limits::default()).unwrap();
        let Value::Map(map) = &value else {
            panic!("{text} is an object")
        };
        let passed = serde_json::Value::Object(larkgate_binding::canonical_map_to_json(map));
        // Written out (keys aside, which canonical JSON sorts), it is the canonical text.
        let reread = from_json_slice(passed.to_string().as_bytes(), Limits::default()).unwrap();
        assert_eq!(canonical_json(&reread), canonical_json(&value), "{text}");
        assert_eq!(
            serde_json::to_string(&passed).unwrap(),
            canonical_json(&value),
            "{text}: the very bytes, where the keys are already in order"
        );
    }
    let one = from_json_slice(br#"{"n": 1.0}"#, Limits::default()).unwrap();
    let Value::Map(one) = &one else {
        unreachable!()
    };
    assert_eq!(
        larkgate_binding::canonical_map_to_json(one)["n"].as_i64(),
        Some(1),
        "1.0 is passed on as the integer 1"
    );
}
