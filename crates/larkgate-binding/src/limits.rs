//! Size limits on values, with one definition for every conversion.
//!
//! - **Depth** counts containers: the root container is depth 1, each container inside another
//!   adds 1, and scalars add nothing (a bare scalar has depth 0).
//! - **Nodes** are all values, containers and scalars alike; map keys are not nodes.
//! - **Bytes** are the UTF-8 bytes of all strings and map keys.
//!
//! The same definitions hold for JSON, Starlark and handler output, so a value that fits in one
//! world fits in the others. Every limit is positive: zero is refused, never read as "unlimited".

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Depth, node and byte limits for one conversion. Construct with [`Limits::new`] or take the
/// [`Default`] (64 / 100,000 / 8 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawLimits", into = "RawLimits")]
pub struct Limits {
    max_depth: usize,
    max_nodes: usize,
    max_bytes: usize,
}

impl Limits {
    /// The default maximum container depth.
    pub const DEFAULT_MAX_DEPTH: usize = 64;
    /// The default maximum number of values.
    pub const DEFAULT_MAX_NODES: usize = 100_000;
    /// The default maximum number of UTF-8 bytes in strings and keys.
    pub const DEFAULT_MAX_BYTES: usize = 8 * 1024 * 1024;

    /// Limits with the given maxima; each must be at least 1.
    pub fn new(max_depth: usize, max_nodes: usize, max_bytes: usize) -> Result<Self> {
        for (name, value) in [
            ("max_depth", max_depth),
            ("max_nodes", max_nodes),
            ("max_bytes", max_bytes),
        ] {
            if value == 0 {
                return Err(Error::InvalidArguments(format!(
                    "limit {name} must be at least 1; zero does not mean unlimited"
                )));
            }
        }
        Ok(Self {
            max_depth,
            max_nodes,
            max_bytes,
        })
    }

    /// The maximum container depth.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The maximum number of values.
    pub fn max_nodes(&self) -> usize {
        self.max_nodes
    }

    /// The maximum number of UTF-8 bytes in strings and keys.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_nodes: Self::DEFAULT_MAX_NODES,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// The serialized form of [`Limits`], checked on the way in.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default = "default_depth")]
    max_depth: usize,
    #[serde(default = "default_nodes")]
    max_nodes: usize,
    #[serde(default = "default_bytes")]
    max_bytes: usize,
}

fn default_depth() -> usize {
    Limits::DEFAULT_MAX_DEPTH
}
fn default_nodes() -> usize {
    Limits::DEFAULT_MAX_NODES
}
fn default_bytes() -> usize {
    Limits::DEFAULT_MAX_BYTES
}

impl TryFrom<RawLimits> for Limits {
    type Error = Error;
    fn try_from(raw: RawLimits) -> Result<Self> {
        Limits::new(raw.max_depth, raw.max_nodes, raw.max_bytes)
    }
}

impl From<Limits> for RawLimits {
    fn from(limits: Limits) -> Self {
        RawLimits {
            max_depth: limits.max_depth,
            max_nodes: limits.max_nodes,
            max_bytes: limits.max_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_refused_for_every_limit() {
        for (d, n, b, name) in [
            (0, 1, 1, "max_depth"),
            (1, 0, 1, "max_nodes"),
            (1, 1, 0, "max_bytes"),
        ] {
            let err = Limits::new(d, n, b).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            assert!(err.to_string().contains("zero does not mean unlimited"));
        }
    }

    #[test]
    fn deserializing_zero_is_refused_and_missing_keys_take_defaults() {
        let err = serde_json::from_str::<Limits>(r#"{"max_nodes": 0}"#).unwrap_err();
        assert!(err.to_string().contains("max_nodes"), "{err}");
        let limits: Limits = serde_json::from_str(r#"{"max_depth": 3}"#).unwrap();
        assert_eq!(limits, Limits::new(3, 100_000, 8 * 1024 * 1024).unwrap());
    }
}
