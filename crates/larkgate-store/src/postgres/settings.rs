//! Where the PostgreSQL store is and how it connects: checked without connecting, so
//! `larkgate check` can say what is wrong before anything reaches the network.

use std::str::FromStr;
use std::time::Duration;

/// The PostgreSQL store's settings (`[store]` in `larkgate.toml`), already expanded (the
/// password read from the environment by the caller).
#[derive(Clone)]
pub struct PostgresSettings {
    /// `postgres://USER@HOST[:PORT]/DATABASE[?options]`, without a password.
    pub url: String,
    /// The password, if the server asks for one (never in `url`).
    pub password: Option<String>,
    /// The schema that holds larkgate's tables (created by the first migration if missing).
    pub schema: String,
    /// Connections the pool keeps at most.
    pub pool_size: usize,
    /// How long opening one connection may take.
    pub connect_timeout: Duration,
    /// How long a call waits for a free connection, and how long a statement waits for a
    /// row lock, before it is refused as busy.
    pub busy_timeout: Duration,
}

impl std::fmt::Debug for PostgresSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSettings")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("busy_timeout", &self.busy_timeout)
            .finish()
    }
}

/// The schema larkgate uses when none is named.
pub const DEFAULT_SCHEMA: &str = "public";
/// Connections the pool keeps at most, when not configured.
pub const DEFAULT_POOL_SIZE: usize = 16;

impl PostgresSettings {
    /// Settings for `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresSettings {
            url: url.into(),
            password: None,
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(5),
        }
    }

    /// Checks everything that can be checked without connecting, and answers the driver's
    /// configuration: the error says what is wrong and what to write instead.
    pub fn validate(&self) -> Result<tokio_postgres::Config, String> {
        let Some(rest) = self
            .url
            .strip_prefix("postgres://")
            .or_else(|| self.url.strip_prefix("postgresql://"))
        else {
            return Err(
                "store.url must be a PostgreSQL URL: postgres://USER@HOST:PORT/DATABASE".into(),
            );
        };
        // A password in the URL would sit in the configuration file; the store takes it from
        // `password` (which expands `${VAR}`) instead. The URL is not echoed back: it has one.
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        if authority
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.contains(':'))
        {
            return Err(
                "store.url holds a password: remove it from the URL and set \
                 store.password = \"${VARIABLE}\" to read it from the environment"
                    .into(),
            );
        }
        let mut config = tokio_postgres::Config::from_str(&self.url)
            .map_err(|e| format!("store.url is not a PostgreSQL URL larkgate can use: {e}"))?;
        if config.get_password().is_some() {
            return Err(
                "store.url holds a password: remove it from the URL and set \
                 store.password = \"${VARIABLE}\" to read it from the environment"
                    .into(),
            );
        }
        if config.get_hosts().is_empty() {
            return Err("store.url names no host: postgres://USER@HOST:PORT/DATABASE".into());
        }
        if config.get_user().is_none() {
            return Err("store.url names no user: postgres://USER@HOST:PORT/DATABASE".into());
        }
        if config.get_dbname().is_none() {
            return Err("store.url names no database: postgres://USER@HOST:PORT/DATABASE".into());
        }
        if !matches!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable | tokio_postgres::config::SslMode::Prefer
        ) {
            return Err("store.url asks for TLS (sslmode), which larkgate does not \
                 speak to PostgreSQL yet: reach the database over a private network, a \
                 Unix socket or a TLS tunnel, and drop sslmode"
                .into());
        }
        if config.get_options().is_some() {
            return Err(
                "store.url sets `options`, which larkgate sets itself (the schema and \
                 its timeouts): use store.schema and remove `options` from the URL"
                    .into(),
            );
        }
        if !valid_schema(&self.schema) {
            return Err(format!(
                "store.schema {:?} is not a schema name larkgate accepts: lower-case letters, \
                 digits and `_`, starting with a letter or `_`, at most 63 characters",
                self.schema
            ));
        }
        if !(1..=1024).contains(&self.pool_size) {
            return Err(format!(
                "store.pool_size must be between 1 and 1024 (got {})",
                self.pool_size
            ));
        }
        if let Some(password) = &self.password {
            config.password(password.as_bytes());
        }
        config.connect_timeout(self.connect_timeout);
        // Every connection works in the schema, and gives up waiting for a row lock as SQLite
        // gives up waiting for its write lock (reported as busy).
        config.options(format!(
            "-c search_path={} -c lock_timeout={}",
            self.schema,
            self.busy_timeout.as_millis()
        ));
        config.application_name("larkgate");
        Ok(config)
    }

    /// Where the store is, for messages: host, port, database and schema (never the
    /// password).
    pub fn describe(&self) -> String {
        match tokio_postgres::Config::from_str(&self.url) {
            Ok(config) => {
                let host = match config.get_hosts().first() {
                    Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
                    Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
                    None => "?".to_owned(),
                };
                let port = config.get_ports().first().copied().unwrap_or(5432);
                format!(
                    "PostgreSQL database {:?} at {host}:{port}, schema {:?}",
                    config.get_dbname().unwrap_or("?"),
                    self.schema
                )
            }
            Err(_) => "PostgreSQL (an unreadable URL)".to_owned(),
        }
    }
}

/// A schema name larkgate writes into SQL unquoted: `[a-z_][a-z0-9_]{0,62}`.
pub(crate) fn valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && name.len() <= 63
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str) -> Result<(), String> {
        PostgresSettings::new(url).validate().map(drop)
    }

    #[test]
    fn a_plain_url_is_accepted() {
        check("postgres://larkgate@db.internal:5432/larkgate").unwrap();
        check("postgresql://larkgate@127.0.0.1/test?connect_timeout=3").unwrap();
    }

    #[test]
    fn hostile_and_mistaken_urls_are_refused_without_echoing_a_secret() {
        let cases = [
            ("mysql://u@h/db", "must be a PostgreSQL URL"),
            ("postgres://u:hunter2@h/db", "holds a password"),
            ("postgres://u:@h/db", "holds a password"),
            ("postgres://u@h/db?password=hunter2", "holds a password"),
            ("postgres://u@h/db?sslmode=require", "TLS"),
            (
                "postgres://u@h/db?options=-c%20search_path%3Devil",
                "options",
            ),
            ("postgres://h/db", "no user"),
            ("postgres://u@h", "no database"),
            ("postgres://u@h:notaport/db", "not a PostgreSQL URL"),
        ];
        for (url, expected) in cases {
            let error = check(url).unwrap_err();
            assert!(error.contains(expected), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
    }

    #[test]
    fn schema_names_are_identifiers_written_unquoted() {
        for good in ["public", "larkgate", "_x", "t1_2"] {
            assert!(valid_schema(good), "{good}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "Public",
            "1abc",
            "a-b",
            "a;drop",
            "a b",
            "\"q\"",
            long.as_str(),
        ] {
            assert!(!valid_schema(bad), "{bad}");
        }
        let mut settings = PostgresSettings::new("postgres://u@h/db");
        settings.schema = "x; DROP TABLE kv".into();
        assert!(settings.validate().unwrap_err().contains("store.schema"));
    }

    #[test]
    fn the_debug_form_hides_the_password() {
        let mut settings = PostgresSettings::new("postgres://u@h/db");
        settings.password = Some("hunter2".into());
        assert!(!format!("{settings:?}").contains("hunter2"));
        assert_eq!(
            settings.describe(),
            "PostgreSQL database \"db\" at h:5432, schema \"public\""
        );
    }
}
