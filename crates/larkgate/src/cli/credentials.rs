//! Where a command that connects to larkgate gets its token: `--token-file` (a file, so the
//! token stays out of process listings and shell history) or `LARKGATE_TOKEN`. One reader for
//! `larkgate client` and `larkgate stdio`.

use std::path::PathBuf;

use anyhow::Context as _;

/// The environment variable a token may come from.
pub(crate) const TOKEN_ENV: &str = "LARKGATE_TOKEN";

/// `--token-file`, flattened into the commands that take a token.
#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    /// A file holding the bearer token (instead of `LARKGATE_TOKEN`).
    #[arg(long, value_name = "FILE", global = true)]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token, trimmed; or an error that says where to put one and how to get one.
    pub(crate) fn read(&self) -> anyhow::Result<String> {
        let token = match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?,
            None => std::env::var(TOKEN_ENV).map_err(|_| {
                anyhow::anyhow!(
                    "no token: set {TOKEN_ENV} or pass --token-file (`larkgate serve` prints \
                     one at its first start; an admin creates more with `larkgate token create \
                     --principal NAME`)"
                )
            })?,
        };
        Ok(token.trim().to_owned())
    }
}
