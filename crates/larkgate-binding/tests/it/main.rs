//! Integration tests of the binding layer: one test binary, one module per concern.

// The counting allocator in `alloc` is the one piece of unsafe code in the tests.
#![allow(unsafe_code)]

mod alloc;
mod canonical;
mod identifier;
mod json;
mod limits;
mod plan;
mod roundtrip;
mod shape;
mod star;
mod support;
