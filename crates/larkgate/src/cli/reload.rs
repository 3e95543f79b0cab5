//! Reloading the configuration while `larkgate serve` runs: SIGHUP, or `larkgate reload`
//! (which sends it and says what `serve` did).
//!
//! What a reload changes, for the next call; sessions and calls in flight keep going (a call
//! already past a step keeps what that step decided):
//!
//! - `[policy]`: roles, approvals, rate limits (an unchanged rule keeps its budgets; see
//!   [`larkgate_platform::ratelimit::Limiter::reconfigured`]), publishing;
//! - each run's limits in `[scripts]` ([`RUN_LIMITS`]), for runs that start from then on;
//! - `[sign_in]`: the identity providers whose tokens `/mcp` accepts, the challenge and the
//!   protected resource metadata (see [`larkgate_edge::sign_in::Providers`]);
//! - `[[servers]]`: the virtual servers, for the next request (their sessions open are told
//!   their lists may have changed; a server removed answers 404 from then on);
//! - `[telemetry]`: where traces go, for the spans that start from then on (the exporter it
//!   replaces sends what it queued; see [`crate::telemetry::Prepared`]);
//! - the log ([`LIVE_SERVER_KEYS`]): `server.log_format` (unless `--log-format` or
//!   `LARKGATE_LOG_FORMAT` chose the format) and `server.access_log`.
//!
//! Everything is checked and built first (the file, and an exporter for a new `[telemetry]`);
//! only then is anything applied, so a reload applies all of it or nothing.
//! What it refuses, whole, the configuration in force staying: a file that fails the checks
//! `serve` makes at start (the same error `larkgate check` prints), and a file that changes
//! anything else, which takes a restart: the refusal names each such key (`server.listen`,
//! `[store]`, `scripts.workers`, ...). Each outcome is logged, and written to [`OUTCOME`] in the
//! data directory for `larkgate reload` to read.
//!
//! Replicas: each process reloads its own file when it is signalled; a change meant for all of
//! them is made to each file, and each replica signalled.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use larkgate_platform::Platform;
use larkgate_scripts::Scripts;
use serde::{Deserialize, Serialize};

use crate::config::{Config, Located};

/// The keys of `[scripts]` a reload applies: each run's limits (`max_memory_bytes` is not one:
/// the runs' turns reserve memory by it).
pub(crate) const RUN_LIMITS: &[&str] = &[
    "max_wall_time_ms",
    "max_ticks",
    "max_call_stack",
    "max_tool_calls",
    "max_print_bytes",
    "max_depth",
];

/// The keys of `[server]` a reload applies: the log's.
pub(crate) const LIVE_SERVER_KEYS: &[&str] = &["log_format", "access_log"];

/// The sections a reload applies whole.
const LIVE_SECTIONS: &[&str] = &["policy", "servers", "sign_in", "telemetry"];

/// The file in the data directory where `serve` writes the outcome of its last reload.
pub(crate) const OUTCOME: &str = "reload.json";

/// The outcome of one reload, as [`OUTCOME`] holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Outcome {
    /// Which reload of this process it was (1, 2, ...), and the process.
    pub(crate) serial: u64,
    pub(crate) pid: u32,
    /// Whether the new configuration is in force.
    pub(crate) reloaded: bool,
    /// What changed, or why nothing did.
    pub(crate) said: String,
}

/// What a reload needs of a running command.
pub(crate) struct Reloader {
    config_flag: Option<PathBuf>,
    data_dir: PathBuf,
    platform: Platform,
    scripts: Arc<Scripts>,
    sign_in: larkgate_edge::sign_in::Providers,
    /// The audit log, whose signing key a reload rotates when `larkgate audit key --rotate`
    /// asked for it.
    audit: Arc<larkgate_platform::audit::AuditLog>,
    /// The configuration in force, as TOML, and how many reloads there were.
    running: Mutex<(toml::Table, u64)>,
}

impl Reloader {
    pub(crate) fn new(context: &super::context::Context) -> Self {
        Reloader {
            config_flag: context.config_flag.clone(),
            data_dir: context.data_dir.clone(),
            platform: context.platform.clone(),
            scripts: Arc::clone(&context.scripts),
            sign_in: context.sign_in.clone(),
            audit: Arc::clone(&context.audit),
            running: Mutex::new((context.config_raw.clone(), 0)),
        }
    }

    /// Reads the configuration again and applies it, or refuses it; logs and records the
    /// outcome either way.
    pub(crate) fn reload(&self) -> Outcome {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.1 += 1;
        let outcome = match self.read(&running.0) {
            Ok(Ready {
                config,
                path,
                traces,
            }) => {
                let changed = changed_keys(&running.0, &config.raw);
                // Nothing below fails: the new configuration is in force whole.
                self.platform
                    .services()
                    .replace_policy(config.policy.clone());
                // Checked when the file was read.
                if let Ok(servers) = config.virtual_servers() {
                    self.platform.servers().configure(servers);
                }
                let bounds = config.scripts.bounds();
                self.scripts.set_run_limits(bounds.limits, bounds.max_depth);
                if changed.iter().any(|key| key == "[sign_in]") {
                    self.sign_in.replace(config.sign_in.clone());
                }
                if let Some(traces) = traces {
                    traces.apply();
                }
                crate::logging::set_access_lines(config.server.access_log);
                let format_kept = !crate::logging::set_format(config.server.log_format)
                    && changed.iter().any(|key| key == "server.log_format");
                running.0 = config.raw;
                let mut said = if changed.is_empty() {
                    format!("the configuration was read again from {path}: nothing changed")
                } else {
                    format!(
                        "the configuration was reloaded from {path}: {} changed, for the next \
                         call",
                        changed.join(", ")
                    )
                };
                if format_kept {
                    said.push_str(
                        " (the log keeps its format: --log-format or LARKGATE_LOG_FORMAT chose \
                         it at start)",
                    );
                }
                crate::logging::say(&said);
                Outcome {
                    reloaded: true,
                    said,
                    ..Outcome::default()
                }
            }
            Err(why) => {
                let said = format!(
                    "the configuration was not reloaded, and the one in force stays: {why}"
                );
                crate::logging::fail(&said);
                Outcome {
                    reloaded: false,
                    said,
                    ..Outcome::default()
                }
            }
        };
        let outcome = Outcome {
            serial: running.1,
            pid: std::process::id(),
            ..outcome
        };
        if let Err(error) = write_outcome(&self.data_dir, &outcome) {
            tracing::warn!(%error, "the outcome of a reload could not be written for `larkgate reload`");
        }
        outcome
    }

    /// Rotates the audit signing key if `larkgate audit key --rotate` left the next one, and
    /// says so.
    async fn rotate_signing_key(&self) {
        match super::signing::rotate_pending(&self.data_dir, &self.audit).await {
            Ok(None) => {}
            Ok(Some(announced)) => crate::logging::say(&format!(
                "the audit signing key was rotated: the checkpoint of record {} signed by {} \
                 announces {}, which signs from now on",
                announced.seq,
                announced.key,
                announced.next_key.unwrap_or_default()
            )),
            Err(error) => crate::logging::fail(&format!(
                "the audit signing key was not rotated, and the one in use stays: {error:#}"
            )),
        }
    }

    /// The configuration as the file says it now, checked and ready to apply; or why it
    /// cannot be served without a restart.
    fn read(&self, running: &toml::Table) -> Result<Ready, String> {
        let located = Located::find(self.config_flag.as_deref(), Some(&self.data_dir), |name| {
            std::env::var(name).ok()
        })
        .map_err(|e| format!("{e:#}"))?;
        let path = located.path.as_ref().map_or_else(
            || "the defaults (there is no configuration file)".to_owned(),
            |path| path.display().to_string(),
        );
        let config = located.config;
        for upstream in &config.upstreams {
            upstream
                .endpoint(|name| std::env::var(name).ok())
                .map_err(|e| format!("in {path}: {e}"))?;
        }
        // The upstreams' and scripts' tools as they are served now.
        let outside = self
            .platform
            .tool_table()
            .snapshot()
            .iter()
            .filter(|tool| {
                matches!(
                    tool.spec.origin.source,
                    larkgate_caller::Source::Upstream | larkgate_caller::Source::Script
                )
            })
            .filter_map(|tool| super::check::arguments_of(&tool.spec))
            .collect::<Vec<_>>();
        let warnings = super::check::rules_fit_their_tools(
            &config.policy,
            config.upstreams.iter().map(|u| u.alias.clone()),
            outside,
        )
        .map_err(|e| format!("in {path}: {e}"))?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        let restart = needs_restart(running, &config.raw);
        if !restart.is_empty() {
            return Err(format!(
                "{path} changes what only a restart applies: {} (put back what is running, or \
                 restart larkgate to apply it)",
                restart.join(", ")
            ));
        }
        let traces = (running.get("telemetry") != config.raw.get("telemetry"))
            .then(|| crate::telemetry::prepare(&config.telemetry))
            .transpose()
            .map_err(|e| format!("in {path}: {e}"))?;
        Ok(Ready {
            config,
            path,
            traces,
        })
    }
}

/// A configuration read, checked, and ready to apply.
struct Ready {
    config: Config,
    /// Where it was read from, as the log names it.
    path: String,
    /// The traces of a changed `[telemetry]`, built.
    traces: Option<crate::telemetry::Prepared>,
}

/// The keys whose change between `running` and `new` a reload cannot apply, named as an
/// operator writes them (`server.listen`, `[store]`, `[[upstreams]]`).
pub(crate) fn needs_restart(running: &toml::Table, new: &toml::Table) -> Vec<String> {
    let empty = toml::Table::new();
    let section = |table: &toml::Table, name: &str| -> toml::Table {
        match table.get(name) {
            Some(toml::Value::Table(section)) => section.clone(),
            _ => empty.clone(),
        }
    };
    let mut names: std::collections::BTreeSet<&String> = running.keys().collect();
    names.extend(new.keys());
    let mut changed = Vec::new();
    for name in names {
        match name.as_str() {
            name if LIVE_SECTIONS.contains(&name) => {}
            "scripts" | "server" => {
                let (old, new) = (section(running, name), section(new, name));
                let mut keys: std::collections::BTreeSet<&String> = old.keys().collect();
                keys.extend(new.keys());
                for key in keys {
                    let live = match name.as_str() {
                        "scripts" => RUN_LIMITS.contains(&key.as_str()),
                        _ => LIVE_SERVER_KEYS.contains(&key.as_str()),
                    };
                    if !live && old.get(key) != new.get(key) {
                        changed.push(format!("{name}.{key}"));
                    }
                }
            }
            _ if running.get(name) != new.get(name) => {
                changed.push(match running.get(name).or(new.get(name)) {
                    Some(toml::Value::Array(_)) => format!("[[{name}]]"),
                    _ => format!("[{name}]"),
                });
            }
            _ => {}
        }
    }
    changed
}

/// What a reload changed, for its log line: the live sections (`[policy]`, `[sign_in]`,
/// `[telemetry]`), `[scripts]`, and the log's keys (`server.log_format`).
fn changed_keys(running: &toml::Table, new: &toml::Table) -> Vec<String> {
    let mut changed: Vec<String> = ["policy", "scripts", "sign_in", "telemetry"]
        .into_iter()
        .filter(|name| running.get(*name) != new.get(*name))
        .map(|name| format!("[{name}]"))
        .collect();
    if running.get("servers") != new.get("servers") {
        changed.push("[[servers]]".to_owned());
    }
    let key = |table: &toml::Table, key: &str| {
        table
            .get("server")
            .and_then(|server| server.get(key))
            .cloned()
    };
    changed.extend(
        LIVE_SERVER_KEYS
            .iter()
            .filter(|name| key(running, name) != key(new, name))
            .map(|name| format!("server.{name}")),
    );
    changed
}

/// Writes `outcome` to [`OUTCOME`] in `data_dir`, whole (a temporary file renamed into place).
fn write_outcome(data_dir: &Path, outcome: &Outcome) -> std::io::Result<()> {
    let staging = data_dir.join(format!("{OUTCOME}.{}", std::process::id()));
    std::fs::write(&staging, serde_json::to_vec(outcome)?)?;
    std::fs::rename(&staging, data_dir.join(OUTCOME))
}

/// The outcome of the last reload recorded in `data_dir`, if any.
pub(crate) fn last_outcome(data_dir: &Path) -> Option<Outcome> {
    let text = std::fs::read(data_dir.join(OUTCOME)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Reloads at every SIGHUP until the task is aborted; the handler is installed before this
/// returns, so a SIGHUP from then on never takes its default action (ending the process).
pub(crate) fn on_hangup(reloader: Reloader) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    let reloader = Arc::new(reloader);
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let reloader = Arc::clone(&reloader);
            // Reading the file and validating it blocks; the runtime's threads serve calls.
            let reloading = Arc::clone(&reloader);
            if let Err(error) = tokio::task::spawn_blocking(move || reloading.reload()).await {
                tracing::error!(%error, "a reload failed");
            }
            reloader.rotate_signing_key().await;
        }
    }))
}

/// `larkgate reload`: signals the `serve` that holds `data_dir` and says what it did.
pub(crate) fn request(data_dir: &Path, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let pid = super::serve_pid(data_dir).ok_or_else(|| {
        anyhow::anyhow!(
            "no larkgate serve is running on {} (it reloads its own configuration when sent \
             SIGHUP; a stopped one reads it at its next start)",
            data_dir.display()
        )
    })?;
    let before = last_outcome(data_dir)
        .filter(|o| o.pid == pid)
        .map_or(0, |o| o.serial);
    let target = rustix::process::Pid::from_raw(i32::try_from(pid)?)
        .ok_or_else(|| anyhow::anyhow!("the lock file names no process"))?;
    rustix::process::kill_process(target, rustix::process::Signal::HUP)
        .map_err(|e| anyhow::anyhow!("cannot signal pid {pid}: {e}"))?;
    // `serve` writes the outcome when it has read and applied (or refused) the file: poll for
    // it, as a person would look at the log.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(outcome) = last_outcome(data_dir).filter(|o| o.pid == pid && o.serial > before)
        {
            if !outcome.reloaded {
                anyhow::bail!("{} (pid {pid})", outcome.said);
            }
            writeln!(out, "{} (pid {pid})", outcome.said)?;
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "pid {pid} was sent SIGHUP and said nothing within 30 s: its log says what it did"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    /// What a reload applies and what it names as needing a restart, key by key.
    #[test]
    fn a_reload_applies_the_policy_and_run_limits_and_names_everything_else() {
        let running = table(
            "[server]\nlisten = \"127.0.0.1:8940\"\n[scripts]\nmax_ticks = 10\nworkers = 2\n\
             [policy.roles.a]\ncall = [\"kv_get\"]\n",
        );
        let cases: &[(&str, &[&str])] = &[
            (
                "[server]\nlisten = \"127.0.0.1:8940\"\nlog_format = \"json\"\naccess_log = false\n\
                 [scripts]\nmax_ticks = 99\nworkers = 2\nmax_depth = 2\n[policy.roles.b]\n\
                 call = [\"*\"]\n[telemetry]\nsample_ratio = 0.5\n[[sign_in.issuers]]\n\
                 issuer = \"https://idp.example.com\"\n",
                &[],
            ),
            (
                "[server]\nlisten = \"0.0.0.0:8940\"\n[scripts]\nmax_ticks = 10\nworkers = 3\n",
                &["scripts.workers", "server.listen"],
            ),
            (
                "[server]\nlisten = \"127.0.0.1:8940\"\n[scripts]\nmax_ticks = 10\nworkers = 2\n\
                 [store]\nurl = \"postgres://db/x\"\n[[upstreams]]\nalias = \"u\"\n\
                 url = \"https://x.example/mcp\"\n",
                &["[store]", "[[upstreams]]"],
            ),
            // Removing a section is a change too.
            (
                "[scripts]\nmax_ticks = 10\nworkers = 2\n",
                &["server.listen"],
            ),
            (
                "[server]\nlisten = \"127.0.0.1:8940\"\n[scripts]\nworkers = 2\nmax_memory_bytes = 1\n",
                &["scripts.max_memory_bytes"],
            ),
        ];
        for (new, expected) in cases {
            assert_eq!(
                needs_restart(&running, &table(new)),
                expected.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{new}"
            );
        }
    }

    /// The log line of a reload names what it applied, as an operator writes it.
    #[test]
    fn a_reload_names_what_it_changed() {
        let running =
            table("[server]\nlisten = \"127.0.0.1:8940\"\n[policy.roles.a]\ncall = [\"x\"]\n");
        let new = table(
            "[server]\nlisten = \"127.0.0.1:8940\"\naccess_log = false\n[policy.roles.a]\n\
             call = [\"x\"]\n[telemetry]\nsample_ratio = 0.5\n[[sign_in.issuers]]\n\
             issuer = \"https://idp.example.com\"\n",
        );
        assert_eq!(
            changed_keys(&running, &new),
            ["[sign_in]", "[telemetry]", "server.access_log"]
        );
        assert!(changed_keys(&running, &running).is_empty());
    }
}
