//! Tests of the script service's crate boundary: what it must keep in step with the engine.

mod names;
