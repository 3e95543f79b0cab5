//! The console's sign-in sessions: an opaque id in an `HttpOnly`, `SameSite=Strict` cookie,
//! mapped in this process to the larkgate token that signed in (by its public id only: the
//! secret is never kept) and a CSRF token for the session's forms.
//!
//! Threat model: the cookie is the session's only credential, so it is 256 random bits, never
//! readable by a page's script (`HttpOnly`), never sent by another site's page
//! (`SameSite=Strict`), scoped to `/admin`, and `Secure` when larkgate is served over HTTPS. A
//! session is bounded in time (idle and absolute lifetimes) and the table in size (the least
//! recently used session goes first). What the session grants is decided again at every
//! request from the token it is tied to ([`larkgate_platform::tokens::verify_id`]), so a revoked
//! token, an expired one, or a principal whose roles changed loses the console at its next
//! click. Sessions live in this process: a restart signs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header;
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const COOKIE: &str = "larkgate_console";

/// How many sessions the table holds; past it, the least recently used one ends.
pub const MAX_SESSIONS: usize = 1024;
/// How long a session may sit unused.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// How long a session lasts at most.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// A message shown once, on the next page the session sees.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Flash {
    /// `ok` or `error`.
    pub kind: &'static str,
    /// What happened.
    pub text: String,
    /// A secret to show this once (a new token).
    pub secret: Option<String>,
}

impl Flash {
    /// A success.
    pub fn ok(text: impl Into<String>) -> Self {
        Flash {
            kind: "ok",
            text: text.into(),
            secret: None,
        }
    }

    /// A failure.
    pub fn error(text: impl Into<String>) -> Self {
        Flash {
            kind: "error",
            text: text.into(),
            secret: None,
        }
    }
}

/// One signed-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// The public id of the token that signed in.
    pub token_id: String,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    created: Instant,
    last_seen: Instant,
    flash: Option<Flash>,
}

/// The sessions of this process. See the module documentation.
#[derive(Debug, Default)]
pub struct Sessions {
    table: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session for the token `token_id`: its id (the cookie's value).
    pub fn create(&self, token_id: &str) -> String {
        let id = larkgate_platform::tokens::random(32);
        let now = Instant::now();
        let mut table = self.lock();
        table.retain(|_, s| live(s, now));
        if table.len() >= MAX_SESSIONS
            && let Some(oldest) = table
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(id, _)| id.clone())
        {
            table.remove(&oldest);
        }
        table.insert(
            id.clone(),
            Session {
                token_id: token_id.to_owned(),
                csrf: larkgate_platform::tokens::random(32),
                created: now,
                last_seen: now,
                flash: None,
            },
        );
        id
    }

    /// The live session `id`, marked as seen now, with its flash taken.
    pub fn visit(&self, id: &str) -> Option<(Session, Option<Flash>)> {
        let now = Instant::now();
        let mut table = self.lock();
        let session = table.get_mut(id)?;
        if !live(session, now) {
            table.remove(id);
            return None;
        }
        session.last_seen = now;
        let flash = session.flash.take();
        Some((session.clone(), flash))
    }

    /// Leaves `flash` for the session's next page.
    pub fn flash(&self, id: &str, flash: Flash) {
        if let Some(session) = self.lock().get_mut(id) {
            session.flash = Some(flash);
        }
    }

    /// Ends session `id`.
    pub fn end(&self, id: &str) {
        self.lock().remove(id);
    }
}

fn live(session: &Session, now: Instant) -> bool {
    now.duration_since(session.last_seen) < IDLE && now.duration_since(session.created) < LIFETIME
}

/// The session id the request's cookie carries, if any.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value that signs a browser in (`secure`: larkgate is served over HTTPS).
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={}{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that signs a browser out.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Whether a form's CSRF token is the session's (in constant time; a missing one is not).
pub fn csrf_matches(session: &Session, sent: Option<&str>) -> bool {
    sent.is_some_and(|sent| bool::from(sent.as_bytes().ct_eq(session.csrf.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_and_ends_when_told() {
        let sessions = Sessions::default();
        let id = sessions.create("tok123456789");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={id}; theme=dark")
                .parse()
                .unwrap(),
        );
        assert_eq!(cookie(&headers), Some(id.as_str()));
        let (session, flash) = sessions.visit(&id).unwrap();
        assert_eq!(session.token_id, "tok123456789");
        assert!(flash.is_none());
        sessions.flash(&id, Flash::ok("done"));
        assert_eq!(sessions.visit(&id).unwrap().1.unwrap().text, "done");
        assert!(
            sessions.visit(&id).unwrap().1.is_none(),
            "a flash is shown once"
        );
        sessions.end(&id);
        assert!(sessions.visit(&id).is_none());
    }

    #[test]
    fn hostile_cookies_and_csrf_tokens_find_nothing() {
        let sessions = Sessions::default();
        let id = sessions.create("tok123456789");
        let (session, _) = sessions.visit(&id).unwrap();
        for forged in ["", "x", &id[..id.len() - 1], &format!("{id}x")] {
            assert!(sessions.visit(forged).is_none(), "{forged:?}");
        }
        for (header_value, expected) in [
            (COOKIE.to_owned(), None),
            (format!("x{COOKIE}={id}"), None),
            (format!("{COOKIE}x={id}"), None),
            (format!(" {COOKIE}={id} "), Some(id.as_str())),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header::COOKIE, header_value.parse().unwrap());
            assert_eq!(cookie(&headers), expected, "{header_value:?}");
        }
        assert!(csrf_matches(&session, Some(&session.csrf)));
        let other = sessions.create("tok123456789");
        let (other, _) = sessions.visit(&other).unwrap();
        for sent in [
            None,
            Some(""),
            Some(other.csrf.as_str()),
            Some(&session.csrf[1..]),
        ] {
            assert!(!csrf_matches(&session, sent), "{sent:?}");
        }
    }

    #[test]
    fn the_table_is_bounded_and_the_least_recently_used_session_goes_first() {
        let sessions = Sessions::default();
        let first = sessions.create("a");
        let second = sessions.create("b");
        for _ in 2..MAX_SESSIONS {
            sessions.create("c");
        }
        // The first is seen again, so the second is now the least recently used.
        assert!(sessions.visit(&first).is_some());
        sessions.create("d");
        assert!(sessions.visit(&first).is_some());
        assert!(sessions.visit(&second).is_none());
        assert!(sessions.lock().len() <= MAX_SESSIONS);
    }

    #[test]
    fn the_cookie_is_http_only_same_site_strict_and_scoped() {
        let set = set_cookie("abc", false);
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        assert!(set.contains("Path=/admin") && !set.contains("Secure"));
        assert!(set_cookie("abc", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
