//! `larkgate upstream add | list | review | remove`: federated MCP servers.
//!
//! Upstreams come from the configuration file (`[[upstreams]]`) and from `upstream add`, which
//! connects, lists the server's tools and reports them before it saves anything. Changing
//! upstreams and approving changed tools is for admins, and is an audit event.
//!
//! These commands work beside a running `larkgate serve` (or `stdio`) on the same data
//! directory: they change the store — the upstreams added at run time and the pins — and the
//! running gateway follows it within a second (see
//! [`larkgate_upstream::federation::Federation::sync`]): an added upstream is connected and
//! its tools listed, a removed one's tools leave the listing and its server is stopped, an
//! approved tool is served, and its clients are told the listing changed. Their audit events
//! are forwarded to the running gateway, which owns the chain. `upstream list` beside it shows
//! the upstreams as the gateway sees them (it saves how each stands in the store); without a
//! running gateway, it connects to each itself.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use larkgate_upstream::SystemResolver;
use larkgate_upstream::client::Revisions;
use larkgate_upstream::config::{LimitsConfig, OAuthConfig, UpstreamConfig};
use larkgate_upstream::federation::{Federation, UpstreamStatus};
use larkgate_upstream::manage;
use larkgate_upstream::tools::Approval;

use super::context::{StoreContext, require_admin};

mod add;

use add::{add, oauth_settings, pairs, sign_in};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Connect to an MCP server, list its tools, and federate them as NAME__tool: one reached
    /// at URL over Streamable HTTP, or one started with `--command PROGRAM [ARG]...` (last on
    /// the line) and spoken to over its standard input and output.
    Add(Box<AddArgs>),
    /// Every upstream: connected or why not, tools, quarantined tools.
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show what changed in quarantined tools; `--approve` makes the new definitions the pins.
    Review {
        /// The upstream's alias.
        name: String,
        /// One tool (by its name at the upstream); all quarantined tools by default.
        tool: Option<String>,
        /// Approve the definitions shown.
        #[arg(long)]
        approve: bool,
    },
    /// Remove an upstream added with `upstream add`, and its pins.
    Remove {
        /// The alias.
        name: String,
    },
    /// Sign in to an OAuth-protected upstream ([upstreams.oauth]): prints the URL to open in
    /// a browser, receives the redirect on a loopback port, and stores the tokens sealed with
    /// LARKGATE_CREDENTIAL_KEY; a running larkgate uses them at its next reconnect.
    Login {
        /// The alias.
        name: String,
    },
}

/// `upstream add`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The alias its tools are prefixed with.
    name: String,
    /// Its Streamable HTTP endpoint (or use --command).
    url: Option<String>,
    /// The program to start and its arguments, without a shell; everything after it on
    /// the line is its arguments.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "PROGRAM [ARG]")]
    command: Vec<String>,
    /// A variable for the program, `NAME=value`; `${VAR}` in the value is read from the
    /// environment at each start, so the secret is not stored.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// A variable of larkgate's own environment the program sees (repeatable; default:
    /// PATH, HOME, LANG, TZ).
    #[arg(long = "inherit-env", value_name = "NAME")]
    inherit_env: Vec<String>,
    /// The program's working directory (an absolute path).
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// How long the program has to start and complete the handshake, in milliseconds.
    #[arg(long, value_name = "MS")]
    start_timeout_ms: Option<u64>,
    /// A header for every request, `Name=value`; `${VAR}` in the value is read from the
    /// environment at each start, so the secret is not stored.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// A network (10.0.0.0/8) or host name this upstream may reach although not public.
    #[arg(long = "allow", value_name = "CIDR|HOST")]
    allow: Vec<String>,
    /// Whether its tools need an approval.
    #[arg(long, value_enum, default_value = "always")]
    approval: ApprovalArg,
    /// Speak only protocol revision 2025-11-25.
    #[arg(long)]
    legacy: bool,
    /// Do not let the server ask a call's client for an elicitation during the call.
    #[arg(long)]
    no_elicitation: bool,
    /// Let the server ask a call's client for sampling (its model's completion) during the
    /// call.
    #[arg(long)]
    sampling: bool,
    /// Round-trip timeout in milliseconds (reset by progress).
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Response size limit in bytes.
    #[arg(long, value_name = "BYTES")]
    max_response_bytes: Option<usize>,
    /// Tools kept from its listing.
    #[arg(long, value_name = "N")]
    max_tools: Option<usize>,
    /// The server wants OAuth: sign in first (the URL to open in a browser is printed), then
    /// connect with the tokens, stored sealed with LARKGATE_CREDENTIAL_KEY.
    #[arg(long)]
    oauth: bool,
    /// OAuth as a machine account (the client credentials grant) with --client-id and
    /// --client-secret: nobody signs in.
    #[arg(long)]
    client_credentials: bool,
    /// An OAuth client ID registered with the authorization server beforehand (otherwise
    /// larkgate registers itself as the server offers).
    #[arg(long, value_name = "ID")]
    client_id: Option<String>,
    /// Its secret, as `${NAME}`: read from larkgate's environment at each use, so the secret
    /// is not stored.
    #[arg(long, value_name = "${NAME}")]
    client_secret: Option<String>,
    /// An OAuth scope to ask for (repeatable; default: those the server asks for).
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
    /// The https URL of a client ID metadata document published for larkgate: its client ID
    /// where the authorization server accepts such documents.
    #[arg(long, value_name = "URL")]
    client_metadata_url: Option<String>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ApprovalArg {
    /// Every call needs an approval.
    Always,
    /// Calls of the tools that do not declare themselves read-only need one.
    Writes,
    /// The policy's approval patterns decide.
    Never,
}

/// Which of an upstream's tools its `approval` setting gates, in a line.
pub(crate) fn gates(s: &larkgate_upstream::federation::UpstreamStatus) -> String {
    use larkgate_upstream::tools::Approval;
    let setting = s.approval.as_str();
    match s.approval {
        Approval::Always => format!("approval {setting}: every call of its tools is gated"),
        Approval::Never => format!("approval {setting}: the policy's approval patterns decide"),
        Approval::Writes if s.gated.is_empty() => format!(
            "approval {setting}: none of its {} tools is gated (each declares itself read-only)",
            s.tools
        ),
        Approval::Writes => format!(
            "approval {setting}: gated are {} (the other {} declare themselves read-only)",
            s.gated.join(", "),
            s.tools.saturating_sub(s.gated.len())
        ),
    }
}

impl Command {
    /// Carries the command out on the store, writing what it reports to `out`.
    pub(crate) async fn run(self, context: &StoreContext, out: &mut impl Write) -> Result<()> {
        match self {
            Command::Add(arguments) => {
                let AddArgs {
                    name,
                    url,
                    command,
                    env,
                    inherit_env,
                    cwd,
                    start_timeout_ms,
                    headers,
                    allow,
                    approval,
                    legacy,
                    no_elicitation,
                    sampling,
                    timeout_ms,
                    max_response_bytes,
                    max_tools,
                    oauth,
                    client_credentials,
                    client_id,
                    client_secret,
                    scopes,
                    client_metadata_url,
                } = *arguments;
                require_admin(&context.actor, "add an upstream")?;
                let oauth = oauth_settings(
                    oauth,
                    client_credentials,
                    OAuthConfig {
                        client_id,
                        client_secret,
                        scopes,
                        client_metadata_url,
                        ..OAuthConfig::default()
                    },
                )?;
                let header_map = pairs(&headers, "--header")?;
                if let Some(url) = &url
                    && command.is_empty()
                    && (url.contains(char::is_whitespace) || !url.contains("://"))
                {
                    bail!(
                        "{url:?} is not a URL: for a server reached over HTTP, write its URL \
                     (https://...); to start a program, write `--command PROGRAM [ARG]...` last \
                     on the line, for example `larkgate upstream add {name} --command {url}`"
                    );
                }
                let env = pairs(&env, "--env")?;
                let config = UpstreamConfig {
                    alias: name.clone(),
                    url,
                    command,
                    env,
                    inherit_env: (!inherit_env.is_empty()).then_some(inherit_env),
                    cwd,
                    headers: header_map,
                    allow,
                    approval: match approval {
                        ApprovalArg::Always => Approval::Always,
                        ApprovalArg::Writes => Approval::Writes,
                        ApprovalArg::Never => Approval::Never,
                    },
                    revisions: if legacy {
                        Revisions::Legacy
                    } else {
                        Revisions::Latest
                    },
                    elicitation: no_elicitation.then_some(false),
                    sampling: sampling.then_some(true),
                    limits: LimitsConfig {
                        call_timeout_ms: timeout_ms,
                        max_response_bytes,
                        max_tools,
                        start_timeout_ms,
                        ..LimitsConfig::default()
                    },
                    oauth,
                };
                add(context, config, out).await
            }
            Command::List { json } => {
                let (statuses, beside) = statuses(context).await?;
                if json {
                    serde_json::to_writer_pretty(&mut *out, &statuses)?;
                    writeln!(out)?;
                    return Ok(());
                }
                if statuses.is_empty() {
                    writeln!(
                        out,
                        "no upstreams; add one with `larkgate upstream add NAME URL` (or `--command \
                     PROGRAM ARG...`)"
                    )?;
                } else if beside {
                    writeln!(out, "as the running larkgate sees them:")?;
                }
                for s in statuses {
                    if s.connected {
                        writeln!(
                            out,
                            "{}  {}  connected ({}, {}): {} tools{}{}{}{}",
                            s.alias,
                            s.url,
                            s.server.as_deref().unwrap_or("unnamed server"),
                            s.protocol.as_deref().unwrap_or("?"),
                            s.tools,
                            catalog_counts(&s),
                            if s.quarantined.is_empty() {
                                String::new()
                            } else {
                                format!(
                                    ", quarantined until reviewed: {}",
                                    s.quarantined.join(", ")
                                )
                            },
                            if s.dropped > 0 {
                                format!(", {} dropped over max_tools", s.dropped)
                            } else {
                                String::new()
                            },
                            if s.invalid.is_empty() {
                                String::new()
                            } else {
                                format!(", dropped: {}", s.invalid.join("; "))
                            },
                        )?;
                        writeln!(out, "  {}", gates(&s))?;
                    } else {
                        writeln!(
                            out,
                            "{}  {}  down: {}{}",
                            s.alias,
                            s.url,
                            s.down_because.as_deref().unwrap_or("not connected"),
                            if s.tools > 0 {
                                format!(
                                    "; its {} pinned tools are listed and answer upstream_unavailable",
                                    s.tools
                                )
                            } else {
                                String::new()
                            }
                        )?;
                    }
                }
                Ok(())
            }
            Command::Review {
                name,
                tool,
                approve: approving,
            } => {
                if approving {
                    require_admin(&context.actor, "approve a changed tool")?;
                }
                let reviewed = manage::review(
                    &context.platform()?,
                    &name,
                    tool.as_deref(),
                    approving,
                    &context.actor.id,
                )
                .await?;
                if reviewed.is_empty() {
                    writeln!(out, "{name}: nothing is quarantined")?;
                    return Ok(());
                }
                for tool in &reviewed {
                    let what = if tool.new {
                        "a new tool"
                    } else {
                        "a changed tool"
                    };
                    writeln!(out, "{} ({what}):", tool.name)?;
                    if !tool.suspends.is_empty() {
                        writeln!(
                            out,
                            "suspends, until approved or reverted: {}",
                            tool.suspends.join(", ")
                        )?;
                    }
                    write!(out, "{}", tool.diff)?;
                }
                if approving {
                    let count = reviewed.iter().filter(|t| t.approved).count();
                    writeln!(out, "approved {count}; {}", context.takes_effect())?;
                } else {
                    writeln!(
                        out,
                        "approve with `larkgate upstream review {name} --approve`"
                    )?;
                }
                Ok(())
            }
            Command::Login { name } => {
                require_admin(&context.actor, "sign in to an upstream")?;
                let config = configured(context, &name).await?;
                sign_in(&context.platform()?, context, &config, out).await?;
                writeln!(
                    out,
                    "signed in to {name}; the tokens are stored sealed; {}",
                    context.takes_effect()
                )?;
                Ok(())
            }
            Command::Remove { name } => {
                require_admin(&context.actor, "remove an upstream")?;
                if manage::remove(&context.platform()?, &name, &context.actor.id).await? {
                    writeln!(
                        out,
                        "removed {name} and its pins; {}",
                        context.takes_effect()
                    )?;
                    Ok(())
                } else if context.config.upstreams.iter().any(|u| u.alias == name) {
                    bail!("{name} is configured in the configuration file; remove it there")
                } else {
                    bail!("there is no upstream {name:?}")
                }
            }
        }
    }
}

/// The configuration of upstream `name`: from the configuration file, else as `upstream add`
/// stored it.
async fn configured(context: &StoreContext, name: &str) -> Result<UpstreamConfig> {
    if let Some(config) = context.config.upstreams.iter().find(|u| u.alias == name) {
        return Ok(config.clone());
    }
    let stored = context.store.upstreams().await?;
    let Some(record) = stored.into_iter().find(|u| u.alias == name) else {
        bail!("there is no upstream {name:?}; `larkgate upstream list` shows them");
    };
    serde_json::from_str(&record.config)
        .with_context(|| format!("the stored configuration of {name:?} cannot be read"))
}

/// Every upstream's status, and whether it is a running gateway's view (else connected here).
async fn statuses(context: &StoreContext) -> Result<(Vec<UpstreamStatus>, bool)> {
    if context.log.is_none() {
        let saved = context.store.upstream_statuses().await?;
        let statuses = saved
            .iter()
            .filter_map(|record| serde_json::from_str(&record.status).ok())
            .collect();
        return Ok((statuses, true));
    }
    let federation = Federation::start(
        &context.platform()?,
        context.config.upstreams.clone(),
        Arc::new(SystemResolver),
        None,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let statuses = federation.upstreams().iter().map(|u| u.status()).collect();
    federation.close().await;
    Ok((statuses, false))
}

/// `, 2 resources, 1 resource template, 3 prompts` for what an upstream serves besides tools;
/// nothing when it serves none of them.
fn catalog_counts(status: &UpstreamStatus) -> String {
    let mut counts = String::new();
    for (n, one) in [
        (status.resources, "resource"),
        (status.resource_templates, "resource template"),
        (status.prompts, "prompt"),
    ] {
        if n > 0 {
            counts.push_str(&format!(", {n} {one}{}", if n == 1 { "" } else { "s" }));
        }
    }
    counts
}
