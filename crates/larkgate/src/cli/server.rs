//! `larkgate server add | list | remove`: virtual servers added at run time, beside the
//! configuration file's `[[servers]]`.
//!
//! They change the store, and every larkgate serving from it follows within a second (see
//! [`larkgate_platform::servers::ServerTable::follow`]): an added server answers at
//! `/mcp/NAME`, a replaced one's clients are told their lists changed, a removed one answers
//! 404. Adding and removing are for admins, and are audit events
//! ([`larkgate_platform::added_servers`]).

use std::io::Write;

use anyhow::{Result, bail};
use larkgate_platform::added_servers::tools::Entry;
use larkgate_platform::added_servers::{self as stored, ServerError};
use larkgate_platform::servers::ServerTable;

use super::context::{StoreContext, require_admin};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Add a virtual server served at /mcp/NAME: the tools, prompts and resources its
    /// patterns choose (or all of one upstream's), as a [[servers]] entry would.
    Add(AddArgs),
    /// Every virtual server: the configuration file's and those added here.
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a virtual server added with `server add`.
    Remove {
        /// Its name.
        name: String,
    },
}

/// `server add`'s arguments: the keys of a `[[servers]]` entry.
#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// Its name, one path segment: served at /mcp/NAME.
    name: String,
    /// What it is for, told to its clients as the server's instructions.
    #[arg(long)]
    description: Option<String>,
    /// The one upstream it mounts (all of that upstream's tools, prompts and resources, or
    /// those the patterns name).
    #[arg(long, value_name = "ALIAS")]
    upstream: Option<String>,
    /// A tool pattern (larkgate names, `*` for any run of characters; repeatable).
    #[arg(long = "tool", value_name = "PATTERN")]
    tools: Vec<String>,
    /// A prompt pattern (repeatable).
    #[arg(long = "prompt", value_name = "PATTERN")]
    prompts: Vec<String>,
    /// A resource pattern (larkgate URIs; repeatable).
    #[arg(long = "resource", value_name = "PATTERN")]
    resources: Vec<String>,
    /// Show the upstream's own names, without larkgate's prefixes (with --upstream only).
    #[arg(long)]
    no_prefix: bool,
    /// List find_tools and call_tool (and the pinned tools) rather than every tool.
    #[arg(long)]
    tool_search: bool,
    /// A tool pattern a searched server still lists (repeatable).
    #[arg(long = "pin", value_name = "PATTERN")]
    pinned: Vec<String>,
    /// Replace the server of this name added before.
    #[arg(long)]
    replace: bool,
}

impl Command {
    /// Carries the command out on the store, writing what it reports to `out`.
    pub(crate) async fn run(self, context: &StoreContext, out: &mut impl Write) -> Result<()> {
        let table = table(context).await?;
        match self {
            Command::Add(args) => {
                require_admin(&context.actor, "add a virtual server")?;
                let replace = args.replace;
                let spec = Entry {
                    name: args.name,
                    description: args.description,
                    upstream: args.upstream,
                    tools: args.tools,
                    prompts: args.prompts,
                    resources: args.resources,
                    prefix: !args.no_prefix,
                    tool_search: args.tool_search,
                    pinned: args.pinned,
                }
                .spec()
                .map_err(anyhow::Error::msg)?;
                let platform = context.platform()?;
                let saved = stored::add(
                    platform.services(),
                    &table,
                    None,
                    spec,
                    replace,
                    &context.actor.id,
                )
                .await
                .map_err(said)?;
                let verb = if saved.replaced { "replaced" } else { "added" };
                writeln!(
                    out,
                    "{verb} server {}, served at {}; {}",
                    saved.name,
                    saved.path,
                    context.takes_effect()
                )?;
                Ok(())
            }
            Command::List { json } => {
                let entries = table.entries();
                if json {
                    serde_json::to_writer_pretty(&mut *out, &entries)?;
                    writeln!(out)?;
                    return Ok(());
                }
                if entries.is_empty() {
                    writeln!(
                        out,
                        "no virtual servers; add one with `larkgate server add NAME --tool \
                         PATTERN` or a [[servers]] entry in the configuration file"
                    )?;
                }
                for entry in entries {
                    let server = &entry.server;
                    let from = match &entry.added {
                        None => "configuration file".to_owned(),
                        Some(added) => format!("added by {}", added.by),
                    };
                    let mut what = Vec::new();
                    if let Some(upstream) = &server.upstream {
                        what.push(format!(
                            "upstream {upstream}{}",
                            if server.prefix { "" } else { ", its own names" }
                        ));
                    }
                    for (label, patterns) in [
                        ("tools", &server.tools),
                        ("prompts", &server.prompts),
                        ("resources", &server.resources),
                        ("pinned", &server.pinned),
                    ] {
                        if !patterns.is_empty() {
                            what.push(format!("{label} {}", patterns.join(" ")));
                        }
                    }
                    if server.tool_search {
                        what.push("tool search".to_owned());
                    }
                    writeln!(
                        out,
                        "/mcp/{}  ({from}){}: {}",
                        server.name,
                        if entry.shadowed {
                            " not served: the configuration file has a server of this name"
                        } else {
                            ""
                        },
                        what.join("; ")
                    )?;
                    if let Some(description) = &server.description {
                        writeln!(out, "  {description}")?;
                    }
                }
                Ok(())
            }
            Command::Remove { name } => {
                require_admin(&context.actor, "remove a virtual server")?;
                let platform = context.platform()?;
                if stored::remove(platform.services(), &table, &name, &context.actor.id)
                    .await
                    .map_err(said)?
                {
                    writeln!(out, "removed server {name}; {}", context.takes_effect())?;
                    Ok(())
                } else if table.configured(&name) {
                    bail!(
                        "server {name:?} is configured in the configuration file; remove it there"
                    )
                } else {
                    bail!("there is no server {name:?} added with `larkgate server add`")
                }
            }
        }
    }
}

/// The servers as a gateway on this configuration and store serves them.
async fn table(context: &StoreContext) -> Result<ServerTable> {
    let table = ServerTable::new(
        context
            .config
            .virtual_servers()
            .map_err(anyhow::Error::msg)?,
    );
    table
        .follow(context.store.as_ref())
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(table)
}

fn said(error: ServerError) -> anyhow::Error {
    match error {
        ServerError::Invalid(message) => anyhow::anyhow!(message),
        ServerError::Failed(detail) => anyhow::anyhow!("the change could not be saved: {detail}"),
    }
}
