//! Property tests, generated from `Value` itself (not from JSON text: with
//! `arbitrary_precision` on, `1E2` and `100.0` differ as text but are the same value).

use larkgate_binding::{
    Limits, Map, Value, from_json, from_json_slice, from_starlark, to_json, to_starlark,
};
use proptest::prelude::*;
use starlark::values::Heap;

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![
            any::<f64>(),
            Just(0.0),
            Just(-0.0),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            Just(1e-320), // subnormal
            Just(100.0),
        ]
        .prop_filter_map("finite", Value::float),
        any::<String>().prop_map(Value::Str),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::List),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|m: Map| Value::Map(m)),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn value_to_json_value_and_back_is_identity(v in value()) {
        let json = to_json(&v);
        prop_assert_eq!(from_json(&json, Limits::default()).unwrap(), v);
    }

    #[test]
    fn value_to_json_text_and_back_is_identity(v in value()) {
        let text = serde_json::to_vec(&v).unwrap();
        prop_assert_eq!(from_json_slice(&text, Limits::default()).unwrap(), v.clone());
        // and serde_json's own parse of our text reads the same value
        let parsed: serde_json::Value = serde_json::from_slice(&text).unwrap();
        prop_assert_eq!(from_json(&parsed, Limits::default()).unwrap(), v);
    }

    #[test]
    fn value_to_starlark_and_back_is_identity(v in value()) {
        let back = Heap::temp(|heap| {
            let s = to_starlark(&v, heap, Limits::default()).unwrap();
            from_starlark(s, Limits::default())
        });
        prop_assert_eq!(back.unwrap(), v);
    }

    #[test]
    fn floats_keep_their_bits_through_every_world(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let v = Value::float(f).unwrap();
        let json = from_json_slice(serde_json::to_string(&v).unwrap().as_bytes(), Limits::default()).unwrap();
        let star = Heap::temp(|heap| from_starlark(to_starlark(&v, heap, Limits::default()).unwrap(), Limits::default())).unwrap();
        for back in [json, star] {
            match back {
                Value::Float(g) => prop_assert_eq!(g.get().to_bits(), f.to_bits()),
                other => prop_assert!(false, "{:?} came back as {:?}", f, other),
            }
        }
    }
}
