//! Plans compiled from Rust types: what is admitted, what is refused, shapes, signatures,
//! binding and output conversion.

use std::collections::BTreeMap;

use larkgate_binding::{Error, ErrorKind, LimitExceeded, Limits, Map, Plan, Value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::support::limits;

#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct SearchInput {
    query: String,
    limit: Option<i64>,
    #[serde(rename = "min_score")]
    threshold: Option<f64>,
    exact: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Hit {
    id: String,
    score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SearchOutput {
    hits: Vec<Hit>,
    counts: BTreeMap<String, i64>,
    best: Option<Hit>,
    pages: Vec<Vec<u32>>,
    raw: Value,
}

type SearchPlan = Plan<SearchInput, SearchOutput>;

fn plan() -> SearchPlan {
    SearchPlan::compile().expect("plan compiles")
}

#[test]
fn shapes_and_signature_are_stable() {
    let plan = plan();
    insta::assert_json_snapshot!("search_input_shape", plan.input_shape());
    insta::assert_json_snapshot!("search_output_shape", plan.output_shape());
    insta::assert_snapshot!("search_signature", plan.signature("search"));
    insta::assert_json_snapshot!("search_output_schema", plan.output_schema());
}

#[test]
fn bind_value_returns_the_typed_input_and_a_canonical_map_without_nones() {
    let mut args = Map::new();
    args.insert("query".into(), Value::from("rust"));
    args.insert("limit".into(), Value::Null);
    args.insert("min_score".into(), Value::Int(1));
    args.insert("exact".into(), Value::Bool(false));
    let (input, canonical) = plan().bind_value("search", &args).unwrap();
    assert_eq!(
        input,
        SearchInput {
            query: "rust".into(),
            limit: None,
            threshold: Some(1.0),
            exact: false
        }
    );
    assert!(!canonical.contains_key("limit"));
    assert_eq!(
        canonical.get("min_score"),
        Some(&Value::float(1.0).unwrap())
    );
    // The serde name, not the Rust name, is the field's name.
    let mut wrong = args.clone();
    wrong.remove("min_score");
    wrong.insert("threshold".into(), Value::float(0.5).unwrap());
    let err = plan().bind_value("search", &wrong).unwrap_err();
    assert!(
        err.to_string()
            .contains("unexpected keyword argument `threshold`"),
        "{err}"
    );
}

fn output(hits: usize) -> SearchOutput {
    SearchOutput {
        hits: (0..hits)
            .map(|i| Hit {
                id: format!("h{i}"),
                score: 0.5,
                note: None,
            })
            .collect(),
        counts: BTreeMap::from([("a".to_owned(), 1)]),
        best: Some(Hit {
            id: "b".into(),
            score: 1.0,
            note: Some("n".into()),
        }),
        pages: vec![vec![1, 2]],
        raw: Value::Null,
    }
}

#[test]
fn convert_output_produces_the_canonical_map() {
    let map = plan()
        .convert_output(&output(1), Limits::default())
        .unwrap();
    insta::assert_json_snapshot!("search_output_value", Value::Map(map));
}

#[test]
fn output_depth_counts_the_root_struct_as_one_and_options_as_nothing() {
    // root(1) > hits(2) > Hit(3); root > pages(2) > inner list(3);
    // root > best: Option<Hit> is 2: the option adds nothing.
    let plan = plan();
    assert!(
        plan.convert_output(&output(1), limits(3, 1_000, 1_000))
            .is_ok()
    );
    let err = plan
        .convert_output(&output(1), limits(2, 1_000, 1_000))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "value limit exceeded at $.hits[0]: containers are nested deeper than max_depth = 2"
    );
}

#[test]
fn output_nodes_are_exact_at_the_limit() {
    let plan = plan();
    // Count the nodes of the converted value, then set the limit to exactly that.
    let map = plan.convert_output(&output(3), Limits::default()).unwrap();
    let nodes = count_nodes(&Value::Map(map));
    assert!(
        plan.convert_output(&output(3), limits(8, nodes, 1_000))
            .is_ok()
    );
    let err = plan
        .convert_output(&output(3), limits(8, nodes - 1, 1_000))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueLimit {
                limit: LimitExceeded::Nodes { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn output_bytes_count_strings_and_field_names_exactly() {
    #[derive(Serialize, JsonSchema)]
    struct Out {
        name: String,
    }
    let plan = Plan::<Empty, Out>::compile().unwrap();
    // "name" (4) + "héllo" (6) = 10 bytes
    let out = Out {
        name: "héllo".into(),
    };
    assert!(plan.convert_output(&out, limits(1, 2, 10)).is_ok());
    let err = plan.convert_output(&out, limits(1, 2, 9)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueLimit {
                limit: LimitExceeded::Bytes { max: 9 },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("$.name"), "{err}");
}

fn count_nodes(value: &Value) -> usize {
    1 + match value {
        Value::List(items) => items.iter().map(count_nodes).sum(),
        Value::Map(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

#[test]
fn outputs_outside_the_matrix_are_refused_at_conversion() {
    #[derive(Serialize, JsonSchema)]
    struct Out {
        big: u64,
        ratio: f64,
    }
    let plan = Plan::<crate::plan::Empty, Out>::compile().unwrap();
    let err = plan
        .convert_output(
            &Out {
                big: u64::MAX,
                ratio: 1.0,
            },
            Limits::default(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsupportedValue);
    assert!(err.to_string().contains("$.big"), "{err}");
    let err = plan
        .convert_output(
            &Out {
                big: 1,
                ratio: f64::NAN,
            },
            Limits::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("$.ratio"), "{err}");
}

#[test]
fn serde_json_values_in_outputs_keep_their_numbers_exact() {
    #[derive(Serialize, JsonSchema)]
    struct Out {
        doc: serde_json::Value,
    }
    let plan = Plan::<Empty, Out>::compile().unwrap();
    let doc = serde_json::json!({"i": 12345678901234_i64, "f": 1.5, "s": [1e2]});
    let map = plan
        .convert_output(&Out { doc }, Limits::default())
        .unwrap();
    let doc = map.get("doc").and_then(Value::as_map).unwrap();
    assert_eq!(doc.get("i"), Some(&Value::Int(12345678901234)));
    assert_eq!(doc.get("f"), Some(&Value::float(1.5).unwrap()));
    assert_eq!(
        doc.get("s"),
        Some(&Value::List(vec![Value::float(100.0).unwrap()]))
    );
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub(crate) struct Empty {}

#[derive(Debug, Serialize, JsonSchema)]
struct Out {
    ok: bool,
}

fn refused_input<I: serde::de::DeserializeOwned + JsonSchema>() -> String {
    let err = Plan::<I, Out>::compile().expect_err("the input type must be refused");
    assert_eq!(err.kind(), ErrorKind::InvalidPlan);
    err.to_string()
}

fn refused_output<O: Serialize + JsonSchema>() -> String {
    let err = Plan::<Empty, O>::compile().expect_err("the output type must be refused");
    assert_eq!(err.kind(), ErrorKind::InvalidPlan);
    err.to_string()
}

#[test]
fn input_types_other_than_flat_scalars_are_refused_naming_the_field() {
    #[derive(Deserialize, JsonSchema)]
    struct Nested {
        #[allow(dead_code)]
        inner: Empty,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Listy {
        #[allow(dead_code)]
        tags: Vec<String>,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Narrow {
        #[allow(dead_code)]
        count: u32,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Single {
        #[allow(dead_code)]
        ratio: f32,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Defaulted {
        #[serde(default)]
        #[allow(dead_code)]
        name: String,
    }
    #[derive(Deserialize, JsonSchema)]
    struct BadName {
        #[serde(rename = "my-key")]
        #[allow(dead_code)]
        key: String,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Keyword {
        #[serde(rename = "def")]
        #[allow(dead_code)]
        key: String,
    }
    #[derive(Deserialize, JsonSchema)]
    enum Choice {
        A,
        B,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Enumerated {
        #[allow(dead_code)]
        choice: Choice,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Tupled {
        #[allow(dead_code)]
        pair: (i64, i64),
    }
    #[derive(Deserialize, JsonSchema)]
    struct Tuple(#[allow(dead_code)] i64, #[allow(dead_code)] i64);

    let table = [
        (refused_input::<Nested>(), "Nested.inner"),
        (refused_input::<Listy>(), "Listy.tags"),
        (refused_input::<Narrow>(), "Narrow.count"),
        (refused_input::<Single>(), "Single.ratio"),
        (
            refused_input::<Defaulted>(),
            "Defaulted.name has a default but is not an Option",
        ),
        (
            refused_input::<BadName>(),
            "\"my-key\" is not a Starlark identifier",
        ),
        (
            refused_input::<Keyword>(),
            "\"def\" is not a Starlark identifier",
        ),
        (refused_input::<Enumerated>(), "Enumerated.choice"),
        (refused_input::<Tupled>(), "Tupled.pair"),
        (refused_input::<Tuple>(), "Tuple"),
        (refused_input::<String>(), "must be a struct"),
    ];
    for (message, expected) in table {
        assert!(
            message.contains(expected),
            "{message:?} should mention {expected:?}"
        );
    }
    let _ = (Choice::A, Choice::B);
}

#[test]
fn output_types_outside_the_rules_are_refused() {
    #[derive(Serialize, JsonSchema)]
    struct Recursive {
        children: Vec<Recursive>,
    }
    #[derive(Serialize, JsonSchema)]
    struct Node {
        next: Option<Box<Node>>,
    }
    #[derive(Serialize, JsonSchema)]
    struct Holder {
        node: Node,
    }
    #[derive(Serialize, JsonSchema)]
    #[allow(dead_code)] // only its schema matters
    enum Data {
        A(i64),
        B { x: i64 },
    }
    #[derive(Serialize, JsonSchema)]
    struct WithEnum {
        data: Data,
    }
    #[derive(Serialize, JsonSchema)]
    struct WithTuple {
        pair: (String, i64),
    }
    #[derive(Serialize, JsonSchema)]
    struct WithIntKeys {
        by_id: BTreeMap<i64, String>,
    }
    let table = [
        (refused_output::<Recursive>(), "recursive type"),
        (refused_output::<Holder>(), "recursive type"),
        (refused_output::<WithEnum>(), "WithEnum.data"),
        (refused_output::<WithTuple>(), "WithTuple.pair"),
        (refused_output::<Vec<i64>>(), "must be a struct"),
        (refused_output::<WithIntKeys>(), "WithIntKeys.by_id"),
    ];
    for (message, expected) in table {
        assert!(
            message.contains(expected),
            "{message:?} should mention {expected:?}"
        );
    }
}

#[test]
fn unit_enums_and_narrow_integers_are_fine_in_outputs() {
    #[derive(Serialize, JsonSchema)]
    enum State {
        Open,
        Closed,
    }
    #[derive(Serialize, JsonSchema)]
    struct Out {
        state: State,
        small: u8,
        count: usize,
    }
    let plan = Plan::<Empty, Out>::compile().unwrap();
    let map = plan
        .convert_output(
            &Out {
                state: State::Closed,
                small: 7,
                count: 3,
            },
            Limits::default(),
        )
        .unwrap();
    assert_eq!(map.get("state"), Some(&Value::from("Closed")));
    assert_eq!(map.get("count"), Some(&Value::Int(3)));
    let _ = State::Open;
}
