//! `larkgate upstream login`: a person signs in at a browser, the redirect received on a
//! loopback port of this process (RFC 8252), and the tokens sealed in the store.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::AuthError;

use super::flows::{ClientIdentity, challenge, sign_in};
use crate::guard::Resolve;

/// The longest a sign-in waits for the person at the browser.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// The most bytes read of the browser's request to the loopback redirect URI.
const MAX_CALLBACK_REQUEST: usize = 16 * 1024;

/// Signs a person in to OAuth upstream `config` and stores the tokens in `store`, sealed with
/// `key`: `larkgate upstream login`. The redirect URI is a loopback port of this process
/// (`http://127.0.0.1:PORT/callback`, RFC 8252); `show` is given the authorization URL to
/// open in a browser, and the first request to `/callback` within [`LOGIN_WAIT`] completes the
/// sign-in (its `state` and `iss` are checked by the code exchange).
pub async fn login(
    config: &crate::config::UpstreamConfig,
    listen: Option<std::net::SocketAddr>,
    resolver: Arc<dyn Resolve>,
    store: &Arc<dyn larkgate_store::Store>,
    key: Result<Arc<crate::credentials::CredentialKey>, crate::credentials::CredentialError>,
    show: impl FnOnce(&str),
) -> Result<(), String> {
    let Some(oauth) = &config.oauth else {
        return Err(format!(
            "upstream {:?} does not use OAuth: give it an [upstreams.oauth] table",
            config.alias
        ));
    };
    if oauth.grant == crate::config::Grant::ClientCredentials {
        return Err(format!(
            "upstream {:?} signs in as a machine account (grant = \"client_credentials\"): \
             larkgate asks for its tokens by itself, nobody logs in",
            config.alias
        ));
    }
    let url = config.url.clone().unwrap_or_default();
    let credentials = config.sealed_credentials(store, key)?;
    let guard = Arc::new(config.guard(listen)?);
    let http = config.oauth_http(guard, resolver);
    let receiver = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| format!("no loopback port for the redirect: {e}"))?;
    let port = receiver
        .local_addr()
        .map_err(|e| format!("no loopback port for the redirect: {e}"))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let identity = match &oauth.client_id {
        Some(client_id) => ClientIdentity::Registered {
            client_id: client_id.clone(),
            client_secret: config.client_secret(|name| std::env::var(name).ok())?,
        },
        None => ClientIdentity::Dynamic {
            client_name: "larkgate".to_owned(),
            metadata_url: oauth.client_metadata_url.clone(),
        },
    };
    let challenge = challenge(&http, &url).await.map_err(|e| e.to_string())?;
    let consent = |authorization_url: String| async move {
        show(&authorization_url);
        tokio::time::timeout(LOGIN_WAIT, callback(&receiver, port))
            .await
            .map_err(|_| {
                AuthError::AuthorizationFailed(format!(
                    "nobody completed the sign-in within {} seconds",
                    LOGIN_WAIT.as_secs()
                ))
            })?
    };
    sign_in(
        http,
        Some(credentials),
        &url,
        &redirect_uri,
        &identity,
        &oauth.scopes,
        challenge.as_deref(),
        consent,
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("signing in to {:?} failed: {e}", config.alias))
}

/// Waits for the browser's request to `/callback` on `receiver` and answers it; returns the
/// URL it asked for. Other requests (a browser's `favicon.ico`) are answered 404 and waited past;
/// a request over [`MAX_CALLBACK_REQUEST`] bytes or without a request line is dropped.
async fn callback(receiver: &tokio::net::TcpListener, port: u16) -> Result<String, AuthError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let (mut stream, _) = receiver
            .accept()
            .await
            .map_err(|e| AuthError::AuthorizationFailed(e.to_string()))?;
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        let head_read = tokio::time::timeout(Duration::from_secs(10), async {
            while !request.windows(4).any(|w| w == b"\r\n\r\n")
                && request.len() < MAX_CALLBACK_REQUEST
            {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
        })
        .await;
        if head_read.is_err() {
            continue;
        }
        let head = String::from_utf8_lossy(&request);
        let target = head
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        if !target.starts_with("/callback?") {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let page = "larkgate: the sign-in reached larkgate; you may close this page.\n";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        return Ok(format!("http://127.0.0.1:{port}{target}"));
    }
}
