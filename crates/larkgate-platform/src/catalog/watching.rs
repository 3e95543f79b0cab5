//! Subscriptions to federated resources: what a caller subscribed to, and the updates of it
//! in larkgate's URIs.
//!
//! A subscription crosses the pipeline as a read of its URI does (the same policy patterns,
//! rate limit and audit, see [`crate::Platform::subscribe`]); the upstream that listed the
//! resource holds it ([`CatalogReader::subscribe`](super::CatalogReader::subscribe)). What
//! comes back is only ever a URI saying "read me again": each read still crosses the pipeline.
//!
//! ## Threat model
//!
//! The upstream chooses the URIs it says were updated. One is passed on only when it is the
//! subscribed URI, or one under it (the protocol lets a server tell of a sub-resource): the
//! subscribed URI followed by `/` and more, with no `.` or `..` segment in the rest, and no
//! longer than [`super::MAX_URI_BYTES`]. It is passed on in larkgate's form of the same
//! upstream (`larkgate://<alias>/...`), so it can name no other upstream's resource; whoever
//! relays it still asks the policy whether the caller may read it. A flood is bounded by the
//! channel it comes on: a listener that falls behind hears one update of the subscribed URI
//! for everything it missed.

use std::sync::{Arc, Mutex};

use super::{MAX_URI_BYTES, resource_uri};

/// A subscription to one upstream resource's updates, as the upstream holds it.
pub struct Subscription {
    /// Each URI (the upstream's own) the upstream says was updated, from the moment of
    /// subscribing; when it lagged, any may have been.
    pub updates: tokio::sync::broadcast::Receiver<String>,
    /// Held while subscribed: when the last holder of a URI drops it, the upstream is told.
    pub held: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

/// A caller's subscription to a resource (a listed one, or one a template matches).
#[derive(Debug)]
pub struct Watched {
    alias: String,
    original: String,
    subscription: Subscription,
}

impl Watched {
    /// The subscription of upstream `alias`'s resource `original` (its own URI).
    pub fn new(alias: &str, original: &str, subscription: Subscription) -> Self {
        Watched {
            alias: alias.to_owned(),
            original: original.to_owned(),
            subscription,
        }
    }

    /// The subscribed resource's larkgate URI.
    pub fn uri(&self) -> String {
        resource_uri(&self.alias, &self.original)
    }

    /// The larkgate URI of the next update of the subscribed resource or of one under it
    /// (see the module documentation); `None` once the upstream is gone.
    pub async fn next(&mut self) -> Option<String> {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match self.subscription.updates.recv().await {
                Ok(updated) if is_under(&self.original, &updated) => {
                    return Some(resource_uri(&self.alias, &updated));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return Some(self.uri()),
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// Whether an update of `updated` is one of a subscription to `subscribed`: the same URI, or
/// one under it (`/` and more, with no `.` or `..` segment), within [`MAX_URI_BYTES`].
pub fn is_under(subscribed: &str, updated: &str) -> bool {
    if updated.len() > MAX_URI_BYTES {
        return false;
    }
    if updated == subscribed {
        return true;
    }
    let Some(rest) = updated.strip_prefix(subscribed) else {
        return false;
    };
    let rest = if subscribed.ends_with('/') {
        rest
    } else {
        match rest.strip_prefix('/') {
            Some(rest) => rest,
            None => return false,
        }
    };
    !rest.is_empty()
        && rest
            .split('/')
            .all(|segment| segment != "." && segment != "..")
}

/// Where a subscription's dispatch leaves what it subscribed to, for its caller to hold
/// ([`crate::pipeline::CallRequest::subscribe`]).
#[derive(Clone, Debug, Default)]
pub struct Subscribing(Arc<Mutex<Option<Watched>>>);

impl Subscribing {
    /// Leaves `watched` for the caller.
    pub fn put(&self, watched: Watched) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(watched);
    }

    /// What the dispatch left, once.
    pub fn take(&self) -> Option<Watched> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_subscribed_uri_and_those_under_it_are_updates_of_it() {
        let long = format!("file:///a/{}", "x".repeat(MAX_URI_BYTES));
        for (subscribed, updated, passed) in [
            ("file:///a", "file:///a", true),
            ("file:///a", "file:///a/b.txt", true),
            ("file:///a/", "file:///a/b/c", true),
            (
                "demo://resource/static/document/x.md",
                "demo://resource/static/document/x.md",
                true,
            ),
            // Another resource that only begins the same.
            ("file:///a", "file:///ab", false),
            ("file:///a", "file:///a.bak", false),
            ("file:///a", "file:///", false),
            ("file:///a", "file:///a/", false),
            // A way out of the subscribed one.
            ("file:///a", "file:///a/../etc/passwd", false),
            ("file:///a", "file:///a/./b", false),
            ("file:///a/", "file:///a/..", false),
            ("file:///a", "file:///a/b/../../c", false),
            // Another upstream's form, or larkgate's own.
            ("file:///a", "larkgate://other/file:///a", false),
            ("weather://stations", "weather://city/Oslo", false),
            ("file:///a", "", false),
            ("file:///a", long.as_str(), false),
        ] {
            assert_eq!(
                is_under(subscribed, updated),
                passed,
                "{subscribed} then {updated}"
            );
        }
    }

    #[tokio::test]
    async fn updates_come_in_larkgate_s_uris_and_a_lagged_listener_hears_the_subscribed_one() {
        let (sender, updates) = tokio::sync::broadcast::channel(2);
        let subscription = Subscription {
            updates,
            held: Box::new(()),
        };
        let mut watched = Watched::new("docs", "file:///a", subscription);
        assert_eq!(watched.uri(), "larkgate://docs/file:///a");
        sender.send("file:///b".to_owned()).unwrap();
        sender.send("file:///a/c".to_owned()).unwrap();
        assert_eq!(
            watched.next().await.as_deref(),
            Some("larkgate://docs/file:///a/c")
        );
        for n in 0..5 {
            sender.send(format!("file:///a/{n}")).unwrap();
        }
        assert_eq!(
            watched.next().await.as_deref(),
            Some("larkgate://docs/file:///a")
        );
        assert_eq!(
            watched.next().await.as_deref(),
            Some("larkgate://docs/file:///a/3")
        );
        assert_eq!(
            watched.next().await.as_deref(),
            Some("larkgate://docs/file:///a/4")
        );
        drop(sender);
        assert_eq!(watched.next().await, None);
    }
}
