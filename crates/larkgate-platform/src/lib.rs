//! larkgate's platform: the tools it serves and, as it grows, the principals, policy and the
//! one call pipeline every call crosses.
//!
//! Today it holds the built-in capabilities' declarations ([`capabilities`]): their names,
//! annotations and binding plans, final here so that scripts and models can rely on them.

#![forbid(unsafe_code)]

pub mod capabilities;
pub mod capability;

pub use capability::{Annotations, CapabilityInfo, Declared, Listing};
