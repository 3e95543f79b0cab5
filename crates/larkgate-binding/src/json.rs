//! Conversion between [`Value`] and JSON.
//!
//! Two ways in: [`from_json`] from an already parsed [`serde_json::Value`] (what an MCP SDK
//! hands us), and [`from_json_slice`] straight from JSON text, charging the budget while it
//! parses so that an oversized document fails without ever being materialised. One way out:
//! [`Value`] implements [`serde::Serialize`], and [`to_json`] builds a [`serde_json::Value`].
//!
//! Numbers: the starlark crate turns on serde_json's `arbitrary_precision` for the whole build,
//! so JSON numbers arrive as their literal text. We classify the text ourselves: a literal
//! without `.`, `e` or `E` is an integer and must fit `i64` (`18446744073709551615` and
//! `1000000000000000000000` are refused, never rounded to a float); any other literal is a
//! float and must be finite (`1e400` is refused). `1E2` is therefore the float `100.0`, and
//! `100` the integer.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::budget::Budget;
use crate::{Error, Finite, Limits, Map, Result, Value};

/// Converts a parsed JSON value, checking the matrix and `limits`.
///
/// Fails with [`Error::UnsupportedValue`] for numbers outside `i64`/finite `f64`, and with
/// [`Error::ValueLimit`] when the value is too deep, has too many elements or too many bytes;
/// both name the path of the offending element.
pub fn from_json(json: &serde_json::Value, limits: Limits) -> Result<Value> {
    let mut budget = Budget::new(limits);
    convert(json, 0, &mut budget)
}

/// Converts the members of a JSON object (for example a `tools/call`'s `arguments`) into a
/// canonical map, checking the matrix and `limits` with the object itself as the root container.
pub fn from_json_object(
    object: &serde_json::Map<String, serde_json::Value>,
    limits: Limits,
) -> Result<Map> {
    let mut budget = Budget::new(limits);
    convert_object(object, 0, &mut budget)
}

fn convert(json: &serde_json::Value, depth: usize, budget: &mut Budget) -> Result<Value> {
    Ok(match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => number_from_literal(n.as_str())?,
        serde_json::Value::String(s) => {
            budget.bytes(s.len())?;
            Value::Str(s.clone())
        }
        serde_json::Value::Array(items) => {
            budget.depth(depth + 1)?;
            budget.nodes(items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(convert(item, depth + 1, budget).map_err(|e| e.at_index(i))?);
            }
            Value::List(out)
        }
        serde_json::Value::Object(object) => Value::Map(convert_object(object, depth, budget)?),
    })
}

fn convert_object(
    object: &serde_json::Map<String, serde_json::Value>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Map> {
    budget.depth(depth + 1)?;
    budget.nodes(object.len())?;
    let mut out = Map::new();
    for (key, item) in object {
        budget.bytes(key.len()).map_err(|e| e.at_key(key))?;
        let item = convert(item, depth + 1, budget).map_err(|e| e.at_key(key))?;
        out.insert(key.clone(), item);
    }
    Ok(out)
}

/// Classifies a JSON number literal. See the module documentation.
pub(crate) fn number_from_literal(text: &str) -> Result<Value> {
    if text.contains(['.', 'e', 'E']) {
        let float: f64 = text
            .parse()
            .map_err(|_| Error::unsupported(format!("`{text}` is not a number")))?;
        Value::float(float).ok_or_else(|| {
            Error::unsupported(format!(
                "the number {text} is outside the range of a 64-bit float"
            ))
        })
    } else {
        text.parse::<i64>().map(Value::Int).map_err(|_| {
            Error::unsupported(format!(
                "the integer {text} is outside the signed 64-bit range \
                 ({} to {}); send it as a string if it is an identifier",
                i64::MIN,
                i64::MAX
            ))
        })
    }
}

/// Converts a value to a [`serde_json::Value`]. Infallible: every [`Value`] is valid JSON.
pub fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::Number((*i).into()),
        Value::Float(f) => float_to_json(*f),
        Value::Str(s) => serde_json::Value::String(s.clone()),
        Value::List(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Map(map) => serde_json::Value::Object(map_to_json(map)),
    }
}

/// Converts a canonical map to a JSON object.
pub fn map_to_json(map: &Map) -> serde_json::Map<String, serde_json::Value> {
    map.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()
}

fn float_to_json(f: Finite) -> serde_json::Value {
    serde_json::Number::from_f64(f.get())
        .map(serde_json::Value::Number)
        // `Finite` guarantees a finite float, which serde_json always accepts.
        .unwrap_or(serde_json::Value::Null)
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Int(i) => serializer.serialize_i64(*i),
            Value::Float(f) => serializer.serialize_f64(f.get()),
            Value::Str(s) => serializer.serialize_str(s),
            Value::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Map(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

/// Parses JSON text into a value, charging `limits` as it parses.
///
/// A document within its limits converts exactly as [`from_json`] converts it; one that exceeds
/// several limits at once may be refused for a different one of them, since this reads the
/// text in order and [`from_json`] can count a container's children before it visits them.
/// Malformed text is [`Error::InvalidArguments`] with serde_json's line and column. The
/// parser's own nesting guard (128 levels) still applies when `max_depth` is larger.
pub fn from_json_slice(text: &[u8], limits: Limits) -> Result<Value> {
    let mut state = State {
        budget: Budget::new(limits),
        error: None,
        at_container: false,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let parsed = Seed {
        state: &mut state,
        depth: 0,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match parsed {
        Ok(value) => Ok(value),
        Err(e) => Err(state
            .error
            .take()
            .unwrap_or_else(|| Error::InvalidArguments(format!("malformed JSON: {e}")))),
    }
}

/// The key serde_json uses, with `arbitrary_precision`, to hand a number's literal text to a
/// visitor as a one-entry map. `number_literals_are_classified_not_rounded` pins it in a test.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

struct State {
    budget: Budget,
    /// Our own error, kept here because serde's error type can only carry text.
    error: Option<Error>,
    /// The stashed error belongs to the container the failing element was about to join.
    at_container: bool,
}

impl State {
    fn fail<E: de::Error>(&mut self, error: Error) -> E {
        self.error = Some(error);
        E::custom("value rejected")
    }

    /// Adds a path step to a child's stashed error as it passes through a container.
    fn wrap<E: de::Error>(&mut self, e: E, segment: impl FnOnce(Error) -> Error) -> E {
        if std::mem::take(&mut self.at_container) {
            return e;
        }
        if let Some(inner) = self.error.take() {
            self.error = Some(segment(inner));
        }
        e
    }
}

struct Seed<'s> {
    state: &'s mut State,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Value, E> {
        match i64::try_from(v) {
            Ok(i) => Ok(Value::Int(i)),
            Err(_) => Err(self
                .state
                .fail(number_from_literal(&v.to_string()).unwrap_err())),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        match Value::float(v) {
            Some(value) => Ok(value),
            None => Err(self.state.fail(Error::unsupported(format!(
                "the number {v} is outside the range of a 64-bit float"
            )))),
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Value, E> {
        if let Err(e) = self.state.budget.bytes(v.len()) {
            return Err(self.state.fail(e));
        }
        Ok(Value::Str(v.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let depth = self.depth + 1;
        if let Err(e) = self.state.budget.depth(depth) {
            return Err(self.state.fail(e));
        }
        let mut out = Vec::new();
        loop {
            let index = out.len();
            let seed = ElementSeed {
                state: &mut *self.state,
                depth,
            };
            match seq.next_element_seed(seed) {
                Ok(Some(value)) => out.push(value),
                Ok(None) => return Ok(Value::List(out)),
                Err(e) => return Err(self.state.wrap(e, |inner| inner.at_index(index))),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let first = map.next_key_seed(KeySeed {
            state: &mut *self.state,
        })?;
        let mut key = match first {
            Some(Key::Number) => {
                let literal: String = map.next_value()?;
                return number_from_literal(&literal).map_err(|e| self.state.fail(e));
            }
            Some(Key::Str(key)) => Some(key),
            None => None,
        };
        let depth = self.depth + 1;
        if let Err(e) = self.state.budget.depth(depth) {
            return Err(self.state.fail(e));
        }
        let mut out = Map::new();
        while let Some(k) = key {
            let seed = ElementSeed {
                state: &mut *self.state,
                depth,
            };
            match map.next_value_seed(seed) {
                Ok(value) => {
                    out.insert(k, value);
                }
                Err(e) => return Err(self.state.wrap(e, |inner| inner.at_key(&k))),
            }
            key = match map.next_key_seed(KeySeed {
                state: &mut *self.state,
            })? {
                None => None,
                Some(Key::Str(next)) => Some(next),
                Some(Key::Number) => {
                    return Err(self.state.fail(Error::unsupported(format!(
                        "the key {NUMBER_TOKEN:?} is reserved"
                    ))));
                }
            };
        }
        Ok(Value::Map(out))
    }
}

/// A list element or map value, charged one node as it begins: before it is parsed and before
/// its container grows for it. Running out here is reported at the container, as [`from_json`]
/// reports it.
struct ElementSeed<'s> {
    state: &'s mut State,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        if let Err(e) = self.state.budget.nodes(1) {
            self.state.at_container = true;
            return Err(self.state.fail(e));
        }
        d.deserialize_any(Seed {
            state: self.state,
            depth: self.depth,
        })
    }
}

enum Key {
    Number,
    Str(String),
}

struct KeySeed<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key, E> {
        if v == NUMBER_TOKEN {
            return Ok(Key::Number);
        }
        if let Err(e) = self.state.budget.bytes(v.len()) {
            return Err(self.state.fail(e.at_key(v)));
        }
        Ok(Key::Str(v.to_owned()))
    }
}
