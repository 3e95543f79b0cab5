//! Helpers shared by the test modules.

use larkgate_binding::{Limits, Map, Value};
use starlark::environment::{Globals, LibraryExtension, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

/// Limits with the given maxima.
pub(crate) fn limits(depth: usize, nodes: usize, bytes: usize) -> Limits {
    Limits::new(depth, nodes, bytes).expect("positive limits")
}

/// A list nested `depth` containers deep around a single `0`: depth `depth`, `depth + 1` nodes.
pub(crate) fn nested_list(depth: usize) -> Value {
    let mut value = Value::Int(0);
    for _ in 0..depth {
        value = Value::List(vec![value]);
    }
    value
}

/// A flat list of `len` zeros: depth 1, `len + 1` nodes.
pub(crate) fn flat_list(len: usize) -> Value {
    Value::List(vec![Value::Int(0); len])
}

/// A one-entry map.
pub(crate) fn map1(key: &str, value: Value) -> Value {
    let mut map = Map::new();
    map.insert(key.to_owned(), value);
    Value::Map(map)
}

/// Evaluates a Starlark program and hands its last expression's value to `f`.
pub(crate) fn with_starlark<R>(
    program: &str,
    f: impl for<'v> FnOnce(starlark::values::Value<'v>) -> R,
) -> R {
    let ast = AstModule::parse("test.star", program.to_owned(), &Dialect::Extended)
        .expect("test program parses");
    let globals = Globals::extended_by(&[LibraryExtension::StructType]);
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        let value = eval.eval_module(ast, &globals).expect("test program runs");
        f(value)
    })
}
