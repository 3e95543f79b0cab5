//! Conversion between [`Value`] and Starlark values.
//!
//! Admitted from Starlark: `None`, `bool`, `int` (within `i64`; big integers outside it are
//! refused), finite `float`, `str`, `list`, `tuple` (becomes a list), `dict` with string keys,
//! and `struct` (becomes a map of its fields, in sorted key order). Everything else — functions,
//! ranges, sets, records, enums, bytes — is refused with [`Error::UnsupportedValue`] naming its
//! type and path.
//!
//! Threat model: a script builds its values, so they may be cyclic (`a = []; a.append(a)`),
//! self-sharing (`a = [a, a]`, 60 times over, is 2^60 nodes if unfolded), or just huge. An
//! active cycle is refused as soon as the walk re-enters a container it is inside; shared
//! substructure is allowed and counted at each occurrence, so the node budget stops it after at
//! most `max_nodes` steps. Room for a container's children is allocated only after their count
//! fits the budget, so a 10^7-element list against `max_nodes = 1000` fails before any storage
//! for it exists.

use starlark::collections::SmallMap;
use starlark::values::dict::{Dict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, ValueIdentity, ValueLike};

use crate::budget::Budget;
use crate::{Error, Limits, Map, Result, Value};

/// Converts a Starlark value into a [`Value`], checking the matrix, cycles and `limits`.
pub fn from_starlark(value: starlark::values::Value<'_>, limits: Limits) -> Result<Value> {
    let mut walk = FromStarlark {
        budget: Budget::new(limits),
        active: Vec::new(),
    };
    walk.convert(value, 0)
}

/// Converts a [`Value`] into a Starlark value on `heap`, checking `limits` first-come: the
/// Starlark side is allocated only for what fits.
pub fn to_starlark<'v>(
    value: &Value,
    heap: Heap<'v>,
    limits: Limits,
) -> Result<starlark::values::Value<'v>> {
    let mut budget = Budget::new(limits);
    alloc(value, heap, 0, &mut budget)
}

/// Converts a canonical map into a Starlark dict, with the map as the root container.
pub fn map_to_starlark<'v>(
    map: &Map,
    heap: Heap<'v>,
    limits: Limits,
) -> Result<starlark::values::Value<'v>> {
    let mut budget = Budget::new(limits);
    alloc_map(map, heap, 0, &mut budget)
}

/// The Starlark type name of a value, as error messages show it.
pub fn starlark_type_name(value: starlark::values::Value<'_>) -> &'static str {
    value.get_type()
}

/// Reads a Starlark scalar (`None`, `bool`, `int` within `i64`, finite `float`, `str`) without
/// any budget; `None` when the value is not such a scalar.
pub(crate) fn scalar_from_starlark(value: starlark::values::Value<'_>) -> Option<Value> {
    if value.is_none() {
        return Some(Value::Null);
    }
    if let Some(b) = value.unpack_bool() {
        return Some(Value::Bool(b));
    }
    if let Some(i) = value.unpack_i32() {
        return Some(Value::Int(i64::from(i)));
    }
    if value.get_type() == "int" {
        return match i64::unpack_value(value) {
            Ok(Some(i)) => Some(Value::Int(i)),
            _ => None,
        };
    }
    if let Some(f) = value.downcast_ref::<StarlarkFloat>() {
        return Value::float(f.0);
    }
    value.unpack_str().map(|s| Value::Str(s.to_owned()))
}

struct FromStarlark<'v> {
    budget: Budget,
    /// The containers the walk is currently inside: re-entering one is an active cycle.
    active: Vec<ValueIdentity<'v>>,
}

impl<'v> FromStarlark<'v> {
    fn convert(&mut self, value: starlark::values::Value<'v>, depth: usize) -> Result<Value> {
        if value.is_none() {
            return Ok(Value::Null);
        }
        if let Some(b) = value.unpack_bool() {
            return Ok(Value::Bool(b));
        }
        if let Some(i) = value.unpack_i32() {
            return Ok(Value::Int(i64::from(i)));
        }
        if let Some(s) = value.unpack_str() {
            self.budget.bytes(s.len())?;
            return Ok(Value::Str(s.to_owned()));
        }
        match value.get_type() {
            "int" => match i64::unpack_value(value) {
                Ok(Some(i)) => Ok(Value::Int(i)),
                // The number itself is not shown: it may have millions of digits.
                _ => Err(Error::unsupported(format!(
                    "an integer outside the signed 64-bit range ({} to {}) cannot leave a \
                     script; convert it with str() if you need its digits",
                    i64::MIN,
                    i64::MAX
                ))),
            },
            "float" => {
                let f = value
                    .downcast_ref::<StarlarkFloat>()
                    .ok_or_else(|| Error::unsupported("a float could not be read"))?
                    .0;
                Value::float(f).ok_or_else(|| {
                    Error::unsupported(format!(
                        "the float {f} cannot leave a script: only finite floats can"
                    ))
                })
            }
            "list" | "tuple" => {
                let items = ListRef::from_value(value)
                    .map(|list| list.content())
                    .or_else(|| TupleRef::from_value(value).map(|tuple| tuple.content()))
                    .ok_or_else(|| Error::unsupported("a list could not be read"))?;
                self.enter(value, depth)?;
                self.budget.nodes(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(self.convert(*item, depth + 1).map_err(|e| e.at_index(i))?);
                }
                self.active.pop();
                Ok(Value::List(out))
            }
            "dict" => {
                let dict = DictRef::from_value(value)
                    .ok_or_else(|| Error::unsupported("a dict could not be read"))?;
                self.enter(value, depth)?;
                self.budget.nodes(dict.len())?;
                let mut out = Map::new();
                for (key, item) in dict.iter() {
                    let Some(key) = key.unpack_str() else {
                        return Err(Error::unsupported(format!(
                            "dict keys must be strings, found a key of type `{}`",
                            key.get_type()
                        )));
                    };
                    self.budget.bytes(key.len()).map_err(|e| e.at_key(key))?;
                    let item = self.convert(item, depth + 1).map_err(|e| e.at_key(key))?;
                    out.insert(key.to_owned(), item);
                }
                self.active.pop();
                Ok(Value::Map(out))
            }
            "struct" => {
                let fields = StructRef::from_value(value)
                    .ok_or_else(|| Error::unsupported("a struct could not be read"))?;
                self.enter(value, depth)?;
                self.budget.nodes(fields.iter().len())?;
                let mut out = Map::new();
                for (key, item) in fields.iter() {
                    let key = key.as_str();
                    self.budget.bytes(key.len()).map_err(|e| e.at_key(key))?;
                    let item = self.convert(item, depth + 1).map_err(|e| e.at_key(key))?;
                    out.insert(key.to_owned(), item);
                }
                self.active.pop();
                Ok(Value::Map(out))
            }
            other => Err(Error::unsupported(format!(
                "a value of type `{other}` cannot leave a script; only None, bool, int, float, \
                 str, list, tuple, dict and struct values can"
            ))),
        }
    }

    /// Enters a container: refuses an active cycle, then checks depth.
    fn enter(&mut self, container: starlark::values::Value<'v>, depth: usize) -> Result<()> {
        let identity = container.identity();
        if self.active.contains(&identity) {
            return Err(Error::unsupported(format!(
                "this {} contains itself (an active cycle); build a value without \
                 self-references",
                container.get_type()
            )));
        }
        self.budget.depth(depth + 1)?;
        self.active.push(identity);
        Ok(())
    }
}

fn alloc<'v>(
    value: &Value,
    heap: Heap<'v>,
    depth: usize,
    budget: &mut Budget,
) -> Result<starlark::values::Value<'v>> {
    Ok(match value {
        Value::Null => starlark::values::Value::new_none(),
        Value::Bool(b) => starlark::values::Value::new_bool(*b),
        Value::Int(i) => heap.alloc(*i),
        Value::Float(f) => heap.alloc(StarlarkFloat(f.get())),
        Value::Str(s) => {
            budget.bytes(s.len())?;
            heap.alloc(s.as_str())
        }
        Value::List(items) => {
            budget.depth(depth + 1)?;
            budget.nodes(items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(alloc(item, heap, depth + 1, budget).map_err(|e| e.at_index(i))?);
            }
            heap.alloc(AllocList(out))
        }
        Value::Map(map) => alloc_map(map, heap, depth, budget)?,
    })
}

fn alloc_map<'v>(
    map: &Map,
    heap: Heap<'v>,
    depth: usize,
    budget: &mut Budget,
) -> Result<starlark::values::Value<'v>> {
    budget.depth(depth + 1)?;
    budget.nodes(map.len())?;
    let mut out = SmallMap::with_capacity(map.len());
    for (key, item) in map {
        budget.bytes(key.len()).map_err(|e| e.at_key(key))?;
        let item = alloc(item, heap, depth + 1, budget).map_err(|e| e.at_key(key))?;
        let key = heap.alloc(key.as_str());
        let hashed = key
            .get_hashed()
            .map_err(|e| Error::unsupported(format!("a key could not be hashed: {e}")))?;
        out.insert_hashed(hashed, item);
    }
    Ok(heap.alloc(Dict::new(out)))
}
