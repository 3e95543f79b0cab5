//! Command-line interface: one subcommand per module under `cli/`.

mod approvals;
mod audit;
mod backup;
mod call;
mod capabilities;
mod check;
mod client;
mod client_config;
mod context;
mod credentials;
mod endpoint;
mod migrate;
mod policy;
mod principal;
mod reload;
mod run;
mod runs;
mod script;
mod serve;
mod server;
mod signing;
mod stdio;
mod token;
mod upstream;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// larkgate: one governed MCP endpoint in front of typed capabilities, federated MCP servers
/// and Starlark scripts.
#[derive(Debug, Parser)]
#[command(name = "larkgate", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The configuration file (default: LARKGATE_CONFIG, else larkgate.toml in the data
    /// directory when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The data directory (default: LARKGATE_DATA_DIR, else ./larkgate-data).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Act as this registered principal instead of the local operator.
    #[arg(long = "as", global = true, value_name = "NAME")]
    as_principal: Option<String>,
    /// How stderr is written: `text` (colours only on a terminal) or `json`, one object per
    /// line (default: LARKGATE_LOG_FORMAT, else [server] log_format, else text).
    #[arg(long, global = true, value_name = "FORMAT", value_parser = crate::logging::format_flag())]
    log_format: Option<crate::logging::LogFormat>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// What is logged to stderr unless `RUST_LOG` says otherwise: warnings, and what the
    /// command says; `serve` and `stdio` also log the upstreams' allow-lists at start, and the
    /// end of a background task's failure (`larkgate_platform::failing::RECOVERED`). larkgate
    /// says every failure of an upstream in its own words (and logs its detail with URLs
    /// redacted), so the MCP library's own log lines — type names, debug dumps, URLs with their
    /// query — are left out of every command (`RUST_LOG=rmcp=debug` shows them).
    pub(crate) fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Client(_) => "warn,rmcp=off,larkgate_cli=info",
            Command::Serve(_) | Command::Stdio(_) => {
                "warn,rmcp=off,larkgate_cli=info,larkgate_access=info,larkgate_upstream=info,\
                 larkgate_recovered=info"
            }
            _ => "warn,rmcp=off,larkgate_cli=info",
        }
    }

    /// How stderr is written and what is traced, from one reading of the configuration:
    /// - the format is `--log-format`, else `LARKGATE_LOG_FORMAT`, else `[server] log_format`
    ///   of the configuration this command reads (when it reads one without error), else text;
    /// - `[telemetry]` is read for the commands that serve MCP (`serve`, `stdio`) only, and
    ///   is `None` when the configuration cannot be read (the command then says why).
    pub(crate) fn log_settings(&self) -> Result<LogSettings, String> {
        let chosen = match (
            self.log_format,
            std::env::var(crate::logging::LOG_FORMAT_ENV),
        ) {
            (Some(format), _) => Some(Ok(format)),
            (None, Ok(value)) if !value.is_empty() => Some(crate::logging::parse_format(&value)),
            _ => None,
        };
        let serving = matches!(self.command, Command::Serve(_) | Command::Stdio(_));
        let located = (chosen.is_none() || serving)
            .then(|| {
                crate::config::Located::find(
                    self.config.as_deref(),
                    self.data_dir.as_deref(),
                    |name| std::env::var(name).ok(),
                )
                .ok()
            })
            .flatten();
        let format_chosen = chosen.is_some();
        let format = match chosen {
            Some(format) => format?,
            None => located
                .as_ref()
                .map_or_else(Default::default, |l| l.config.server.log_format),
        };
        let located = located.filter(|_| serving);
        let access_lines = located
            .as_ref()
            .is_none_or(|located| located.config.server.access_log);
        let telemetry = located.map(|located| located.config.telemetry);
        Ok(LogSettings {
            format,
            format_chosen,
            access_lines,
            telemetry,
        })
    }
}

/// What [`Cli::log_settings`] decided.
#[derive(Debug)]
pub(crate) struct LogSettings {
    /// How stderr is written.
    pub(crate) format: crate::logging::LogFormat,
    /// Whether `--log-format` or `LARKGATE_LOG_FORMAT` chose it (a reload keeps it then).
    pub(crate) format_chosen: bool,
    /// Whether access lines are written (`[server] access_log`).
    pub(crate) access_lines: bool,
    /// Trace export, for `serve` and `stdio`.
    pub(crate) telemetry: Option<crate::telemetry::TelemetryConfig>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the built-in tools with their Starlark signatures, annotations and JSON schemas.
    Capabilities(capabilities::Args),
    /// Call one tool through the full pipeline, as the operator or `--as NAME`.
    Call(call::Args),
    /// Ask how the policy decides a call, without making it.
    #[command(subcommand)]
    Policy(policy::Command),
    /// Manage principals: who may call tools, with which roles.
    #[command(subcommand)]
    Principal(principal::Command),
    /// List and resolve approval requests.
    #[command(subcommand)]
    Approvals(approvals::Command),
    /// Read and verify the audit chain.
    #[command(subcommand)]
    Audit(audit::Command),
    /// Run a script: a file or a saved draft as a draft, or `--script NAME`'s latest
    /// published version.
    Run(run::Args),
    /// Read run records.
    #[command(subcommand)]
    Runs(runs::Command),
    /// Save, publish and list scripts.
    #[command(subcommand)]
    Script(script::Command),
    /// Bearer tokens for network clients: create (shown once), list, revoke.
    #[command(subcommand)]
    Token(token::Command),
    /// Federate third-party MCP servers: add, list, review changed tools, remove.
    #[command(subcommand)]
    Upstream(upstream::Command),
    /// Virtual servers (/mcp/NAME) added at run time: add, list, remove.
    #[command(subcommand)]
    Server(server::Command),
    /// Serve MCP over Streamable HTTP at /mcp (bearer tokens; the first start prints one).
    Serve(serve::Args),
    /// A small MCP client for a running server: list its tools, call one (token from
    /// LARKGATE_TOKEN or --token-file).
    Client(client::Args),
    /// Print the configuration to paste into an MCP client: for clients that connect to a URL,
    /// and for those that start `larkgate stdio` as a program (token from LARKGATE_TOKEN or
    /// --token-file, else a placeholder).
    ClientConfig(client_config::Args),
    /// One MCP session over stdin/stdout for desktop clients (token from LARKGATE_TOKEN or
    /// --token-file).
    Stdio(stdio::Args),
    /// Validate the configuration (policy, limits, store, upstreams, their header variables)
    /// without connecting anywhere.
    Check,
    /// Copy the store (SQLite) into FILE, consistently, while `serve` runs: the audit journal
    /// replayed into the copy and the chain's head recorded in it.
    Backup {
        /// The backup to write (a new file).
        file: PathBuf,
    },
    /// Restore a backup made by `larkgate backup` into a data directory without a store, and
    /// verify its audit chain against the head it recorded.
    Restore {
        /// The backup.
        file: PathBuf,
    },
    /// Have the running `serve` read its configuration again (as SIGHUP does), and say what
    /// changed or why it kept the one in force.
    Reload,
    /// Bring the store's schema to this larkgate's version (every command does this on
    /// opening; safe to run from several processes at once).
    Migrate,
}

pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    // Not locked for the whole command: `stdio` hands standard output to the MCP transport.
    let out = &mut std::io::stdout();
    if let Command::Capabilities(args) = cli.command {
        return capabilities::run(args, out);
    }
    if let Command::Check = cli.command {
        return check::run(cli.config.as_deref(), cli.data_dir.as_deref(), out);
    }
    if let Command::ClientConfig(args) = cli.command {
        let located =
            crate::config::Located::find(cli.config.as_deref(), cli.data_dir.as_deref(), |name| {
                std::env::var(name).ok()
            })?;
        return client_config::run(args, &located, out);
    }
    if let Command::Stdio(_) = &cli.command {
        stdio::require_data_dir(cli.data_dir.as_deref())?;
    }
    if let Command::Restore { file } = &cli.command {
        let data_dir = crate::config::Located::data_dir(cli.data_dir.as_deref(), |name| {
            std::env::var(name).ok()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(backup::restore(file, &data_dir, out));
    }
    if let Command::Reload = cli.command {
        let data_dir = crate::config::Located::data_dir(cli.data_dir.as_deref(), |name| {
            std::env::var(name).ok()
        });
        return reload::request(&data_dir, out);
    }
    if let Command::Client(args) = cli.command {
        if cli.as_principal.is_some() {
            anyhow::bail!(
                "--as does not apply to `larkgate client`: it acts as the principal of its token \
                 (LARKGATE_TOKEN or --token-file); to act as another principal, use a token of \
                 theirs (`larkgate token create --principal NAME`)"
            );
        }
        let located =
            crate::config::Located::find(cli.config.as_deref(), cli.data_dir.as_deref(), |name| {
                std::env::var(name).ok()
            });
        // The data directory is needed only to find a running serve's URL.
        let data_dir = match located {
            Ok(located) => located.data_dir,
            Err(_) => cli
                .data_dir
                .clone()
                .unwrap_or_else(|| crate::config::DEFAULT_DATA_DIR.into()),
        };
        return client::run(args, &data_dir, out);
    }
    if let Command::Audit(command) = &cli.command
        && audit::offline(command)
        && let Command::Audit(command) = cli.command
    {
        return audit::run_offline(command, out);
    }
    let options = context::Options {
        config: cli.config,
        data_dir: cli.data_dir,
        as_principal: cli.as_principal,
        serve: match &cli.command {
            Command::Serve(args) => Some(args.listen),
            _ => None,
        },
        pool: matches!(cli.command, Command::Serve(_) | Command::Stdio(_)),
        // A command that runs until interrupted must not hold the audit log: `serve`, `call`
        // and `run` beside it need it.
        own_audit_log: !matches!(&cli.command, Command::Approvals(command) if command.runs_on()),
    };
    // One worker thread per core, or as many as `TOKIO_WORKER_THREADS` says.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        if let Command::Migrate = cli.command {
            return migrate::run(options.config.as_deref(), options.data_dir.as_deref(), out).await;
        }
        // The operator's commands work beside a running `serve`.
        let operator = match &cli.command {
            Command::Token(_)
            | Command::Principal(_)
            | Command::Approvals(_)
            | Command::Audit(_)
            | Command::Runs(_)
            | Command::Backup { .. }
            | Command::Upstream(_)
            | Command::Server(_) => true,
            // So do the script commands that only read.
            Command::Script(command) => command.reads_only(),
            _ => false,
        };
        if operator {
            let context = context::StoreContext::open(&options).await?;
            let result = match cli.command {
                Command::Token(command) => token::run(command, &context, out).await,
                Command::Principal(command) => principal::run(command, &context, out).await,
                Command::Approvals(command) => command.run(&context, out).await,
                Command::Runs(command) => command.run(&context, out).await,
                Command::Upstream(command) => command.run(&context, out).await,
                Command::Server(command) => command.run(&context, out).await,
                Command::Backup { file } => {
                    backup::backup(&context.config, &context.data_dir, &file, out).await
                }
                Command::Script(command) => {
                    script::read(command, context.store.as_ref(), out).await
                }
                Command::Audit(command) => {
                    audit::note_running_owner(&context);
                    audit::run(command, &context, out).await
                }
                _ => Ok(()),
            };
            context.close().await?;
            return result;
        }
        let store_context = context::StoreContext::open(&options).await?;
        if store_context.log.is_none()
            && let Command::Stdio(args) = cli.command
        {
            // A running serve owns the audit log: relay to it.
            let result = stdio::relay(args, &store_context).await;
            store_context.close().await?;
            return result;
        }
        let context = context::Context::with_store(store_context, options).await?;
        let serving = matches!(cli.command, Command::Serve(_));
        // `serve` and `stdio` run until stopped: SIGHUP reloads their configuration.
        let reloading = matches!(cli.command, Command::Serve(_) | Command::Stdio(_))
            .then(|| reload::on_hangup(reload::Reloader::new(&context)))
            .transpose()?;
        let signs_at_close = reloading.is_some();
        let command = async {
            match cli.command {
                Command::Capabilities(_)
                | Command::Check
                | Command::ClientConfig(_)
                | Command::Backup { .. }
                | Command::Restore { .. }
                | Command::Reload
                | Command::Migrate
                | Command::Client(_)
                | Command::Token(_)
                | Command::Principal(_)
                | Command::Approvals(_)
                | Command::Runs(_)
                | Command::Upstream(_)
                | Command::Server(_)
                | Command::Audit(_) => Ok(()),
                Command::Call(args) => call::run(args, &context, out).await,
                Command::Policy(command) => policy::run(command, &context, out).await,
                Command::Run(args) => run::run(args, &context, out).await,
                Command::Script(command) => script::run(command, &context, out).await,
                Command::Serve(args) => serve::run(args, &context, out).await,
                Command::Stdio(args) => stdio::run(args, &context).await,
            }
        };
        // `serve` stops on Ctrl-C and SIGTERM itself, gracefully; other commands stop here.
        let watcher = (!serving).then(|| {
            let shutdown = serve::Shutdown::listen();
            tokio::spawn(stop_on_signal(shutdown, context.scripts.clone()))
        });
        let result = command.await;
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        if let Some(reloading) = reloading {
            reloading.abort();
        }
        // Whatever the command appended to the audit chain is in the store before we exit;
        // `serve` and `stdio` also sign what they chained since their last checkpoint.
        context.close(signs_at_close).await?;
        result
    })
}

/// The process serving `data_dir`: the one holding its audit log, when one does.
fn serve_pid(data_dir: &std::path::Path) -> Option<u32> {
    larkgate_platform::audit::holder(data_dir)
}

/// Ends a command at Ctrl-C or SIGTERM. Script workers run in their own process groups, so the
/// signal does not reach them: they are killed here and their runs recorded as cancelled (the
/// command then ends with that error); a command waiting on something else (a slow upstream)
/// ends two seconds later. What it appended to the audit chain is already in the journal,
/// which the next larkgate to open the log replays.
async fn stop_on_signal(
    shutdown: serve::Shutdown,
    scripts: std::sync::Arc<larkgate_scripts::Scripts>,
) {
    let signal = shutdown.signalled().await;
    crate::logging::say(&format!("stopped by {signal}"));
    scripts.cancel_active().await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    std::process::exit(130);
}
