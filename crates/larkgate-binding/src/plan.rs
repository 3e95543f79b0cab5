//! Plans: a capability's Rust input and output types compiled once into an immutable
//! description of how values cross into and out of its handler.
//!
//! ## Why schemars, not a derive macro of our own
//!
//! A plan must agree exactly with what serde does to the type — renamed fields, skipped
//! fields, `Option`s, flattened structs — or a script would be shown one shape and the handler
//! handed another. `schemars::JsonSchema` is derived from the same serde attributes and is
//! maintained to track them, so we read the plan out of the generated schema instead of writing
//! a second, drifting interpretation of serde's attributes in a proc macro. The price is that
//! we must understand the schema forms schemars emits; [`schema`] accepts exactly the forms of
//! the admitted types and refuses the rest with [`Error::InvalidPlan`], so the price is paid at
//! registration, never at call time.
//!
//! ## Input and output rules
//!
//! * **Input**: a struct of scalar fields. A required field is `String`, `i64`, `bool` or
//!   `f64`; an optional field is `Option` of one of them. Anything else — nested structs,
//!   lists, other integer widths, `#[serde(default)]` on a non-`Option` — is refused, naming
//!   the field. Field names (after serde `rename`) must be Starlark identifiers.
//! * **Output**: a struct whose fields may nest lists, string-keyed maps, structs and options
//!   of those, scalars, and [`Value`] (`any`). Recursive types are refused (no finite shape).

mod schema;
mod ser;

use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::budget::Budget;
use crate::shape::InputShape;
use crate::{Error, FieldShape, Limits, Map, Result, Value, map_to_json};

use schema::{Reader, Ty};
use ser::{SerError, ValueSerializer};

/// A compiled, immutable plan for a handler taking `I` and returning `O`.
pub struct Plan<I, O> {
    input: InputShape,
    output: Vec<schema::Field>,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Clone for Plan<I, O> {
    fn clone(&self) -> Self {
        Plan {
            input: self.input.clone(),
            output: self.output.clone(),
            _types: PhantomData,
        }
    }
}

impl<I, O> fmt::Debug for Plan<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("input", &self.input.to_fields())
            .field("output", &self.output_shape())
            .finish()
    }
}

impl<I, O> Plan<I, O>
where
    I: DeserializeOwned + JsonSchema,
    O: Serialize + JsonSchema,
{
    /// Compiles the plan, refusing types outside the rules with [`Error::InvalidPlan`].
    pub fn compile() -> Result<Self> {
        let input_schema = SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<I>();
        let input_name = I::schema_name();
        let fields = Reader::for_input(input_schema.as_value(), &input_name).root_struct()?;
        let mut shapes = Vec::with_capacity(fields.len());
        for field in fields {
            shapes.push(input_field(&input_name, field)?);
        }
        let input = InputShape::new(shapes)
            .map_err(|e| Error::InvalidPlan(format!("{input_name}: {e}")))?;

        let output_schema = SchemaSettings::draft2020_12()
            .for_serialize()
            .into_generator()
            .into_root_schema_for::<O>();
        let output_name = O::schema_name();
        let output = Reader::new(output_schema.as_value(), &output_name).root_struct()?;
        Ok(Plan {
            input,
            output,
            _types: PhantomData,
        })
    }
}

/// Maps one field of an input struct to its shape, or says why it cannot be an input.
fn input_field(type_name: &str, field: schema::Field) -> Result<FieldShape> {
    let scalar = |ty: &Ty| matches!(ty, Ty::Str | Ty::Int | Ty::Bool | Ty::Float);
    let problem = match (&field.ty, field.required) {
        (ty, true) if scalar(ty) => None,
        (Ty::Nullable(inner), false) if scalar(inner) => None,
        (Ty::Nullable(_), true) => Some(
            "is an Option the caller must still send; let it be omitted (no `deserialize_with` \
             or `default` tricks)"
                .to_owned(),
        ),
        (ty, false) if scalar(ty) => Some(format!(
            "has a default but is not an Option; declare it as Option<{}> and apply the default \
             in the handler",
            rust_scalar(ty)
        )),
        (ty, _) => Some(format!(
            "has the type `{ty}`; input fields are str, int (i64), bool or float (f64), or an \
             Option of one"
        )),
    };
    if let Some(problem) = problem {
        return Err(Error::InvalidPlan(format!(
            "{type_name}.{} {problem}",
            field.name
        )));
    }
    Ok(field.shape())
}

fn rust_scalar(ty: &Ty) -> &'static str {
    match ty {
        Ty::Str => "String",
        Ty::Int => "i64",
        Ty::Bool => "bool",
        _ => "f64",
    }
}

impl<I, O> Plan<I, O> {
    /// The input fields, fresh, in declaration order.
    pub fn input_shape(&self) -> Vec<FieldShape> {
        self.input.to_fields()
    }

    /// The validated input shape: binding, schema and signature in one place.
    pub fn input(&self) -> &InputShape {
        &self.input
    }

    /// The output struct's fields, fresh, with nested types in the shape notation.
    pub fn output_shape(&self) -> Vec<FieldShape> {
        self.output.iter().map(schema::Field::shape).collect()
    }

    /// The MCP `inputSchema`, generated from the input shape.
    pub fn input_schema(&self) -> serde_json::Value {
        self.input.json_schema()
    }

    /// The MCP `outputSchema`, generated from the output shape.
    pub fn output_schema(&self) -> serde_json::Value {
        schema::struct_schema(&self.output)
    }

    /// The Starlark signature of a capability named `name`, for example
    /// `kv_get(*, key: str, default: str | None = None) -> dict`.
    pub fn signature(&self, name: &str) -> String {
        self.input.signature(name, "dict")
    }
}

impl<I: DeserializeOwned, O> Plan<I, O> {
    /// Binds an argument map for the capability `tool` (named in messages): returns the typed
    /// input and a fresh canonical map, `None` values of optional keys omitted.
    pub fn bind_value(&self, tool: &str, arguments: &Map) -> Result<(I, Map)> {
        let canonical = self.input.bind_map(tool, arguments)?;
        let json = serde_json::Value::Object(map_to_json(&canonical));
        let input = serde_json::from_value(json)
            .map_err(|e| Error::InvalidArguments(format!("{tool}(): {e}")))?;
        Ok((input, canonical))
    }

    /// Reads arguments already bound to this plan's input shape (a canonical map, as the
    /// platform's pipeline makes it for every call) into the typed input, without binding them
    /// again: one conversion to JSON and one from it, the input's own deserializer.
    pub fn read_input(&self, tool: &str, canonical: &Map) -> Result<I> {
        let json = serde_json::Value::Object(map_to_json(canonical));
        serde_json::from_value(json).map_err(|e| Error::InvalidArguments(format!("{tool}(): {e}")))
    }
}

impl<I, O: Serialize> Plan<I, O> {
    /// Converts the handler's output into a canonical map within `limits`.
    ///
    /// The root struct is depth 1, an `Option` adds no depth, and each nested container adds
    /// one; a list's length is charged before room for it is allocated.
    pub fn convert_output(&self, output: &O, limits: Limits) -> Result<Map> {
        let mut budget = Budget::new(limits);
        let value = output
            .serialize(ValueSerializer {
                budget: &mut budget,
                depth: 0,
            })
            .map_err(|SerError(e)| e)?;
        match value {
            Value::Map(map) => Ok(map),
            other => Err(Error::unsupported(format!(
                "a handler returned a {} where its plan promises a struct",
                other.type_name()
            ))),
        }
    }
}

/// [`Value`] in an output type is `any`.
impl JsonSchema for Value {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Value".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::Schema::from(true)
    }
}
