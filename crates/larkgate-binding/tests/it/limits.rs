//! `validate` and the limit definitions, at the exact boundaries.

use larkgate_binding::{Error, LimitExceeded, Limits, Value, validate};

use crate::support::{flat_list, limits, map1, nested_list};

fn limit_of(result: Result<(), Error>) -> Option<LimitExceeded> {
    match result {
        Err(Error::ValueLimit { limit, .. }) => Some(limit),
        _ => None,
    }
}

#[test]
fn a_bare_scalar_has_depth_zero_and_is_one_node() {
    let l = limits(1, 1, 1);
    assert!(validate(&Value::Int(1), l).is_ok());
    assert!(validate(&Value::Null, l).is_ok());
    assert!(validate(&Value::from("x"), l).is_ok());
    assert_eq!(
        limit_of(validate(&Value::from("xy"), l)),
        Some(LimitExceeded::Bytes { max: 1 })
    );
}

#[test]
fn depth_counts_containers_from_one_at_the_root() {
    for depth in 1..=70 {
        let value = nested_list(depth);
        assert!(
            validate(&value, limits(depth, 1_000, 10)).is_ok(),
            "{depth}"
        );
        assert_eq!(
            limit_of(validate(
                &value,
                limits(depth - 1 + usize::from(depth == 1), 1_000, 10)
            )),
            (depth > 1).then_some(LimitExceeded::Depth { max: depth - 1 }),
            "{depth}"
        );
    }
    assert_eq!(
        limit_of(validate(&nested_list(65), Limits::default())),
        Some(LimitExceeded::Depth { max: 64 })
    );
    assert!(validate(&nested_list(64), Limits::default()).is_ok());
}

#[test]
fn nodes_count_every_value_but_not_keys() {
    let list = flat_list(99_999); // 100,000 nodes
    assert!(validate(&list, Limits::default()).is_ok());
    assert_eq!(
        limit_of(validate(&flat_list(100_000), Limits::default())),
        Some(LimitExceeded::Nodes { max: 100_000 })
    );
    let map = map1("a", map1("b", Value::Int(1))); // 3 nodes
    assert!(validate(&map, limits(2, 3, 2)).is_ok());
    assert_eq!(
        limit_of(validate(&map, limits(2, 2, 2))),
        Some(LimitExceeded::Nodes { max: 2 })
    );
}

#[test]
fn bytes_count_utf8_of_strings_and_keys() {
    // key "ü" (2 bytes) + value "€" (3 bytes) = 5 bytes
    let value = map1("ü", Value::from("€"));
    assert!(validate(&value, limits(1, 2, 5)).is_ok());
    assert_eq!(
        limit_of(validate(&value, limits(1, 2, 4))),
        Some(LimitExceeded::Bytes { max: 4 })
    );
    let eight_mib = Value::from("x".repeat(Limits::DEFAULT_MAX_BYTES));
    assert!(validate(&eight_mib, Limits::default()).is_ok());
    let past = Value::from("x".repeat(Limits::DEFAULT_MAX_BYTES + 1));
    assert!(validate(&past, Limits::default()).is_err());
}

#[test]
fn defaults_are_the_documented_ones() {
    let d = Limits::default();
    assert_eq!(
        (d.max_depth(), d.max_nodes(), d.max_bytes()),
        (64, 100_000, 8 * 1024 * 1024)
    );
}
