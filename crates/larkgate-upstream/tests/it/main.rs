//! larkgate-upstream's integration tests.

mod federation;
mod guard;
mod peer;
mod pinning;
mod python;
