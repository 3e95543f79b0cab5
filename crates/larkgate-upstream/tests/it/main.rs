//! larkgate-upstream's integration tests.

mod config;
mod federation;
mod guard;
mod hostile;
mod oauth;
mod peer;
mod pinning;
mod python;
