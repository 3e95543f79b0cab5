//! `larkgate principal ...`: register principals and their roles. Needs the `admin` role
//! (the local operator has it). Every change is an audit event. They work beside a running
//! `larkgate serve`, which reads principals and roles at every request.

use std::io::Write;

use anyhow::bail;
use larkgate_platform::audit::EventKind;
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, Store};

use super::context::{OPERATOR, StoreContext, require_admin};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Register a principal.
    Add {
        /// Its name: letters, digits, `_`, `-`, `.`, `@`, `:`.
        name: String,
        /// Its roles, comma-separated (`author,publisher`).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
        /// What kind of party it is.
        #[arg(long, value_enum, default_value = "user")]
        kind: Kind,
        /// The configured identity provider (`[[sign_in.issuers]]`, by its `name`) whose
        /// account of this name signs in as it. Without it, only larkgate's own tokens do.
        #[arg(long)]
        issuer: Option<String>,
    },
    /// List principals and their roles.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replace a principal's roles.
    SetRoles {
        /// The principal.
        name: String,
        /// The new roles, comma-separated (empty: none).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
    },
    /// Choose which identity provider's account of this name signs in as a principal.
    SetIssuer {
        /// The principal.
        name: String,
        /// The configured issuer, by its `name`.
        #[arg(long, required_unless_present = "none", conflicts_with = "none")]
        issuer: Option<String>,
        /// No provider's account: only larkgate's own tokens.
        #[arg(long)]
        none: bool,
    },
    /// Remove a principal.
    Remove {
        /// The principal.
        name: String,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Kind {
    User,
    Service,
}

/// Checks a principal name: printable, no spaces, not the operator's.
fn check_name(name: &str) -> anyhow::Result<()> {
    if !larkgate_platform::identity::is_principal_name(name) {
        bail!(
            "{name:?} is not a principal name: use 1 to 64 of A-Z a-z 0-9 _ - . @ \
             (script principals are created by publishing)"
        );
    }
    if name == OPERATOR {
        bail!("{OPERATOR:?} is the built-in local operator");
    }
    Ok(())
}

/// Says on stderr which of `roles` grant `name` nothing (the change is made all the same: the
/// policy may be about to define them).
fn warn_undefined(context: &StoreContext, name: &str, roles: &[String]) {
    for warning in super::check::undefined_roles(&context.config.policy, name, roles) {
        eprintln!("warning: {warning}");
    }
}

fn check_roles(roles: &[String]) -> anyhow::Result<Vec<String>> {
    let roles: Vec<String> = roles
        .iter()
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .collect();
    for role in &roles {
        if !larkgate_platform::identity::is_role_name(role) {
            bail!("{role:?} is not a role name: use a-z 0-9 _ -");
        }
    }
    Ok(roles)
}

/// `--issuer NAME` as a binding: `NAME` must be a configured issuer's.
fn binding(
    config: &crate::config::Config,
    issuer: Option<String>,
) -> anyhow::Result<IssuerBinding> {
    let Some(name) = issuer else {
        return Ok(IssuerBinding::Local);
    };
    config
        .sign_in
        .named(&name)
        .map_err(|problem| anyhow::anyhow!("--issuer: {problem}"))?;
    Ok(IssuerBinding::Issuer(name))
}

/// How a principal signs in, for an audit event.
fn signs_in(issuer: &IssuerBinding) -> String {
    match issuer {
        IssuerBinding::Issuer(name) => format!("signing in through {name}"),
        _ => "with larkgate's own tokens only".to_owned(),
    }
}

/// `principal list`: reads only the store, so it works while `larkgate serve` runs.
pub(crate) async fn list(
    store: &dyn Store,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let principals = store.principals().await?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &principals)?;
        writeln!(out)?;
    } else if principals.is_empty() {
        writeln!(
            out,
            "no principals; add one with `larkgate principal add NAME --roles ...`"
        )?;
    } else {
        for p in principals {
            writeln!(
                out,
                "{:<24} {:<8} {:<16} {}",
                p.id,
                p.kind.as_str(),
                p.issuer.to_string(),
                p.roles.join(",")
            )?;
        }
    }
    Ok(())
}

pub(crate) async fn run(
    command: Command,
    context: &StoreContext,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if !matches!(command, Command::List { .. }) {
        require_admin(&context.actor, "manage principals")?;
    }
    match command {
        Command::Add {
            name,
            roles,
            kind,
            issuer,
        } => {
            check_name(&name)?;
            let roles = check_roles(&roles)?;
            let issuer = binding(&context.config, issuer)?;
            // Two names that read alike would be two parties a person cannot tell apart.
            if let Some(twin) = context
                .store
                .principals()
                .await?
                .into_iter()
                .find(|p| p.id != name && p.id.eq_ignore_ascii_case(&name))
            {
                bail!(
                    "there is already a principal {:?}, which differs from {name:?} only in \
                     case: names that read alike are refused; use {:?}, or another name",
                    twin.id,
                    twin.id
                );
            }
            let kind = match kind {
                Kind::User => PrincipalKind::User,
                Kind::Service => PrincipalKind::Service,
            };
            context
                .store
                .add_principal(Principal {
                    id: name.clone(),
                    kind,
                    roles: roles.clone(),
                    issuer: issuer.clone(),
                })
                .await?;
            context.event(
                EventKind::Principal,
                format!(
                    "added principal {name} ({}) with roles [{}], {}",
                    kind.as_str(),
                    roles.join(","),
                    signs_in(&issuer)
                ),
            )?;
            writeln!(out, "added {name} with roles [{}]", roles.join(","))?;
            warn_undefined(context, &name, &roles);
            if let IssuerBinding::Issuer(issuer) = &issuer {
                writeln!(out, "{issuer}'s account {name} signs in as {name}")?;
            }
        }
        Command::SetIssuer { name, issuer, none } => {
            let issuer = if none {
                IssuerBinding::Local
            } else {
                binding(&context.config, issuer)?
            };
            context.store.set_issuer(&name, issuer.clone()).await?;
            context.event(
                EventKind::Principal,
                format!("principal {name}: {}", signs_in(&issuer)),
            )?;
            match issuer {
                IssuerBinding::Issuer(issuer) => {
                    writeln!(out, "{issuer}'s account {name} signs in as {name}")?
                }
                _ => writeln!(out, "no provider's account signs in as {name}")?,
            }
        }
        Command::List { json } => list(context.store.as_ref(), json, out).await?,
        Command::SetRoles { name, roles } => {
            let roles = check_roles(&roles)?;
            context.store.set_roles(&name, roles.clone()).await?;
            context.event(
                EventKind::Principal,
                format!("set roles of {name} to [{}]", roles.join(",")),
            )?;
            writeln!(out, "{name} now has roles [{}]", roles.join(","))?;
            warn_undefined(context, &name, &roles);
        }
        Command::Remove { name } => {
            context.store.remove_principal(&name).await?;
            context.event(EventKind::Principal, format!("removed principal {name}"))?;
            writeln!(out, "removed {name}")?;
        }
    }
    Ok(())
}
