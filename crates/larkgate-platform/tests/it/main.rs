//! Integration tests of the platform crate.

mod audit;
mod capabilities;
mod envelopes;
mod modules;
mod tokens;
