//! larkgate's platform: the tools it serves, who may call them, and the one pipeline every
//! call crosses — authenticate, authorize, write barrier, rate limit, approval gate, audit,
//! dispatch.

#![forbid(unsafe_code)]

pub mod audit;
pub mod capabilities;
pub mod capability;
pub mod envelope;
pub mod policy;
pub mod ratelimit;

pub use capability::{Annotations, CapabilityInfo, Declared, Listing};
pub use envelope::{Code, Refusal};
