//! larkgate-upstream's integration tests.

mod guard;
