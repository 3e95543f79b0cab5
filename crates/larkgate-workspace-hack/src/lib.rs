//! No code: this crate exists for its `Cargo.toml`, which turns on in the builds of larkgate's
//! binaries the features that its test build turns on in third-party crates (see there why).
