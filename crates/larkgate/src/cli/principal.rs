//! `larkgate principal ...`: register principals and their roles. Needs the `admin` role
//! (the local operator has it). Every change is an audit event. They work beside a running
//! `larkgate serve`, which reads principals and roles at every request.

use std::io::Write;

use anyhow::bail;
use larkgate_platform::audit::EventKind;
use larkgate_store::{Principal, PrincipalKind, Store};

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
                "{:<24} {:<8} {}",
                p.id,
                p.kind.as_str(),
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
        Command::Add { name, roles, kind } => {
            check_name(&name)?;
            let roles = check_roles(&roles)?;
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
                })
                .await?;
            context.event(
                EventKind::Principal,
                format!(
                    "added principal {name} ({}) with roles [{}]",
                    kind.as_str(),
                    roles.join(",")
                ),
            )?;
            writeln!(out, "added {name} with roles [{}]", roles.join(","))?;
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
        }
        Command::Remove { name } => {
            context.store.remove_principal(&name).await?;
            context.event(EventKind::Principal, format!("removed principal {name}"))?;
            writeln!(out, "removed {name}")?;
        }
    }
    Ok(())
}
