//! Connecting to an upstream as its configuration says: a command-launched server started and
//! its handshake awaited, or an HTTP server behind the strict URL guard with this upstream's
//! allow-list (refusing larkgate's own `listen` address), header secrets read from the
//! environment, and for an OAuth upstream the tokens sealed in the store ([`crate::oauth`]).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::client::{UpstreamClient, UpstreamError};
use crate::config::{Grant, UpstreamConfig};
use crate::credentials::{CredentialError, CredentialKey, SealedCredentials};
use crate::guard::{Resolve, UrlGuard};

impl UpstreamConfig {
    /// Connects as larkgate does: header secrets from the environment, the strict guard with
    /// this upstream's allow-list, refusing larkgate's own `listen` address; for an OAuth
    /// upstream, the tokens sealed in `store` (see [`UpstreamConfig::authorize`]).
    pub async fn connect(
        &self,
        listen: Option<SocketAddr>,
        resolver: Arc<dyn Resolve>,
        store: &Arc<dyn larkgate_store::Store>,
    ) -> Result<UpstreamClient, String> {
        let key = match self.oauth {
            Some(_) => CredentialKey::from_environment().map(Arc::new),
            None => Err(CredentialError::NoKey),
        };
        self.connect_keyed(listen, resolver, store, key).await
    }

    /// [`UpstreamConfig::connect`] with the credential key given rather than read from the
    /// environment.
    pub async fn connect_keyed(
        &self,
        listen: Option<SocketAddr>,
        resolver: Arc<dyn Resolve>,
        store: &Arc<dyn larkgate_store::Store>,
        key: Result<Arc<CredentialKey>, CredentialError>,
    ) -> Result<UpstreamClient, String> {
        if self.is_command() {
            let target = self.command_target(|name| std::env::var(name).ok())?;
            let launcher = crate::command::Launcher::current_exe()
                .map_err(|e| format!("larkgate's own executable cannot be found: {e}"))?;
            let limits = self.limits();
            let started = tokio::time::timeout(
                limits.start_timeout,
                UpstreamClient::connect_command(&target, &launcher, self.revisions, limits),
            )
            .await
            .map_err(|_| {
                format!(
                    "the server did not complete the MCP handshake within {} ms of starting \
                     (limits.start_timeout_ms)",
                    limits.start_timeout.as_millis()
                )
            })?;
            return started
                .map(|client| client.speaking_for(&self.alias))
                .map_err(down_cause);
        }
        let endpoint = self.endpoint(|name| std::env::var(name).ok())?;
        let guard = Arc::new(self.guard(listen)?);
        if self.oauth.is_some() {
            let manager = self
                .authorize(Arc::clone(&guard), Arc::clone(&resolver), store, key)
                .await?;
            return UpstreamClient::connect_authorized(&endpoint, guard, resolver, manager)
                .await
                .map(|client| client.speaking_for(&self.alias))
                .map_err(|error| {
                    if error.is_unauthorized() {
                        format!(
                            "the server answered 401 Unauthorized to larkgate's OAuth token, which \
                         could not be refreshed: an operator signs in again with `larkgate \
                         upstream login {}`",
                            self.alias
                        )
                    } else {
                        down_cause(error)
                    }
                });
        }
        UpstreamClient::connect(&endpoint, guard, resolver)
            .await
            .map(|client| client.speaking_for(&self.alias))
            .map_err(down_cause)
    }

    /// The OAuth client of this upstream: its guard, its resolver.
    pub fn oauth_http(
        &self,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
    ) -> crate::oauth::GuardedOAuthHttp {
        crate::oauth::GuardedOAuthHttp::new(guard, resolver, self.limits().connect_timeout)
    }

    /// This OAuth upstream's credentials in `store`, sealed with the operator's `key` (its
    /// absence is the cause, in words that say how to give one).
    pub fn sealed_credentials(
        &self,
        store: &Arc<dyn larkgate_store::Store>,
        key: Result<Arc<CredentialKey>, CredentialError>,
    ) -> Result<SealedCredentials, String> {
        let key = key.map_err(|e| e.to_string())?;
        Ok(SealedCredentials::new(Arc::clone(store), &self.alias, key))
    }

    /// The authorization an OAuth upstream's requests carry: the tokens an earlier
    /// `larkgate upstream login` stored, or, for a machine account, new ones from the client
    /// credentials grant. Each cause says what to do: no credential key, nobody signed in.
    pub async fn authorize(
        &self,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        store: &Arc<dyn larkgate_store::Store>,
        key: Result<Arc<CredentialKey>, CredentialError>,
    ) -> Result<rmcp::transport::auth::AuthorizationManager, String> {
        let Some(oauth) = &self.oauth else {
            return Err(format!("upstream {:?} does not use OAuth", self.alias));
        };
        let url = self.url.clone().unwrap_or_default();
        let credentials = self.sealed_credentials(store, key)?;
        let http = self.oauth_http(guard, resolver);
        match oauth.grant {
            Grant::ClientCredentials => {
                let secret = self.client_secret(|name| std::env::var(name).ok())?;
                let (Some(id), Some(secret)) = (&oauth.client_id, secret) else {
                    return Err(format!(
                        "upstream {:?}: the client credentials grant needs oauth.client_id \
                         and oauth.client_secret",
                        self.alias
                    ));
                };
                crate::oauth::client_credentials(
                    http,
                    Some(credentials),
                    &url,
                    id,
                    &secret,
                    &oauth.scopes,
                )
                .await
                .map_err(|e| format!("signing in with the client credentials failed: {e}"))
            }
            Grant::AuthorizationCode => {
                let secret = self.client_secret(|name| std::env::var(name).ok())?;
                let confidential = oauth.client_id.as_deref().zip(secret.as_deref());
                crate::oauth::restore(http, credentials, &url, confidential)
                    .await
                    .map_err(|e| format!("the stored sign-in cannot be used: {e}"))?
                    .ok_or_else(|| {
                        format!(
                            "nobody has signed in to it yet: an operator runs `larkgate \
                             upstream login {}`",
                            self.alias
                        )
                    })
            }
        }
    }
}

/// Why connecting failed, as an upstream's down cause: the cause itself for an unreachable
/// server (the words `upstream list` and callers are told), the error otherwise.
fn down_cause(error: UpstreamError) -> String {
    match error {
        UpstreamError::Unavailable(cause) => cause,
        other => other.to_string(),
    }
}
