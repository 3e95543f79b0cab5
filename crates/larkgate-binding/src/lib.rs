//! larkgate's binding layer: the one place that decides what a value may be, how big it may
//! get, and what a tool's arguments look like to a script author and to an AI model.
//!
//! Values move between three worlds — typed Rust handlers, Starlark scripts and JSON on the
//! wire — always through [`Value`], always within [`Limits`]:
//!
//! ```text
//!  JSON ──from_json──▶ Value ──to_starlark──▶ Starlark
//!  JSON ◀──Serialize── Value ◀─from_starlark─ Starlark
//!  canonical Map ◀──InputShape::bind_map── Map           (once per call, in the pipeline)
//!  handler input ◀──Plan::read_input── canonical Map
//!  handler output ──Plan::convert_output──▶ canonical Map
//! ```
//!
//! A [`Plan`] compiles a capability's input and output types once, at registration; its
//! [`FieldShape`]s are the only source of the tool's signature and JSON input schema.
//! Every failure is an [`Error`] of one of four kinds.

#![forbid(unsafe_code)]

mod budget;
mod canonical;
mod error;
mod identifier;
mod json;
mod limits;
mod plan;
mod schema;
mod shape;
mod star;
mod value;

pub use canonical::{canonical_json, canonical_map_json, canonical_map_to_json};
pub use error::{Error, ErrorKind, LimitExceeded, Path, Result, Segment};
pub use identifier::valid_identifier;
pub use json::{from_json, from_json_object, from_json_slice, map_to_json, to_json};
pub use limits::Limits;
pub use plan::Plan;
pub use schema::check_schema;
pub use shape::{FieldShape, InputShape, Scalar, bind_shape, validate_input_shape};
pub use star::{from_starlark, map_to_starlark, starlark_type_name, to_starlark};
pub use value::{Finite, Map, Value, validate};
