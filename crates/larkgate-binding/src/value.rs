//! The restricted value every larkgate conversion goes through.
//!
//! A [`Value`] is null, a bool, a UTF-8 string, a 64-bit signed integer, a *finite* 64-bit
//! float, a list, or a map with string keys — nothing else. Maps are [`BTreeMap`]s, so their key
//! order is sorted and deterministic: two equal values serialize to the same bytes, which is what
//! approval hashes and audit records rely on.
//!
//! Non-finite floats cannot be represented at all: [`Finite`] refuses them at construction.

use std::collections::BTreeMap;
use std::fmt;

use crate::budget::Budget;
use crate::{Limits, Result};

/// A canonical map: string keys in sorted order.
pub type Map = BTreeMap<String, Value>;

/// A restricted value. See the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// JSON `null`, Starlark `None`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A 64-bit signed integer.
    Int(i64),
    /// A finite 64-bit float.
    Float(Finite),
    /// A UTF-8 string.
    Str(String),
    /// A list.
    List(Vec<Value>),
    /// A map with string keys, in sorted order.
    Map(Map),
}

/// A finite `f64`: never NaN, never infinite.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Finite(f64);

impl Finite {
    /// `Some` for a finite float, `None` for NaN and the infinities.
    pub fn new(value: f64) -> Option<Self> {
        value.is_finite().then_some(Finite(value))
    }

    /// The float.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Finite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Value {
    /// A float value, or `None` when `value` is not finite.
    pub fn float(value: f64) -> Option<Self> {
        Finite::new(value).map(Value::Float)
    }

    /// The name of the value's type as a script author sees it (`str`, `int`, `dict`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Map(_) => "dict",
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The list, if this is one.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}
impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}
impl From<Finite> for Value {
    fn from(value: Finite) -> Self {
        Value::Float(value)
    }
}
impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Str(value.to_owned())
    }
}
impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Str(value)
    }
}
impl From<Vec<Value>> for Value {
    fn from(value: Vec<Value>) -> Self {
        Value::List(value)
    }
}
impl From<Map> for Value {
    fn from(value: Map) -> Self {
        Value::Map(value)
    }
}

/// Renders the value as compact canonical JSON (sorted keys).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

/// Checks that `value` is within `limits` (depth, nodes, bytes, as defined in [`crate::limits`]).
///
/// A [`Value`] cannot hold anything outside the matrix or a cycle, so only limits can fail here:
/// [`Error::ValueLimit`](crate::Error::ValueLimit), naming the path of the container where the
/// budget ran out.
pub fn validate(value: &Value, limits: Limits) -> Result<()> {
    let mut budget = Budget::new(limits);
    walk(value, 0, &mut budget)
}

fn walk(value: &Value, depth: usize, budget: &mut Budget) -> Result<()> {
    match value {
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => Ok(()),
        Value::Str(s) => budget.bytes(s.len()),
        Value::List(items) => {
            budget.depth(depth + 1)?;
            budget.nodes(items.len())?;
            for (i, item) in items.iter().enumerate() {
                walk(item, depth + 1, budget).map_err(|e| e.at_index(i))?;
            }
            Ok(())
        }
        Value::Map(map) => {
            budget.depth(depth + 1)?;
            budget.nodes(map.len())?;
            for (key, item) in map {
                budget.bytes(key.len()).map_err(|e| e.at_key(key))?;
                walk(item, depth + 1, budget).map_err(|e| e.at_key(key))?;
            }
            Ok(())
        }
    }
}
