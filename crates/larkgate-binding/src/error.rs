//! The binding layer's one error type.
//!
//! Every failure falls into one of four classes, matchable by variant (or by [`ErrorKind`]):
//!
//! | class | meaning | typical refusal upstream |
//! | --- | --- | --- |
//! | [`Error::InvalidPlan`] | a Rust type cannot form a restricted plan (found at registration) | start-up fails |
//! | [`Error::InvalidArguments`] | arguments do not fit a tool's input shape | `invalid_arguments` |
//! | [`Error::UnsupportedValue`] | a value outside the allowed matrix (NaN, a big int, a function, ...) | `invalid_arguments` in, `limit_exceeded`/`internal` out |
//! | [`Error::ValueLimit`] | a value deeper, larger or longer than its [`Limits`](crate::Limits) | `invalid_arguments` in, `limit_exceeded` out |
//!
//! Messages are written for the person who must act on them: a script author or an operator.
//! They name the offending element by path (`$.items[3].price`) and say what to do.

use std::fmt;

/// The class of an [`Error`], for callers that map errors to envelopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// See [`Error::InvalidPlan`].
    InvalidPlan,
    /// See [`Error::InvalidArguments`].
    InvalidArguments,
    /// See [`Error::UnsupportedValue`].
    UnsupportedValue,
    /// See [`Error::ValueLimit`].
    ValueLimit,
}

/// Which limit a value exceeded, with the configured maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitExceeded {
    /// Containers nested deeper than `max_depth`.
    Depth {
        /// The configured maximum.
        max: usize,
    },
    /// More values than `max_nodes`.
    Nodes {
        /// The configured maximum.
        max: usize,
    },
    /// More UTF-8 bytes of strings and keys than `max_bytes`.
    Bytes {
        /// The configured maximum.
        max: usize,
    },
}

impl LimitExceeded {
    /// The configuration name of the limit (`max_depth`, `max_nodes`, `max_bytes`).
    pub fn name(&self) -> &'static str {
        match self {
            LimitExceeded::Depth { .. } => "max_depth",
            LimitExceeded::Nodes { .. } => "max_nodes",
            LimitExceeded::Bytes { .. } => "max_bytes",
        }
    }
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitExceeded::Depth { max } => {
                write!(f, "containers are nested deeper than max_depth = {max}")
            }
            LimitExceeded::Nodes { max } => {
                write!(f, "the value has more than max_nodes = {max} elements")
            }
            LimitExceeded::Bytes { max } => write!(
                f,
                "strings and keys hold more than max_bytes = {max} bytes of UTF-8"
            ),
        }
    }
}

/// One step of a [`Path`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// A list element.
    Index(usize),
    /// A map entry or struct field.
    Key(String),
}

/// Where in a value an error was found, rendered like `$.items[3].price`.
///
/// Paths are built while an error unwinds (each container adds its own step), so a successful
/// conversion pays nothing for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path {
    /// Steps from the innermost outwards; rendering reverses them.
    reversed: Vec<Segment>,
}

impl Path {
    /// The root of the value, `$`.
    pub fn root() -> Self {
        Self::default()
    }

    /// The steps from the root to the element.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.reversed.iter().rev()
    }

    pub(crate) fn push_outer(&mut self, segment: Segment) {
        self.reversed.push(segment);
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for segment in self.segments() {
            match segment {
                Segment::Index(i) => write!(f, "[{i}]")?,
                Segment::Key(k) if crate::valid_identifier(k) => write!(f, ".{k}")?,
                // Keys that are not identifiers are quoted, so the path stays unambiguous.
                Segment::Key(k) => write!(f, "[{}]", serde_json::Value::from(k.as_str()))?,
            }
        }
        Ok(())
    }
}

/// A binding failure. See the module documentation for the four classes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// A Rust type cannot form a restricted binding plan. The message names the type and field.
    #[error("invalid binding plan: {0}")]
    InvalidPlan(String),
    /// Arguments rejected against a tool's input shape. The message is complete as it stands.
    #[error("{0}")]
    InvalidArguments(String),
    /// A value outside the supported matrix.
    #[error("unsupported value at {path}: {reason}")]
    UnsupportedValue {
        /// Where the value is.
        path: Path,
        /// What is wrong and what to do instead.
        reason: String,
    },
    /// A value exceeding its limits.
    #[error("value limit exceeded at {path}: {limit}")]
    ValueLimit {
        /// The container at which the budget ran out.
        path: Path,
        /// Which limit, and its configured maximum.
        limit: LimitExceeded,
    },
}

impl Error {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidPlan(_) => ErrorKind::InvalidPlan,
            Error::InvalidArguments(_) => ErrorKind::InvalidArguments,
            Error::UnsupportedValue { .. } => ErrorKind::UnsupportedValue,
            Error::ValueLimit { .. } => ErrorKind::ValueLimit,
        }
    }

    pub(crate) fn unsupported(reason: impl Into<String>) -> Self {
        Error::UnsupportedValue {
            path: Path::root(),
            reason: reason.into(),
        }
    }

    pub(crate) fn limit(limit: LimitExceeded) -> Self {
        Error::ValueLimit {
            path: Path::root(),
            limit,
        }
    }

    /// Adds the step `segment` in front of this error's path, as the error leaves a container.
    pub(crate) fn within(mut self, segment: impl FnOnce() -> Segment) -> Self {
        match &mut self {
            Error::UnsupportedValue { path, .. } | Error::ValueLimit { path, .. } => {
                path.push_outer(segment())
            }
            Error::InvalidPlan(_) | Error::InvalidArguments(_) => {}
        }
        self
    }

    pub(crate) fn at_index(self, index: usize) -> Self {
        self.within(|| Segment::Index(index))
    }

    pub(crate) fn at_key(self, key: &str) -> Self {
        self.within(|| Segment::Key(key.to_owned()))
    }
}

/// The binding layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
