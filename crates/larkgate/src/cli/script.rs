//! `larkgate script ...`: drafts and published versions, through the same service as the
//! `script_*` MCP tools (see `crate::scripting`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use larkgate_platform::capabilities::rfc3339_from_ms;

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
    /// Publish the draft NAME as its next version, showing the diff from the previous one and
    /// what the newest review run of this exact source would have written.
    Publish {
        /// The script's name.
        name: String,
        /// Show the diff and the intended writes only; publish nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List drafts and published scripts.
    List,
    /// Show every published version of NAME.
    History {
        /// The script's name.
        name: String,
    },
}

impl Command {
    /// Whether it only reads the store: it then works beside a running `serve`.
    pub(crate) fn reads_only(&self) -> bool {
        matches!(self, Command::List | Command::History { .. })
    }
}

/// The commands that only read ([`Command::reads_only`]), on `store`.
pub(crate) async fn read(
    command: Command,
    store: &dyn larkgate_store::Store,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        Command::List => {
            for draft in store.drafts().await? {
                writeln!(out, "draft      {:<24} by {}", draft.name, draft.author)?;
            }
            for version in store.latest_versions().await? {
                writeln!(
                    out,
                    "published  {:<24} v{} by {}, published by {}",
                    version.name, version.version, version.author, version.publisher
                )?;
            }
        }
        Command::History { name } => {
            let versions = store.versions(&name).await?;
            if versions.is_empty() {
                bail!("{name:?} has no published versions");
            }
            for v in versions {
                writeln!(
                    out,
                    "v{:<4} {}  by {} (roles [{}]), published by {}  sha256 {}",
                    v.version,
                    rfc3339_from_ms(v.published_at_ms),
                    v.author,
                    v.author_roles.join(","),
                    v.publisher,
                    &v.hash[..16.min(v.hash.len())]
                )?;
            }
        }
        Command::Save { .. } | Command::Publish { .. } => {
            bail!("`script save` and `script publish` write: only `list` and `history` only read")
        }
    }
    Ok(())
}

pub(crate) async fn run(
    command: Command,
    context: &Context,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scripts = &context.scripts;
    match command {
        Command::Save { name, file } => {
            if context.actor.id == super::context::OPERATOR {
                bail!(
                    "a published script runs with its author's roles, and the built-in operator \
                     has none to capture: save drafts as a registered author, \
                     `larkgate --as NAME script save ...`"
                );
            }
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let saved = scripts.save_draft(&context.actor, &name, &source).await?;
            writeln!(out, "saved draft {name} ({})", saved.signature)?;
            for warning in &saved.warnings {
                eprintln!("warning: {warning}");
            }
        }
        Command::Publish {
            name,
            dry_run: true,
        } => {
            let preview = scripts.publish_preview(&context.actor, &name).await?;
            show_preview(&preview, out)?;
            writeln!(
                out,
                "would publish {name} version {}: runs as script:{name} with {}'s roles as they \
                 are then (nothing published: --dry-run)",
                preview.previous_version.map_or(1, |v| v + 1),
                preview.author,
            )?;
        }
        Command::Publish {
            name,
            dry_run: false,
        } => {
            let (version, preview) = scripts.publish(&context.actor, &name).await?;
            show_preview(&preview, out)?;
            writeln!(
                out,
                "published {name} version {}: runs as script:{name} with {}'s roles [{}]",
                version.version,
                version.author,
                version.author_roles.join(",")
            )?;
        }
        Command::List | Command::History { .. } => {
            read(command, context.store.as_ref(), out).await?;
        }
    }
    Ok(())
}

/// What publishing changes, as a publisher reads it: the diff from the previous version and
/// the review run's intended writes.
fn show_preview(
    preview: &larkgate_scripts::PublishPreview,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let name = &preview.name;
    match (&preview.previous_version, &preview.diff) {
        (Some(previous), Some(diff)) if diff.is_empty() => {
            writeln!(out, "the source is the same as version {previous}")?;
        }
        (Some(previous), Some(diff)) => {
            writeln!(out, "changes from version {previous}:")?;
            write!(out, "{diff}")?;
        }
        _ => writeln!(out, "a first version: nothing published before it")?,
    }
    match &preview.review {
        Some(review) => {
            let count = review.intended_writes.len();
            writeln!(
                out,
                "reviewed by run {} as {}: {count} intended write{}{}",
                review.run_id,
                review.principal,
                if count == 1 { "" } else { "s" },
                if count == 0 { "" } else { ":" }
            )?;
            for (i, write) in review.intended_writes.iter().enumerate() {
                writeln!(out, "  {}. {}", i + 1, write.call_text())?;
            }
        }
        None => writeln!(
            out,
            "not reviewed: no review run of this exact source succeeded \
             (larkgate run --draft {name} --review shows what it would write)"
        )?,
    }
    if preview.pins.is_empty() {
        writeln!(out, "upstream tools: none")?;
    } else {
        let pinned: Vec<String> = preview
            .pins
            .iter()
            .map(|p| format!("{} (sha256 {})", p.tool, &p.hash[..12.min(p.hash.len())]))
            .collect();
        writeln!(
            out,
            "upstream tools: {} (its runs may call no other; it is suspended while one of \
             these waits for review)",
            pinned.join(", ")
        )?;
    }
    Ok(())
}
