//! larkgate-upstream's integration tests.

mod config;
mod federation;
mod guard;
mod hostile;
mod peer;
mod pinning;
mod python;
