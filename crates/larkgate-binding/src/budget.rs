//! The running account of one conversion against its [`Limits`].
//!
//! Every conversion (JSON, Starlark, handler output, validation) walks its input depth first and
//! charges a budget: one node for the root, then — *before* a container's storage is allocated —
//! one node for each of its children, and the bytes of each string or key before it is copied.
//! A hostile value therefore fails after at most `max_nodes` steps and never makes us allocate
//! more than its limits allow, however large or self-sharing the source is.

use crate::{Error, LimitExceeded, Limits, Result};

#[derive(Debug)]
pub(crate) struct Budget {
    limits: Limits,
    nodes: usize,
    bytes: usize,
}

impl Budget {
    /// A budget with the root value already charged (every limit is at least 1, so it fits).
    pub(crate) fn new(limits: Limits) -> Self {
        Budget {
            limits,
            nodes: 1,
            bytes: 0,
        }
    }

    /// Checks that a container at `depth` (the root container is 1) is allowed.
    #[inline]
    pub(crate) fn depth(&self, depth: usize) -> Result<()> {
        if depth > self.limits.max_depth() {
            return Err(Error::limit(LimitExceeded::Depth {
                max: self.limits.max_depth(),
            }));
        }
        Ok(())
    }

    /// Charges `count` values; call it before allocating room for them.
    #[inline]
    pub(crate) fn nodes(&mut self, count: usize) -> Result<()> {
        match self.nodes.checked_add(count) {
            Some(total) if total <= self.limits.max_nodes() => {
                self.nodes = total;
                Ok(())
            }
            _ => Err(Error::limit(LimitExceeded::Nodes {
                max: self.limits.max_nodes(),
            })),
        }
    }

    /// Charges `count` UTF-8 bytes of a string or key; call it before copying them.
    #[inline]
    pub(crate) fn bytes(&mut self, count: usize) -> Result<()> {
        match self.bytes.checked_add(count) {
            Some(total) if total <= self.limits.max_bytes() => {
                self.bytes = total;
                Ok(())
            }
            _ => Err(Error::limit(LimitExceeded::Bytes {
                max: self.limits.max_bytes(),
            })),
        }
    }
}
