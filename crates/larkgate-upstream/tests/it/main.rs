//! larkgate-upstream's integration tests.

mod guard;
mod peer;
mod python;
