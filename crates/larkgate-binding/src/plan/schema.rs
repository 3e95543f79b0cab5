//! Reading a schemars-generated JSON Schema into the restricted type notation.
//!
//! Only the forms schemars produces for the admitted Rust types are understood; anything else
//! (tuples, non-string enums, validation keywords we would not enforce, recursive types) is
//! refused with [`Error::InvalidPlan`] naming the field, so a plan never claims more than it
//! checks.

use std::fmt;

use serde_json::{Map as JsonMap, Value as Json};

use crate::{Error, FieldShape, Result, valid_identifier};

/// A type in the output notation (see [`crate::shape`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Any,
    Str,
    Int,
    Bool,
    Float,
    Nullable(Box<Ty>),
    List(Box<Ty>),
    Dict(Box<Ty>),
    Struct(Vec<Field>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) ty: Ty,
    pub(crate) required: bool,
}

impl Field {
    pub(crate) fn shape(&self) -> FieldShape {
        FieldShape::new(self.name.clone(), self.ty.to_string(), self.required)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Any => f.write_str("any"),
            Ty::Str => f.write_str("str"),
            Ty::Int => f.write_str("int"),
            Ty::Bool => f.write_str("bool"),
            Ty::Float => f.write_str("float"),
            Ty::Nullable(inner) => write!(f, "{inner} | None"),
            Ty::List(inner) => write!(f, "list[{inner}]"),
            Ty::Dict(inner) => write!(f, "dict[str, {inner}]"),
            Ty::Struct(fields) => {
                f.write_str("struct(")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    let optional = if field.required { "" } else { "?" };
                    write!(f, "{}{optional}: {}", field.name, field.ty)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Keywords that describe a schema without constraining values; they are ignored.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Integer formats whose whole range fits `i64`, plus the unsigned 64-bit ones whose values are
/// checked one by one at conversion.
const INT_FORMATS: &[&str] = &[
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "uint", "int",
];

pub(crate) struct Reader<'a> {
    root: &'a Json,
    defs: Option<&'a JsonMap<String, Json>>,
    /// References being expanded: meeting one again means the type is recursive.
    expanding: Vec<String>,
    type_name: &'a str,
    /// Input rules: integers are exactly `i64` and floats `f64` (a narrower type would refuse
    /// values the shape promises, such as 2^40 for a `u32` field), and no string enumerations
    /// (the shape `str` would promise strings the handler refuses).
    input_rules: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(root: &'a Json, type_name: &'a str) -> Self {
        Reader {
            root,
            defs: root.get("$defs").and_then(Json::as_object),
            expanding: Vec::new(),
            type_name,
            input_rules: false,
        }
    }

    /// A reader for input types (see `input_rules`).
    pub(crate) fn for_input(root: &'a Json, type_name: &'a str) -> Self {
        Reader {
            input_rules: true,
            ..Reader::new(root, type_name)
        }
    }

    fn invalid(&self, at: &str, what: impl fmt::Display) -> Error {
        Error::InvalidPlan(format!("{}{at}: {what}", self.type_name))
    }

    /// Reads the root schema, which must be a struct (a JSON object with named properties).
    pub(crate) fn root_struct(&mut self) -> Result<Vec<Field>> {
        let root = self.root;
        match self.read(root, "")? {
            Ty::Struct(fields) => Ok(fields),
            other => Err(self.invalid(
                "",
                format!("must be a struct with named fields, but its type is `{other}`"),
            )),
        }
    }

    pub(crate) fn read(&mut self, schema: &Json, at: &str) -> Result<Ty> {
        let object = match schema {
            Json::Bool(true) => return Ok(Ty::Any),
            Json::Object(object) => object,
            _ => return Err(self.invalid(at, "admits no value at all")),
        };
        if let Some(reference) = object.get("$ref") {
            let reference = reference.as_str().unwrap_or_default().to_owned();
            return self.follow(&reference, object, at);
        }
        if let Some(any_of) = object.get("anyOf") {
            return self.nullable_any_of(object, any_of, at);
        }
        let (ty, nullable) = match object.get("type") {
            None => {
                self.only(object, &[], at)?;
                return Ok(Ty::Any);
            }
            Some(Json::String(ty)) => (ty.as_str(), false),
            Some(Json::Array(types)) => match types.as_slice() {
                [Json::String(ty), Json::String(null)] if null == "null" => (ty.as_str(), true),
                _ => return Err(self.invalid(at, format!("has the type union {types:?}"))),
            },
            Some(other) => return Err(self.invalid(at, format!("has the type {other}"))),
        };
        let ty = match ty {
            "string" => {
                self.only(object, &["format", "enum"], at)?;
                if let Some(values) = object.get("enum") {
                    if self.input_rules {
                        return Err(self.invalid(
                            at,
                            "is an enumeration; input fields are plain str (check the value in \
                             the handler)",
                        ));
                    }
                    let all_strings = values
                        .as_array()
                        .is_some_and(|v| v.iter().all(Json::is_string));
                    if !all_strings {
                        return Err(self.invalid(at, "is an enumeration of non-string values"));
                    }
                }
                Ty::Str
            }
            "boolean" => {
                self.only(object, &[], at)?;
                Ty::Bool
            }
            "number" => {
                self.only(object, &["format"], at)?;
                let format = object.get("format").and_then(Json::as_str);
                if self.input_rules && format != Some("double") {
                    return Err(self.invalid(at, "is a float narrower than f64; use f64"));
                }
                Ty::Float
            }
            "integer" => {
                self.only(object, &["format", "minimum", "maximum"], at)?;
                let format = object.get("format").and_then(Json::as_str).unwrap_or("");
                if !INT_FORMATS.contains(&format) {
                    return Err(self.invalid(at, format!("is an integer of format {format:?}")));
                }
                if self.input_rules && format != "int64" {
                    return Err(self.invalid(
                        at,
                        format!("is an integer of format {format}; input integers are i64"),
                    ));
                }
                Ty::Int
            }
            "array" => {
                self.only(object, &["items", "uniqueItems"], at)?;
                let items = object
                    .get("items")
                    .ok_or_else(|| self.invalid(at, "is a list without an item type"))?;
                Ty::List(Box::new(self.read(items, &format!("{at}[]"))?))
            }
            "object" => self.object(object, at)?,
            "null" => return Err(self.invalid(at, "is a unit type; use a struct or a value")),
            other => return Err(self.invalid(at, format!("has the type {other:?}"))),
        };
        Ok(if nullable {
            Ty::Nullable(Box::new(ty))
        } else {
            ty
        })
    }

    fn object(&mut self, object: &JsonMap<String, Json>, at: &str) -> Result<Ty> {
        self.only(
            object,
            &["properties", "required", "additionalProperties"],
            at,
        )?;
        let properties = object.get("properties").and_then(Json::as_object);
        let additional = object.get("additionalProperties");
        match (properties, additional) {
            (None, Some(values)) if *values != Json::Bool(false) => {
                Ok(Ty::Dict(Box::new(self.read(values, &format!("{at}{{}}"))?)))
            }
            (properties, None | Some(Json::Bool(false))) => {
                let required: Vec<&str> = object
                    .get("required")
                    .and_then(Json::as_array)
                    .map(|r| r.iter().filter_map(Json::as_str).collect())
                    .unwrap_or_default();
                let mut fields = Vec::new();
                for (name, schema) in properties.into_iter().flatten() {
                    let here = format!("{at}.{name}");
                    if !valid_identifier(name) {
                        return Err(self.invalid(
                            &here,
                            format!(
                                "the field name {name:?} is not a Starlark identifier; rename \
                                 it (serde `rename`) to ASCII letters, digits and _, not a keyword"
                            ),
                        ));
                    }
                    let ty = self.read(schema, &here)?;
                    fields.push(Field {
                        name: name.clone(),
                        ty,
                        required: required.contains(&name.as_str()),
                    });
                }
                Ok(Ty::Struct(fields))
            }
            _ => Err(self.invalid(at, "mixes named fields with extra keys")),
        }
    }

    /// `anyOf: [X, {type: null}]` is how schemars writes `Option<Struct>`.
    fn nullable_any_of(
        &mut self,
        object: &JsonMap<String, Json>,
        any_of: &Json,
        at: &str,
    ) -> Result<Ty> {
        self.only(object, &["anyOf"], at)?;
        let null = serde_json::json!({ "type": "null" });
        match any_of.as_array().map(Vec::as_slice) {
            Some([inner, n]) | Some([n, inner]) if *n == null => {
                Ok(Ty::Nullable(Box::new(self.read(inner, at)?)))
            }
            _ => Err(self.invalid(at, "is a union type (an enum with data, or untagged)")),
        }
    }

    fn follow(&mut self, reference: &str, object: &JsonMap<String, Json>, at: &str) -> Result<Ty> {
        self.only(object, &["$ref"], at)?;
        if self.expanding.iter().any(|r| r == reference) || reference == "#" {
            return Err(self.invalid(
                at,
                "is a recursive type, which has no finite shape; flatten it",
            ));
        }
        let target = reference
            .strip_prefix("#/$defs/")
            .and_then(|name| self.defs.and_then(|defs| defs.get(name)))
            .ok_or_else(|| self.invalid(at, format!("refers to the unknown schema {reference}")))?;
        self.expanding.push(reference.to_owned());
        let ty = self.read(target, at);
        self.expanding.pop();
        ty
    }

    /// Refuses any keyword other than annotations and `allowed`.
    fn only(&self, object: &JsonMap<String, Json>, allowed: &[&str], at: &str) -> Result<()> {
        let keyword = object.keys().find(|k| {
            k.as_str() != "type"
                && !allowed.contains(&k.as_str())
                && !ANNOTATIONS.contains(&k.as_str())
                && k.as_str() != "$defs"
        });
        match keyword {
            None => Ok(()),
            Some(k) => Err(self.invalid(
                at,
                format!(
                    "uses the JSON Schema keyword `{k}`, which larkgate would not enforce; remove \
                     the attribute that adds it or check the value in the handler"
                ),
            )),
        }
    }
}

impl Ty {
    /// The JSON Schema of values of this type, generated from the notation so that the two
    /// always agree.
    pub(crate) fn json_schema(&self) -> Json {
        use serde_json::json;
        match self {
            // `{}`, not the equivalent `true`: MCP clients (the TypeScript SDK among them)
            // accept only object schemas as property schemas.
            Ty::Any => json!({}),
            Ty::Str => json!({ "type": "string" }),
            Ty::Int => json!({ "type": "integer" }),
            Ty::Bool => json!({ "type": "boolean" }),
            Ty::Float => json!({ "type": "number" }),
            Ty::Nullable(inner) => json!({ "anyOf": [inner.json_schema(), { "type": "null" }] }),
            Ty::List(inner) => json!({ "type": "array", "items": inner.json_schema() }),
            Ty::Dict(inner) => {
                json!({ "type": "object", "additionalProperties": inner.json_schema() })
            }
            Ty::Struct(fields) => struct_schema(fields),
        }
    }
}

/// The JSON Schema of a struct with exactly `fields`.
pub(crate) fn struct_schema(fields: &[Field]) -> Json {
    let properties: JsonMap<String, Json> = fields
        .iter()
        .map(|f| (f.name.clone(), f.ty.json_schema()))
        .collect();
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name.as_str())
        .collect();
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}
