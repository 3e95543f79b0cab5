//! `larkgate migrate`: brings the store's schema to this larkgate's version and says what it
//! did. Every larkgate command migrates the store it opens, so this is for operators who
//! migrate ahead of a rollout (or check that a database is reachable and current). On
//! PostgreSQL it is safe to run from several processes at once: each step runs once, under
//! an advisory lock.

use std::io::Write;
use std::path::Path;

use larkgate_store::{PostgresStore, SqliteStore};

use crate::config::Located;

pub(crate) async fn run(
    config: Option<&Path>,
    data_dir: Option<&Path>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let located = Located::find(config, data_dir, |name| std::env::var(name).ok())?;
    let settings = located
        .config
        .store
        .postgres(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    match settings {
        None => {
            let store = SqliteStore::open(&located.data_dir)?;
            writeln!(
                out,
                "SQLite database {}: schema at version {}",
                store.path().display(),
                store.schema_version()?
            )?;
        }
        Some(settings) => {
            let store = PostgresStore::connect(&settings)?;
            let migrated = store.migrate().await.map_err(|error| {
                anyhow::anyhow!(
                    "{error}; check that PostgreSQL is running and reachable from here, and \
                     that [store] names it"
                )
            })?;
            let at = settings.describe();
            if migrated.from == migrated.to {
                writeln!(out, "{at}: schema already at version {}", migrated.to)?;
            } else {
                writeln!(
                    out,
                    "{at}: schema migrated from version {} to {}",
                    migrated.from, migrated.to
                )?;
            }
        }
    }
    Ok(())
}
