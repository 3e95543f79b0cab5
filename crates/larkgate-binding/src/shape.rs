//! Field shapes: what a tool's arguments and results look like to a script author and a model.
//!
//! A [`FieldShape`] is `{ name, type, required }`, with the type in a compact Starlark-facing
//! notation:
//!
//! | notation | meaning |
//! | --- | --- |
//! | `str`, `int`, `bool`, `float` | scalars |
//! | `T \| None` | a value that may be null (optional inputs; `Option<T>` outputs) |
//! | `list[T]` | a list of `T` |
//! | `dict[str, T]` | a map with string keys and `T` values |
//! | `struct(a: int, b?: str)` | a nested struct, in Starlark a dict with exactly these keys; `b?` is a key that may be absent |
//! | `any` | any value (outputs only) |
//!
//! Inputs are restricted to flat scalars: a required field is exactly `str`, `int`, `bool` or
//! `float` with `required = true`; an optional one is exactly `T | None` with
//! `required = false`. [`InputShape`] is a shape checked against those rules, and the one place
//! that binds arguments, renders signatures and generates a tool's JSON input schema.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::star::scalar_from_starlark;
use crate::{Error, Map, Result, Value, valid_identifier};

/// One model-facing field of a tool's input or output.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FieldShape {
    /// The field's exact Starlark and JSON name.
    pub name: String,
    /// The type, in the notation of the module documentation.
    #[serde(rename = "type")]
    pub ty: String,
    /// Whether the caller (for inputs) or the handler (for outputs) must provide the field.
    pub required: bool,
}

impl FieldShape {
    /// A field shape.
    pub fn new(name: impl Into<String>, ty: impl Into<String>, required: bool) -> Self {
        FieldShape {
            name: name.into(),
            ty: ty.into(),
            required,
        }
    }
}

/// The scalar types an input field may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `str`
    Str,
    /// `int` (64-bit signed)
    Int,
    /// `bool`
    Bool,
    /// `float` (finite 64-bit; an `int` argument is accepted and widened when exact)
    Float,
}

impl Scalar {
    /// The notation of the scalar (`str`, `int`, `bool`, `float`).
    pub fn notation(self) -> &'static str {
        match self {
            Scalar::Str => "str",
            Scalar::Int => "int",
            Scalar::Bool => "bool",
            Scalar::Float => "float",
        }
    }

    fn parse(notation: &str) -> Option<Self> {
        Some(match notation {
            "str" => Scalar::Str,
            "int" => Scalar::Int,
            "bool" => Scalar::Bool,
            "float" => Scalar::Float,
            _ => return None,
        })
    }

    fn json_type(self) -> &'static str {
        match self {
            Scalar::Str => "string",
            Scalar::Int => "integer",
            Scalar::Bool => "boolean",
            Scalar::Float => "number",
        }
    }

    /// Checks `value` against this type, returning the canonical value (an exact `int` widened
    /// to `float` for a float field). `Err` holds the received type's name.
    fn admit(self, value: Value) -> std::result::Result<Value, &'static str> {
        /// Integers up to 2^53 convert to `f64` exactly.
        const EXACT: i64 = 1 << 53;
        match (self, value) {
            (Scalar::Str, v @ Value::Str(_))
            | (Scalar::Int, v @ Value::Int(_))
            | (Scalar::Bool, v @ Value::Bool(_))
            | (Scalar::Float, v @ Value::Float(_)) => Ok(v),
            // `i as f64` is exact in this range, and always finite.
            (Scalar::Float, Value::Int(i)) if (-EXACT..=EXACT).contains(&i) => {
                Value::float(i as f64).ok_or("int")
            }
            (Scalar::Float, Value::Int(_)) => Err("int too large to be an exact float"),
            (_, other) => Err(other.type_name()),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.notation())
    }
}

/// One validated input field.
#[derive(Clone, Debug, PartialEq, Eq)]
struct InputField {
    shape: FieldShape,
    scalar: Scalar,
}

/// An input shape checked against the input rules (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShape {
    fields: Vec<InputField>,
}

/// Checks that `fields` is a shape [`Plan::input_shape`](crate::Plan::input_shape) can produce.
pub fn validate_input_shape(fields: &[FieldShape]) -> Result<()> {
    InputShape::new(fields.to_vec()).map(|_| ())
}

/// Binds keyword-only Starlark arguments against `fields` and returns a fresh canonical map.
///
/// `tool` names the callable in messages. Positional arguments are refused with the keyword
/// form; unknown keywords are refused naming the accepted ones; a missing required field is
/// named; a wrong type names field, expected and received type; `None` for an optional field is
/// the same as leaving it out. The result is never the authoritative authorization map: the
/// receiving side binds again.
pub fn bind_shape(
    tool: &str,
    fields: &[FieldShape],
    positional: &[starlark::values::Value<'_>],
    named: &[(&str, starlark::values::Value<'_>)],
) -> Result<Map> {
    InputShape::new(fields.to_vec())?.bind_starlark(tool, positional, named)
}

impl InputShape {
    /// Checks `fields` against the input rules.
    ///
    /// Refused with [`Error::InvalidPlan`]: a name that is not a Starlark identifier, a
    /// duplicate name, and any type/required pair other than a required scalar or an optional
    /// `T | None` (including the literal `unsupported`).
    pub fn new(fields: Vec<FieldShape>) -> Result<Self> {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(fields.len());
        for shape in fields {
            if !valid_identifier(&shape.name) {
                return Err(Error::InvalidPlan(format!(
                    "field name {:?} is not a Starlark identifier (ASCII letters, digits and _, \
                     not starting with a digit, not a keyword)",
                    shape.name
                )));
            }
            if !seen.insert(shape.name.clone()) {
                return Err(Error::InvalidPlan(format!(
                    "field `{}` appears more than once",
                    shape.name
                )));
            }
            let scalar = match (shape.ty.strip_suffix(" | None"), shape.required) {
                (None, true) => Scalar::parse(&shape.ty),
                (Some(inner), false) => Scalar::parse(inner),
                _ => None,
            };
            let Some(scalar) = scalar else {
                return Err(Error::InvalidPlan(format!(
                    "field `{}` has type {:?} with required = {}; an input field is a required \
                     `str`, `int`, `bool` or `float`, or an optional `T | None` of one of them",
                    shape.name, shape.ty, shape.required
                )));
            };
            out.push(InputField { shape, scalar });
        }
        Ok(InputShape { fields: out })
    }

    /// The fields, in declaration order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = &FieldShape> {
        self.fields.iter().map(|f| &f.shape)
    }

    /// The fields as a fresh vector.
    pub fn to_fields(&self) -> Vec<FieldShape> {
        self.fields().cloned().collect()
    }

    fn field(&self, name: &str) -> Option<&InputField> {
        self.fields.iter().find(|f| f.shape.name == name)
    }

    /// The JSON Schema of the input: the only source of a tool's MCP `inputSchema`.
    pub fn json_schema(&self) -> serde_json::Value {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for field in &self.fields {
            let json_type = field.scalar.json_type();
            let ty = if field.shape.required {
                required.push(serde_json::Value::from(field.shape.name.as_str()));
                serde_json::json!(json_type)
            } else {
                serde_json::json!([json_type, "null"])
            };
            properties.insert(field.shape.name.clone(), serde_json::json!({ "type": ty }));
        }
        serde_json::json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    }

    /// The Starlark signature of a tool taking this input, for example
    /// `kv_get(*, key: str, default: str | None = None) -> dict`.
    pub fn signature(&self, tool: &str, returns: &str) -> String {
        let mut out = format!("{tool}(");
        if !self.fields.is_empty() {
            out.push('*');
            for field in &self.fields {
                out.push_str(", ");
                out.push_str(&field.shape.name);
                out.push_str(": ");
                out.push_str(&field.shape.ty);
                if !field.shape.required {
                    out.push_str(" = None");
                }
            }
        }
        out.push_str(") -> ");
        out.push_str(returns);
        out
    }

    /// Binds keyword-only Starlark arguments. See [`bind_shape`].
    pub fn bind_starlark(
        &self,
        tool: &str,
        positional: &[starlark::values::Value<'_>],
        named: &[(&str, starlark::values::Value<'_>)],
    ) -> Result<Map> {
        if !positional.is_empty() {
            return Err(Error::InvalidArguments(format!(
                "{tool}() takes keyword arguments only, but got {} positional argument{}: \
                 call {}",
                positional.len(),
                if positional.len() == 1 { "" } else { "s" },
                self.keyword_form(tool)
            )));
        }
        let mut out = Map::new();
        for (name, value) in named {
            let field = self.known_field(tool, name)?;
            if out.contains_key(*name) {
                return Err(Error::InvalidArguments(format!(
                    "{tool}() got the argument `{name}` more than once"
                )));
            }
            // Only scalars are admitted, so the conversion needs no budget; a container shows
            // up here as `None` and is reported with its Starlark type.
            let Some(converted) = scalar_from_starlark(*value) else {
                return Err(wrong_type(tool, field, value.get_type()));
            };
            if let Some(v) = self.admit(tool, field, converted)? {
                out.insert(field.shape.name.clone(), v);
            }
        }
        self.check_required(tool, &out)?;
        Ok(out)
    }

    /// Binds a map of arguments (for example a `tools/call`'s `arguments`), returning a fresh
    /// canonical map under the same rules as [`InputShape::bind_starlark`].
    pub fn bind_map(&self, tool: &str, arguments: &Map) -> Result<Map> {
        let mut out = Map::new();
        for (name, value) in arguments {
            let field = self.known_field(tool, name)?;
            if let Some(v) = self.admit(tool, field, value.clone())? {
                out.insert(field.shape.name.clone(), v);
            }
        }
        self.check_required(tool, &out)?;
        Ok(out)
    }

    /// Checks one argument: `Ok(None)` for a `None` that leaves an optional field out.
    fn admit(&self, tool: &str, field: &InputField, value: Value) -> Result<Option<Value>> {
        if value == Value::Null {
            if field.shape.required {
                return Err(Error::InvalidArguments(format!(
                    "{tool}(): argument `{}` is required and cannot be None; pass a {}",
                    field.shape.name, field.scalar
                )));
            }
            return Ok(None);
        }
        field
            .scalar
            .admit(value)
            .map(Some)
            .map_err(|received| wrong_type(tool, field, received))
    }

    fn known_field(&self, tool: &str, name: &str) -> Result<&InputField> {
        if let Some(field) = self.field(name) {
            return Ok(field);
        }
        let accepted: Vec<&str> = self.fields.iter().map(|f| f.shape.name.as_str()).collect();
        let mut message = format!("{tool}() got an unexpected keyword argument `{name}`");
        if let Some(close) = closest(name, &accepted) {
            message.push_str(&format!("; did you mean `{close}`?"));
        }
        if accepted.is_empty() {
            message.push_str(&format!("; {tool}() takes no arguments"));
        } else {
            message.push_str(&format!("; it accepts: {}", accepted.join(", ")));
        }
        Err(Error::InvalidArguments(message))
    }

    fn check_required(&self, tool: &str, bound: &Map) -> Result<()> {
        let missing: Vec<&InputField> = self
            .fields
            .iter()
            .filter(|f| f.shape.required && !bound.contains_key(&f.shape.name))
            .collect();
        match missing.as_slice() {
            [] => Ok(()),
            [one] => Err(Error::InvalidArguments(format!(
                "{tool}() is missing the required argument `{}` ({}): call {}",
                one.shape.name,
                one.scalar,
                self.keyword_form(tool)
            ))),
            many => Err(Error::InvalidArguments(format!(
                "{tool}() is missing the required arguments {}: call {}",
                many.iter()
                    .map(|f| format!("`{}` ({})", f.shape.name, f.scalar))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.keyword_form(tool)
            ))),
        }
    }

    /// `kv_get(key=...)`: the required fields (or, with none, every field) as keywords.
    fn keyword_form(&self, tool: &str) -> String {
        let required: Vec<&str> = self
            .fields
            .iter()
            .filter(|f| f.shape.required)
            .map(|f| f.shape.name.as_str())
            .collect();
        let names = if required.is_empty() {
            self.fields.iter().map(|f| f.shape.name.as_str()).collect()
        } else {
            required
        };
        let args: Vec<String> = names.iter().map(|n| format!("{n}=...")).collect();
        format!("{tool}({})", args.join(", "))
    }
}

fn wrong_type(tool: &str, field: &InputField, received: &str) -> Error {
    Error::InvalidArguments(format!(
        "{tool}(): argument `{}` must be {}, got {received}",
        field.shape.name, field.shape.ty
    ))
}

/// The accepted name closest to `name`, when one is close enough to be a likely typo.
fn closest<'a>(name: &str, accepted: &[&'a str]) -> Option<&'a str> {
    accepted
        .iter()
        .map(|candidate| (strsim::levenshtein(name, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len().max(name.len()) / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}
