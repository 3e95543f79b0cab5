//! A serde `Serializer` that builds a [`Value`] from a handler's output while charging a
//! [`Budget`]: the root struct is depth 1, `Option` adds no depth, each nested list, map or
//! struct adds one, and a list's length is charged before room for it is allocated.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};

use crate::budget::Budget;
use crate::json::number_from_literal;
use crate::{Error, Map, Value};

/// serde_json's `arbitrary_precision` serializes a number as a struct of this name with one
/// field holding its literal text; a `serde_json::Value` inside an output is read back this way.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Carries a binding [`Error`] through serde's error type.
#[derive(Debug)]
pub(crate) struct SerError(pub(crate) Error);

impl fmt::Display for SerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SerError {}

impl ser::Error for SerError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        SerError(Error::unsupported(msg.to_string()))
    }
}

impl From<Error> for SerError {
    fn from(e: Error) -> Self {
        SerError(e)
    }
}

type R<T> = Result<T, SerError>;

pub(crate) struct ValueSerializer<'b> {
    pub(crate) budget: &'b mut Budget,
    /// The depth of the container this value sits in (0 for the root).
    pub(crate) depth: usize,
}

impl<'b> ValueSerializer<'b> {
    fn unsupported<T>(what: &str) -> R<T> {
        Err(SerError(Error::unsupported(format!(
            "{what} cannot be converted: outputs hold None, bool, int, float, str, lists, \
             string-keyed maps and structs"
        ))))
    }

    fn int<T: TryInto<i64> + fmt::Display + Copy>(v: T) -> R<Value> {
        v.try_into().map(Value::Int).map_err(|_| {
            SerError(Error::unsupported(format!(
                "the integer {v} is outside the signed 64-bit range"
            )))
        })
    }

    fn container(self) -> R<Container<'b>> {
        self.budget.depth(self.depth + 1)?;
        Ok(Container {
            budget: self.budget,
            depth: self.depth + 1,
            list: Vec::new(),
            map: Map::new(),
            pending_key: None,
            charged: false,
        })
    }
}

impl<'b> ser::Serializer for ValueSerializer<'b> {
    type Ok = Value;
    type Error = SerError;
    type SerializeSeq = Container<'b>;
    type SerializeTuple = Impossible<Value, SerError>;
    type SerializeTupleStruct = Impossible<Value, SerError>;
    type SerializeTupleVariant = Impossible<Value, SerError>;
    type SerializeMap = Container<'b>;
    type SerializeStruct = StructState<'b>;
    type SerializeStructVariant = Impossible<Value, SerError>;

    fn serialize_bool(self, v: bool) -> R<Value> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_i16(self, v: i16) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_i32(self, v: i32) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_i64(self, v: i64) -> R<Value> {
        Ok(Value::Int(v))
    }
    fn serialize_i128(self, v: i128) -> R<Value> {
        Self::int(v)
    }
    fn serialize_u8(self, v: u8) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_u16(self, v: u16) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_u32(self, v: u32) -> R<Value> {
        Ok(Value::Int(v.into()))
    }
    fn serialize_u64(self, v: u64) -> R<Value> {
        Self::int(v)
    }
    fn serialize_u128(self, v: u128) -> R<Value> {
        Self::int(v)
    }
    fn serialize_f32(self, v: f32) -> R<Value> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> R<Value> {
        Value::float(v).ok_or_else(|| {
            SerError(Error::unsupported(format!(
                "the float {v} is not finite; only finite floats can be returned"
            )))
        })
    }
    fn serialize_char(self, v: char) -> R<Value> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> R<Value> {
        self.budget.bytes(v.len())?;
        Ok(Value::Str(v.to_owned()))
    }
    fn serialize_bytes(self, _: &[u8]) -> R<Value> {
        Self::unsupported("a byte string")
    }
    fn serialize_none(self) -> R<Value> {
        Ok(Value::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> R<Value> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> R<Value> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> R<Value> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> R<Value> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> R<Value> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: &T,
    ) -> R<Value> {
        Self::unsupported(&format!("the enum variant `{variant}` with data"))
    }
    fn serialize_seq(self, len: Option<usize>) -> R<Container<'b>> {
        let mut container = self.container()?;
        if let Some(len) = len {
            // The whole length is charged before the list's storage exists.
            container.budget.nodes(len)?;
            container.list = Vec::with_capacity(len);
            container.charged = true;
        }
        Ok(container)
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Self::unsupported("a tuple")
    }
    fn serialize_tuple_struct(self, name: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        Self::unsupported(&format!("the tuple struct `{name}`"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Self::unsupported(&format!("the enum variant `{variant}` with data"))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Container<'b>> {
        self.container()
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> R<StructState<'b>> {
        if name == NUMBER_TOKEN {
            return Ok(StructState::Number(None));
        }
        Ok(StructState::Fields(self.container()?))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Self::unsupported(&format!("the enum variant `{variant}` with data"))
    }
}

/// A list, map or struct under construction.
pub(crate) struct Container<'b> {
    budget: &'b mut Budget,
    depth: usize,
    list: Vec<Value>,
    map: Map,
    pending_key: Option<String>,
    /// Whether the list's length was charged up front.
    charged: bool,
}

impl Container<'_> {
    fn child(&mut self) -> ValueSerializer<'_> {
        ValueSerializer {
            budget: self.budget,
            depth: self.depth,
        }
    }

    fn entry<T: ?Sized + Serialize>(&mut self, key: String, value: &T) -> R<()> {
        self.budget.nodes(1).map_err(|e| e.at_key(&key))?;
        self.budget.bytes(key.len()).map_err(|e| e.at_key(&key))?;
        let value = value
            .serialize(self.child())
            .map_err(|SerError(e)| SerError(e.at_key(&key)))?;
        self.map.insert(key, value);
        Ok(())
    }
}

impl ser::SerializeSeq for Container<'_> {
    type Ok = Value;
    type Error = SerError;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> R<()> {
        let index = self.list.len();
        if !self.charged {
            self.budget.nodes(1)?;
        }
        let value = value
            .serialize(self.child())
            .map_err(|SerError(e)| SerError(e.at_index(index)))?;
        self.list.push(value);
        Ok(())
    }
    fn end(self) -> R<Value> {
        Ok(Value::List(self.list))
    }
}

impl ser::SerializeMap for Container<'_> {
    type Ok = Value;
    type Error = SerError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> R<()> {
        self.pending_key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> R<()> {
        let key = self
            .pending_key
            .take()
            .ok_or_else(|| SerError(Error::unsupported("a map value came without its key")))?;
        self.entry(key, value)
    }
    fn end(self) -> R<Value> {
        Ok(Value::Map(self.map))
    }
}

pub(crate) enum StructState<'b> {
    Fields(Container<'b>),
    /// A serde_json number under `arbitrary_precision`: its literal text.
    Number(Option<Value>),
}

impl ser::SerializeStruct for StructState<'_> {
    type Ok = Value;
    type Error = SerError;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> R<()> {
        match self {
            StructState::Fields(container) => container.entry(key.to_owned(), value),
            StructState::Number(slot) => {
                let literal = value.serialize(KeySerializer)?;
                *slot = Some(number_from_literal(&literal)?);
                Ok(())
            }
        }
    }
    fn end(self) -> R<Value> {
        match self {
            StructState::Fields(container) => Ok(Value::Map(container.map)),
            StructState::Number(value) => {
                value.ok_or_else(|| SerError(Error::unsupported("a number without its digits")))
            }
        }
    }
}

/// Map keys must be strings (or unit enum variants, which serialize as their names).
struct KeySerializer;

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = SerError;
    type SerializeSeq = Impossible<String, SerError>;
    type SerializeTuple = Impossible<String, SerError>;
    type SerializeTupleStruct = Impossible<String, SerError>;
    type SerializeTupleVariant = Impossible<String, SerError>;
    type SerializeMap = Impossible<String, SerError>;
    type SerializeStruct = Impossible<String, SerError>;
    type SerializeStructVariant = Impossible<String, SerError>;

    fn serialize_str(self, v: &str) -> R<String> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> R<String> {
        Ok(v.to_string())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> R<String> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> R<String> {
        value.serialize(self)
    }

    fn serialize_bool(self, _: bool) -> R<String> {
        key_error("bool")
    }
    fn serialize_i8(self, _: i8) -> R<String> {
        key_error("int")
    }
    fn serialize_i16(self, _: i16) -> R<String> {
        key_error("int")
    }
    fn serialize_i32(self, _: i32) -> R<String> {
        key_error("int")
    }
    fn serialize_i64(self, _: i64) -> R<String> {
        key_error("int")
    }
    fn serialize_u8(self, _: u8) -> R<String> {
        key_error("int")
    }
    fn serialize_u16(self, _: u16) -> R<String> {
        key_error("int")
    }
    fn serialize_u32(self, _: u32) -> R<String> {
        key_error("int")
    }
    fn serialize_u64(self, _: u64) -> R<String> {
        key_error("int")
    }
    fn serialize_f32(self, _: f32) -> R<String> {
        key_error("float")
    }
    fn serialize_f64(self, _: f64) -> R<String> {
        key_error("float")
    }
    fn serialize_bytes(self, _: &[u8]) -> R<String> {
        key_error("bytes")
    }
    fn serialize_none(self) -> R<String> {
        key_error("None")
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> R<String> {
        key_error("an option")
    }
    fn serialize_unit(self) -> R<String> {
        key_error("None")
    }
    fn serialize_unit_struct(self, _: &'static str) -> R<String> {
        key_error("a unit struct")
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> R<String> {
        key_error("an enum")
    }
    fn serialize_seq(self, _: Option<usize>) -> R<Self::SerializeSeq> {
        key_error("a list")
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        key_error("a tuple")
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        key_error("a tuple")
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        key_error("an enum")
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        key_error("a map")
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> R<Self::SerializeStruct> {
        key_error("a struct")
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        key_error("an enum")
    }
}

fn key_error<T>(what: &str) -> R<T> {
    Err(SerError(Error::unsupported(format!(
        "map keys must be strings, found {what}"
    ))))
}
