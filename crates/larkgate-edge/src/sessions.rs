//! 2025-11-25 sessions: one registry of who opened each session, with caps per principal and in
//! total, kept in step with rmcp's own sessions.
//!
//! [`RegisteredSessions`] is the session manager rmcp's Streamable HTTP service uses: rmcp's
//! [`LocalSessionManager`] (which expires a session idle for the configured time), with every
//! session entered in the [`Registry`] as it is created, under the principal the request was
//! authenticated as, and removed whenever rmcp closes it — a client's `DELETE`, idle expiry,
//! a failed handshake or shutdown all end in `close_session`. So the registry, the
//! `larkgate_active_sessions` metric and rmcp's map hold the same sessions.
//!
//! ## Across replicas
//!
//! When the store is shared by replicas (PostgreSQL), each session is also entered in it
//! ([`larkgate_store::SessionStore::open_session`]) with its owner, and the caps count there, across
//! replicas. rmcp keeps the session's `initialize` parameters through [`SharedSessions`] (its
//! session store), and a request for a session this replica does not hold is *restored*: rmcp
//! loads the parameters, [`RegisteredSessions::restore_session`] makes a local worker for it,
//! and the handshake is replayed. The owner is checked first, by the edge and again here: a
//! session whose shared entry is missing or expired is not restored (rmcp answers 404), and one
//! owned by another principal is refused. The entry expires after the idle timeout, moved
//! forward as the session is used (at most every quarter of it, per replica, and when a replica
//! restores it: that is a use too). A replica that idles a session out locally leaves the
//! shared entry alone: the client may be using the session through another replica; only the
//! client's `DELETE` closes it everywhere. The shared entries' times are the platform's time of
//! day ([`WallClock`]), so a test moves it instead of waiting.
//!
//! ## Threat model
//!
//! Any token holder, even one with no roles, can send `initialize`; each session costs memory
//! until it expires. The caps bound that: at most [`SessionLimits::per_principal`] sessions per
//! principal and [`SessionLimits::total`] in all; one past either is refused with a JSON-RPC
//! error that says which cap and what to do ([`super::EdgeError::TooManySessions`]), and no
//! session is created. The cap is checked and the session entered under one lock, so
//! concurrent `initialize`s cannot overshoot it. A session is bound to the principal that
//! opened it: [`Registry::owner_anywhere`] is what the edge compares each request's principal
//! with, on every replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use larkgate_platform::clock::WallClock;
use larkgate_store::{NewSession, SessionCapReached, Store};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionState, SessionStore, SessionStoreError,
};

/// How many sessions may be open, and for how long one may idle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions open at once, all principals together.
    pub total: usize,
    /// Sessions one principal may have open at once.
    pub per_principal: usize,
    /// A session without a request for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            total: 1024,
            per_principal: 64,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Which cap refused a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCap {
    /// The principal's own.
    PerPrincipal(usize),
    /// All principals' together.
    Total(usize),
}

/// One open session. (Its last use is rmcp's to track: the session's worker closes it after
/// the idle timeout, and the registry follows through `close_session`.)
#[derive(Clone, Debug)]
struct Entry {
    owner: String,
    /// When (Unix ms) its shared entry's expiry was last moved by this replica.
    touched_ms: i64,
}

/// The open sessions, each with the principal that opened it.
#[derive(Debug)]
pub struct Registry {
    limits: SessionLimits,
    sessions: Mutex<HashMap<SessionId, Entry>>,
    /// The store replicas share, when they do: sessions and their caps are kept there too.
    shared: Option<Arc<dyn Store>>,
    /// The time of day the shared entries expire by.
    clock: Arc<dyn WallClock>,
}

impl Registry {
    /// An empty registry under `limits`, each session kept in `shared` too when replicas
    /// share a store, its entries expiring by `clock`.
    pub fn new(
        limits: SessionLimits,
        shared: Option<Arc<dyn Store>>,
        clock: Arc<dyn WallClock>,
    ) -> Arc<Self> {
        Arc::new(Registry {
            limits,
            sessions: Mutex::new(HashMap::new()),
            shared,
            clock,
        })
    }

    /// Unix milliseconds now, by the registry's clock.
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn quarter_ms(&self) -> i64 {
        i64::try_from((self.limits.idle_timeout / 4).as_millis()).unwrap_or(i64::MAX)
    }

    /// The store sessions are shared through, if they are.
    pub fn shared(&self) -> Option<&Arc<dyn Store>> {
        self.shared.as_ref()
    }

    /// The principal that opened `session`, whichever replica it was opened on; `None` for a
    /// session that is not open (or whose shared entry cannot be read: then it is not
    /// restored either). Moves the shared entry's expiry when this replica last did so a
    /// quarter of the idle timeout ago or more.
    pub async fn owner_anywhere(&self, session: &str) -> Option<String> {
        let Some(shared) = &self.shared else {
            return self.owner(session);
        };
        let now = self.now_ms();
        let due = {
            let mut sessions = self.lock();
            match sessions.get_mut(session) {
                Some(entry) if now.saturating_sub(entry.touched_ms) < self.quarter_ms() => {
                    return Some(entry.owner.clone());
                }
                Some(entry) => {
                    entry.touched_ms = now;
                    Some(entry.owner.clone())
                }
                None => None,
            }
        };
        if let Some(owner) = due {
            if let Err(error) = shared.touch_session(session, self.expiry()).await {
                tracing::warn!(%error, "a session's expiry could not be moved in the store");
            }
            return Some(owner);
        }
        match shared.session(session, now).await {
            Ok(found) => found.map(|s| s.owner),
            Err(error) => {
                tracing::warn!(%error, "a session could not be looked up in the store");
                None
            }
        }
    }

    /// When a session used now expires.
    fn expiry(&self) -> i64 {
        let idle = i64::try_from(self.limits.idle_timeout.as_millis()).unwrap_or(i64::MAX / 2);
        self.now_ms().saturating_add(idle)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Entry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The principal that opened `session`; `None` for a session that is not open.
    pub fn owner(&self, session: &str) -> Option<String> {
        self.lock().get(session).map(|entry| entry.owner.clone())
    }

    /// Enters `id` for `owner` if both caps allow one more.
    fn admit(&self, id: &SessionId, owner: &str) -> Result<(), SessionCap> {
        let mut sessions = self.lock();
        if sessions.len() >= self.limits.total {
            return Err(SessionCap::Total(self.limits.total));
        }
        let own = sessions.values().filter(|e| e.owner == owner).count();
        if own >= self.limits.per_principal {
            return Err(SessionCap::PerPrincipal(self.limits.per_principal));
        }
        let now = self.now_ms();
        Self::enter(&mut sessions, id, owner, now);
        Ok(())
    }

    fn enter(sessions: &mut HashMap<SessionId, Entry>, id: &SessionId, owner: &str, now_ms: i64) {
        sessions.insert(
            id.clone(),
            Entry {
                owner: owner.to_owned(),
                touched_ms: now_ms,
            },
        );
    }

    /// Enters `id` for `owner` in the shared store (where the caps count across replicas) and
    /// here.
    async fn admit_shared(
        &self,
        shared: &dyn Store,
        id: &SessionId,
        owner: &str,
    ) -> Result<Result<(), SessionCap>, larkgate_store::StoreError> {
        let refused = shared
            .open_session(NewSession {
                id: id.to_string(),
                owner: owner.to_owned(),
                now_ms: self.now_ms(),
                expires_at_ms: self.expiry(),
                per_principal: self.limits.per_principal,
                total: self.limits.total,
            })
            .await?;
        Ok(match refused {
            Some(SessionCapReached::PerPrincipal) => {
                Err(SessionCap::PerPrincipal(self.limits.per_principal))
            }
            Some(SessionCapReached::Total) => Err(SessionCap::Total(self.limits.total)),
            None => {
                let now = self.now_ms();
                Self::enter(&mut self.lock(), id, owner, now);
                Ok(())
            }
        })
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// Who is opening a session in the request being served, and what the registry answered:
/// set by the edge around each request, read by [`RegisteredSessions::create_session`].
#[derive(Debug)]
pub struct Opener {
    principal: String,
    refused: std::sync::Mutex<Option<SessionCap>>,
}

tokio::task_local! {
    static OPENER: Opener;
}

/// Serves `request` with `principal` as whoever opens a session in it; answers which cap
/// refused a session, if one did.
pub async fn opening_as<F: Future>(
    principal: String,
    request: F,
) -> (F::Output, Option<SessionCap>) {
    let opener = Opener {
        principal,
        refused: std::sync::Mutex::new(None),
    };
    OPENER
        .scope(opener, async move {
            let output = request.await;
            let refused = OPENER.with(|o| *o.refused.lock().unwrap_or_else(|p| p.into_inner()));
            (output, refused)
        })
        .await
}

/// Why a session was not created or served.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// rmcp's own session error.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// A cap is reached.
    #[error("the session cap is reached: {0:?}")]
    Capped(SessionCap),
    /// A session was to be created outside an authenticated request (fails closed).
    #[error("a session can only be opened by an authenticated request")]
    NoPrincipal,
    /// The shared store could not be reached.
    #[error("the sessions store failed: {0}")]
    Store(#[from] larkgate_store::StoreError),
}

/// rmcp's local session manager, with every session entered in a [`Registry`].
#[derive(Debug)]
pub struct RegisteredSessions {
    local: LocalSessionManager,
    registry: Arc<Registry>,
}

impl RegisteredSessions {
    /// Sessions entered in `registry`, each closed by rmcp after its idle timeout.
    pub fn new(registry: Arc<Registry>) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(registry.limits.idle_timeout);
        RegisteredSessions { local, registry }
    }
}

impl SessionManager for RegisteredSessions {
    type Error = SessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let principal = OPENER
            .try_with(|o| o.principal.clone())
            .map_err(|_| SessionError::NoPrincipal)?;
        let (id, transport) = self.local.create_session().await?;
        // Checked and entered under one lock (the store's, across replicas, when sessions are
        // shared): concurrent `initialize`s cannot overshoot a cap.
        let admitted = match self.registry.shared() {
            Some(shared) => match self
                .registry
                .admit_shared(shared.as_ref(), &id, &principal)
                .await
            {
                Ok(admitted) => admitted,
                Err(error) => {
                    drop(transport);
                    let _ = self.local.close_session(&id).await;
                    return Err(error.into());
                }
            },
            None => self.registry.admit(&id, &principal),
        };
        if let Err(cap) = admitted {
            let _ = OPENER.try_with(|o| {
                *o.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(cap);
            });
            drop(transport);
            let _ = self.local.close_session(&id).await;
            return Err(SessionError::Capped(cap));
        }
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.registry.remove(id);
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.resume(id, last_event_id).await?)
    }

    /// A session opened on another replica, continued here: only for its owner (the edge has
    /// checked already; checked again here, so that a restore without an authenticated owner
    /// fails closed), and only while its shared entry exists.
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let Some(shared) = self.registry.shared() else {
            return Ok(RestoreOutcome::NotSupported);
        };
        let principal = OPENER
            .try_with(|o| o.principal.clone())
            .map_err(|_| SessionError::NoPrincipal)?;
        let now = self.registry.now_ms();
        let owner = shared.session(&id, now).await?.map(|s| s.owner);
        if owner.as_deref() != Some(principal.as_str()) {
            return Ok(RestoreOutcome::NotSupported);
        }
        let outcome = self.local.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            Registry::enter(&mut self.registry.lock(), &id, &principal, now);
            // Continuing a session is a use of it: its shared entry expires an idle timeout
            // from now, not from its last move on another replica.
            shared.touch_session(&id, self.registry.expiry()).await?;
        }
        Ok(outcome)
    }
}

/// rmcp's session store on larkgate's store: the `initialize` parameters of each session, kept
/// with its shared entry (which [`RegisteredSessions::create_session`] made, with its owner).
/// A session without an unexpired entry loads as absent, so it is not restored.
#[derive(Debug)]
pub struct SharedSessions {
    store: Arc<dyn Store>,
    clock: Arc<dyn WallClock>,
    /// The virtual server whose sessions these are (`None`: `/mcp`'s): a session opened at one
    /// endpoint is never restored at another.
    server: Option<String>,
}

/// Where a shared session's state names the endpoint that opened it.
const SERVER_KEY: &str = "larkgate/server";

impl SharedSessions {
    /// Sessions' parameters in `store`, whose entries expire by `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn WallClock>) -> Self {
        SharedSessions {
            store,
            clock,
            server: None,
        }
    }

    /// These sessions, as the virtual server `name`'s (`/mcp/NAME`).
    pub fn of_server(mut self, name: &str) -> Self {
        self.server = Some(name.to_owned());
        self
    }
}

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(session) = self.store.session(session_id, self.clock.now_ms()).await? else {
            return Ok(None);
        };
        let Some(state) = session.state else {
            return Ok(None);
        };
        let mut state: serde_json::Value = serde_json::from_str(&state)?;
        let opened_at = state
            .as_object_mut()
            .and_then(|state| state.remove(SERVER_KEY));
        if opened_at.as_ref().and_then(serde_json::Value::as_str) != self.server.as_deref() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_value(state)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let mut state = serde_json::to_value(state)?;
        if let (Some(server), Some(fields)) = (&self.server, state.as_object_mut()) {
            fields.insert(SERVER_KEY.to_owned(), server.clone().into());
        }
        let state = state.to_string();
        self.store.save_session_state(session_id, &state).await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.store.close_session(session_id).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_sessions_never_pass_a_cap() {
        let registry = Registry::new(
            SessionLimits {
                total: 15,
                per_principal: 10,
                idle_timeout: Duration::from_secs(60),
            },
            None,
            Arc::new(larkgate_platform::clock::SystemClock),
        );
        let admitted: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..64)
                .map(|i| {
                    let registry = &registry;
                    scope.spawn(move || {
                        let id: SessionId = format!("s{i}").into();
                        let owner = if i % 2 == 0 { "ada" } else { "bob" };
                        usize::from(registry.admit(&id, owner).is_ok())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 15, "the total cap");
        let sessions = registry.lock();
        for owner in ["ada", "bob"] {
            let own = sessions.values().filter(|e| e.owner == owner).count();
            assert!(own <= 10, "{owner} has {own}");
        }
        let some = sessions.keys().next().unwrap().clone();
        drop(sessions);
        assert_eq!(
            registry.admit(&"late".into(), "ada"),
            Err(SessionCap::Total(15))
        );
        registry.remove(&some);
        assert_eq!(registry.owner(&some), None);
        assert!(registry.admit(&"late".into(), "carol").is_ok());
        assert_eq!(registry.owner("late").as_deref(), Some("carol"));
    }
}
