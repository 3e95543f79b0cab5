//! larkgate-upstream's integration tests.

mod federation;
mod guard;
mod hostile;
mod peer;
mod pinning;
mod python;
