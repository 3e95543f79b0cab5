//! `[store]`: where larkgate keeps its state. Without `url`, the embedded SQLite database in
//! the data directory (the default); with one, a PostgreSQL schema:
//!
//! ```toml
//! [store]
//! url = "postgres://larkgate@db.internal:5432/larkgate"   # no password in the URL
//! password = "${LARKGATE_DB_PASSWORD}"   # read from the environment, never from the file
//! schema = "larkgate"           # default "public"; created by the first migration
//! pool_size = 16                # connections kept at most
//! connect_timeout_ms = 5000     # opening one connection
//! busy_timeout_ms = 5000        # waiting for a free connection or a row lock
//! ```
//!
//! Everything here is checked without connecting ([`StoreConfig::postgres`]), so
//! `larkgate check` reports a mistake before anything reaches the network.

use std::time::Duration;

use larkgate_store::PostgresSettings;
use larkgate_store::postgres::settings::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA};
use serde::Deserialize;

/// `[store]`. See the module documentation.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreConfig {
    url: Option<String>,
    password: Option<String>,
    schema: Option<String>,
    pool_size: Option<usize>,
    connect_timeout_ms: Option<u64>,
    busy_timeout_ms: Option<u64>,
}

impl StoreConfig {
    /// The PostgreSQL settings (`None` for the embedded SQLite store), with the password read
    /// from the environment through `env`, checked without connecting. The error says what to
    /// write instead and never holds the password.
    pub(crate) fn postgres(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<PostgresSettings>, String> {
        let Some(url) = &self.url else {
            let set = [
                ("password", self.password.is_some()),
                ("schema", self.schema.is_some()),
                ("pool_size", self.pool_size.is_some()),
                ("connect_timeout_ms", self.connect_timeout_ms.is_some()),
                ("busy_timeout_ms", self.busy_timeout_ms.is_some()),
            ];
            if let Some((key, _)) = set.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "store.{key} is set but store.url is not: without a url larkgate keeps its \
                     state in SQLite in the data directory; set store.url = \
                     \"postgres://USER@HOST:PORT/DATABASE\" to use PostgreSQL"
                ));
            }
            return Ok(None);
        };
        let password = match &self.password {
            None => None,
            Some(reference) if !reference.contains("${") => {
                return Err(
                    "store.password must come from the environment, not the file: \
                     write store.password = \"${VARIABLE}\" and set VARIABLE"
                        .to_owned(),
                );
            }
            Some(reference) => Some(
                larkgate_upstream::config::expand(reference, &env)
                    .map_err(|e| format!("store.password: {e}"))?,
            ),
        };
        let millis = |value: Option<u64>, key: &str| -> Result<Duration, String> {
            match value.unwrap_or(5_000) {
                0 => Err(format!("store.{key} must be at least 1")),
                ms @ 1..=600_000 => Ok(Duration::from_millis(ms)),
                _ => Err(format!("store.{key} must be at most 600000 (ten minutes)")),
            }
        };
        let settings = PostgresSettings {
            url: url.clone(),
            password,
            schema: self
                .schema
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEMA.to_owned()),
            pool_size: self.pool_size.unwrap_or(DEFAULT_POOL_SIZE),
            connect_timeout: millis(self.connect_timeout_ms, "connect_timeout_ms")?,
            busy_timeout: millis(self.busy_timeout_ms, "busy_timeout_ms")?,
        };
        settings.validate()?;
        Ok(Some(settings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> StoreConfig {
        toml::from_str(text).unwrap()
    }

    fn env(name: &str) -> Option<String> {
        (name == "DB_PASSWORD").then(|| "s3cret".to_owned())
    }

    #[test]
    fn no_url_is_sqlite_and_a_url_is_postgres_with_the_password_from_the_environment() {
        assert!(parse("").postgres(env).unwrap().is_none());
        let settings = parse(
            "url = \"postgres://larkgate@db:5432/larkgate\"\npassword = \"${DB_PASSWORD}\"\n\
             schema = \"lark\"\npool_size = 4\nbusy_timeout_ms = 250\n",
        )
        .postgres(env)
        .unwrap()
        .unwrap();
        assert_eq!(settings.password.as_deref(), Some("s3cret"));
        assert_eq!(settings.schema, "lark");
        assert_eq!(settings.pool_size, 4);
        assert_eq!(settings.busy_timeout, Duration::from_millis(250));
        assert_eq!(settings.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn mistakes_are_refused_with_what_to_write_and_no_secret() {
        let cases = [
            ("password = \"${DB_PASSWORD}\"", "store.url is not"),
            (
                "url = \"postgres://u@h/db\"\npassword = \"s3cret\"",
                "must come from the environment",
            ),
            (
                "url = \"postgres://u@h/db\"\npassword = \"${NOT_SET_ANYWHERE}\"",
                "NOT_SET_ANYWHERE is not set",
            ),
            ("url = \"postgres://u:s3cret@h/db\"", "holds a password"),
            (
                "url = \"postgres://u@h/db\"\nschema = \"Bad-Name\"",
                "store.schema",
            ),
            (
                "url = \"postgres://u@h/db\"\npool_size = 0",
                "store.pool_size",
            ),
            (
                "url = \"postgres://u@h/db\"\nbusy_timeout_ms = 0",
                "store.busy_timeout_ms",
            ),
            ("url = \"sqlite:///tmp/x\"", "must be a PostgreSQL URL"),
        ];
        for (text, expected) in cases {
            let error = parse(text).postgres(env).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains("s3cret"), "{text}: {error}");
        }
        let unknown = toml::from_str::<StoreConfig>("host = \"db\"").unwrap_err();
        assert!(
            unknown.to_string().contains("unknown field `host`"),
            "{unknown}"
        );
    }
}
