//! The built-in capabilities' declarations are final: names, signatures, shapes, schemas and
//! annotations are snapshot-tested, and each plan binds and converts what it promises.

use larkgate_binding::{Limits, Map, Value};
use larkgate_platform::capabilities::{
    self, ClockNowOutput, KvEntry, KvGetInput, KvListInput, KvListOutput,
};

#[test]
fn the_listing_is_stable() {
    let listings = capabilities::listings().unwrap();
    insta::assert_json_snapshot!("builtin_capabilities", listings);
}

#[test]
fn signatures_are_the_documented_ones() {
    let signatures: Vec<String> = capabilities::listings()
        .unwrap()
        .into_iter()
        .map(|l| l.signature)
        .collect();
    assert_eq!(
        signatures,
        [
            "kv_get(*, key: str, default: str | None = None) -> dict",
            "kv_list(*, prefix: str | None = None, after: str | None = None, limit: int | None = None) -> dict",
            "clock_now() -> dict",
            "kv_set(*, key: str, value: str) -> dict",
            "kv_delete(*, key: str) -> dict",
        ]
    );
}

#[test]
fn reads_are_read_only_and_writes_are_not() {
    let listings = capabilities::listings().unwrap();
    let read_only: Vec<(&str, bool)> = listings
        .iter()
        .map(|l| (l.name.as_str(), l.annotations.read_only))
        .collect();
    assert_eq!(
        read_only,
        [
            ("kv_get", true),
            ("kv_list", true),
            ("clock_now", true),
            ("kv_set", false),
            ("kv_delete", false),
        ]
    );
}

#[test]
fn kv_get_binds_its_arguments() {
    let declared = capabilities::kv_get().unwrap();
    let mut args = Map::new();
    args.insert("key".into(), Value::from("greeting"));
    args.insert("default".into(), Value::Null);
    let (input, canonical) = declared.plan.bind_value("kv_get", &args).unwrap();
    assert_eq!(
        input,
        KvGetInput {
            key: "greeting".into(),
            default: None
        }
    );
    assert_eq!(canonical.len(), 1);
}

#[test]
fn kv_list_input_and_output_convert() {
    let declared = capabilities::kv_list().unwrap();
    let (input, _) = declared.plan.bind_value("kv_list", &Map::new()).unwrap();
    assert_eq!(
        input,
        KvListInput {
            prefix: None,
            after: None,
            limit: None
        }
    );
    let output = KvListOutput {
        entries: vec![KvEntry {
            key: "a".into(),
            value: "1".into(),
        }],
        next_after: None,
    };
    let map = declared
        .plan
        .convert_output(&output, Limits::default())
        .unwrap();
    assert_eq!(
        Value::Map(map).to_string(),
        r#"{"entries":[{"key":"a","value":"1"}],"next_after":null}"#
    );
}

#[test]
fn clock_now_takes_nothing() {
    let declared = capabilities::clock_now().unwrap();
    let mut args = Map::new();
    args.insert("tz".into(), Value::from("UTC"));
    let err = declared.plan.bind_value("clock_now", &args).unwrap_err();
    assert_eq!(
        err.to_string(),
        "clock_now() got an unexpected keyword argument `tz`; clock_now() takes no arguments"
    );
    let out = ClockNowOutput {
        unix_ms: 0,
        rfc3339: "1970-01-01T00:00:00Z".into(),
    };
    assert!(
        declared
            .plan
            .convert_output(&out, Limits::default())
            .is_ok()
    );
}

#[test]
fn stored_times_read_as_rfc3339_within_its_four_digit_years() {
    use larkgate_platform::capabilities::rfc3339_from_ms;
    assert_eq!(
        rfc3339_from_ms(1_700_000_000_123),
        "2023-11-14T22:13:20.123Z"
    );
    assert_eq!(rfc3339_from_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_from_ms(-5), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_from_ms(i64::MIN), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_from_ms(i64::MAX), "9999-12-31T23:59:59.999Z");
    assert_eq!(
        rfc3339_from_ms(253_402_300_800_000),
        "9999-12-31T23:59:59.999Z"
    );
}
