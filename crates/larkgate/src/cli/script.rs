//! `larkgate script ...`: drafts and published versions.
//!
//! A draft belongs to its author (`author` role, or `admin`); `publish` needs `publisher` (or
//! `admin`), captures the draft *author's* roles in the same transaction, and records the
//! publisher. Both check that the script parses and has a valid `main` first.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use larkgate_platform::audit::{AuditEntry, AuditSink};
use larkgate_platform::platform::now_ms;
use larkgate_platform::policy::{ROLE_ADMIN, ROLE_AUTHOR, ROLE_PUBLISHER};
use larkgate_store::{AuditKind, Store};
use sha2::{Digest, Sha256};

use super::context::Context;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Save FILE as the draft NAME (yours; checked before it is saved).
    Save {
        /// The script's name: lowercase letters, digits and `_`.
        name: String,
        /// The Starlark file.
        file: PathBuf,
    },
    /// Publish the draft NAME as its next version.
    Publish {
        /// The script's name.
        name: String,
    },
    /// List drafts and published scripts.
    List,
    /// Show every published version of NAME.
    History {
        /// The script's name.
        name: String,
    },
}

/// The SHA-256 (hex) of a script's source.
pub(crate) fn source_hash(source: &str) -> String {
    hex::encode(Sha256::digest(source.as_bytes()))
}

/// Parses a script and reads its entry point, or says what is wrong.
pub(crate) fn check(name: &str, source: &str) -> anyhow::Result<larkgate_script::EntryPoint> {
    let ast = larkgate_script::parse(&format!("{name}.star"), source)?;
    Ok(larkgate_script::entry_point(&ast)?)
}

fn require_any(context: &Context, roles: &[&str], what: &str) -> anyhow::Result<()> {
    if !roles.iter().any(|r| context.actor_has(r)) {
        bail!(
            "{} may not {what}: that needs the {} role",
            context.actor.id,
            roles[0]
        );
    }
    Ok(())
}

pub(crate) async fn run(
    command: Command,
    context: &Context,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        Command::Save { name, file } => {
            if context.actor.id == super::context::OPERATOR {
                bail!(
                    "a published script runs with its author's roles, and the built-in operator \
                     has none to capture: save drafts as a registered author, \
                     `larkgate --as NAME script save ...`"
                );
            }
            require_any(context, &[ROLE_AUTHOR, ROLE_ADMIN], "save drafts")?;
            context
                .platform
                .registry()
                .check_alias(&name)
                .map_err(|why| anyhow::anyhow!("{name:?} is not a script name: {why}"))?;
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let entry = check(&name, &source)?;
            context
                .store
                .save_draft(&name, &source, &context.actor.id, now_ms())
                .await?;
            writeln!(
                out,
                "saved draft {name} ({})",
                entry.input.signature("main", "any")
            )?;
        }
        Command::Publish { name } => {
            require_any(context, &[ROLE_PUBLISHER, ROLE_ADMIN], "publish scripts")?;
            let draft = context
                .store
                .draft(&name)
                .await?
                .with_context(|| format!("there is no draft named {name:?}"))?;
            check(&name, &draft.source)?;
            let hash = source_hash(&draft.source);
            let version = context
                .store
                .publish(&name, &draft.source, &hash, &context.actor.id, now_ms())
                .await?;
            context.audit.append(AuditEntry {
                kind: Some(AuditKind::Event),
                principal: context.actor.id.clone(),
                tool: Some(format!("script__{name}")),
                code: Some("published".into()),
                detail: Some(format!(
                    "published {name} version {} by {} with roles [{}], hash {hash}",
                    version.version,
                    version.author,
                    version.author_roles.join(",")
                )),
                ..Default::default()
            })?;
            writeln!(
                out,
                "published {name} version {}: runs as script:{name} with {}'s roles [{}]",
                version.version,
                version.author,
                version.author_roles.join(",")
            )?;
        }
        Command::List => {
            for draft in context.store.drafts().await? {
                writeln!(out, "draft      {:<24} by {}", draft.name, draft.author)?;
            }
            for version in context.store.latest_versions().await? {
                writeln!(
                    out,
                    "published  {:<24} v{} by {}, published by {}",
                    version.name, version.version, version.author, version.publisher
                )?;
            }
        }
        Command::History { name } => {
            let versions = context.store.versions(&name).await?;
            if versions.is_empty() {
                bail!("{name:?} has no published versions");
            }
            for v in versions {
                writeln!(
                    out,
                    "v{:<4} {}  by {} (roles [{}]), published by {}  sha256 {}",
                    v.version,
                    larkgate_platform::capabilities::rfc3339_millis(
                        std::time::UNIX_EPOCH
                            + std::time::Duration::from_millis(v.published_at_ms.max(0) as u64)
                    ),
                    v.author,
                    v.author_roles.join(","),
                    v.publisher,
                    &v.hash[..16.min(v.hash.len())]
                )?;
            }
        }
    }
    Ok(())
}
