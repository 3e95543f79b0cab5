//! Integration tests of the platform crate.

mod capabilities;
