//! `larkgate token create | list | revoke`: bearer tokens for network clients.
//!
//! Tokens belong to registered principals (their roles are the principal's, read at every
//! use), are shown once when created, and are stored only as hashes. Managing tokens is for
//! admins, and works while `larkgate serve` runs (see [`StoreContext`]): a leaked token is
//! revoked without stopping the gateway. Creating and revoking are audit events.

use std::io::Write;

use anyhow::{Context as _, bail};
use larkgate_platform::audit::EventKind;
use larkgate_platform::capabilities::rfc3339_from_ms;
use larkgate_platform::tokens;
use larkgate_store::now_ms;

use super::context::{StoreContext, require_admin};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Create a token for a registered principal; it is printed once.
    Create {
        /// The principal the token authenticates.
        #[arg(long)]
        principal: String,
        /// How long it stays valid (`30d`, `12h`); without it, until revoked.
        #[arg(long, value_name = "DURATION")]
        expires: Option<humantime::Duration>,
    },
    /// List tokens (never their secrets).
    List {
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
    },
    /// Revoke a token by its id; it stops working at once.
    Revoke {
        /// The token's id (`token list` shows it; it is the 12 characters after `lgt_`).
        /// Ids made by older versions may start with `-`; they are accepted as they are.
        #[arg(allow_hyphen_values = true)]
        id: String,
    },
}

pub(crate) async fn run(
    command: Command,
    context: &StoreContext,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    require_admin(&context.actor, "manage tokens")?;
    match command {
        Command::Create { principal, expires } => {
            context
                .store
                .principal(&principal)
                .await?
                .with_context(|| {
                    format!(
                        "there is no principal {principal:?}; add it first with \
                     `larkgate principal add {principal} --roles ...`"
                    )
                })?;
            let new = tokens::create(
                context.store.as_ref(),
                &principal,
                &context.actor.id,
                expires.map(Into::into),
                now_ms(),
            )
            .await?;
            let validity = new.record.expires_at_ms.map_or_else(String::new, |t| {
                format!(", valid until {}", rfc3339_from_ms(t))
            });
            context.event(
                EventKind::Token,
                format!("created token {} for {principal}{validity}", new.record.id),
            )?;
            writeln!(out, "{}", new.token)?;
            eprintln!(
                "token {} for {principal}{validity}: this is the only time it is shown; store it now",
                new.record.id,
            );
            Ok(())
        }
        Command::List { principal } => {
            let list = context.store.tokens(principal.as_deref()).await?;
            if list.is_empty() {
                writeln!(out, "no tokens")?;
            }
            let now = now_ms();
            for t in list {
                let (state, _) = tokens::standing_text(&t, now);
                writeln!(
                    out,
                    "{}  {}  created {} by {}  {state}",
                    t.id,
                    t.principal,
                    rfc3339_from_ms(t.created_at_ms),
                    t.created_by
                )?;
            }
            Ok(())
        }
        Command::Revoke { id } => {
            let id = id
                .strip_prefix(tokens::TOKEN_PREFIX)
                .map_or(id.as_str(), |rest| rest.get(..12).unwrap_or(rest))
                .to_owned();
            if !context.store.revoke_token(&id, now_ms()).await? {
                bail!("there is no token {id:?}; `larkgate token list` shows them");
            }
            context.event(EventKind::Token, format!("revoked token {id}"))?;
            writeln!(out, "revoked {id}")?;
            Ok(())
        }
    }
}
