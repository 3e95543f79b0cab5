//! What larkgate writes to stderr: log lines through `tracing`, as text or one JSON object per
//! line, and the few lines a command says to the person or program that started it (where it
//! serves, which configuration it read, why it failed), in the same format.
//!
//! - The format is `--log-format`, else `LARKGATE_LOG_FORMAT`, else `[server] log_format`,
//!   else `text`.
//! - Text has colours only when stderr is a terminal and `NO_COLOR` is not set, so a log file
//!   or a collector never gets escape codes.
//! - What is logged is `RUST_LOG`, else warnings only, except that `serve` and `stdio` also
//!   log the upstreams' allow-lists at start (see `Cli::default_log_filter`). What a command
//!   says ([`say`]) is an `info` event of the target [`SAY`], which the default filters let
//!   through.

use std::io::IsTerminal;
use std::sync::OnceLock;

pub use larkgate_edge::server::LogFormat;

/// The environment variable naming the format.
pub const LOG_FORMAT_ENV: &str = "LARKGATE_LOG_FORMAT";

/// The target of what a command says, in JSON.
pub const SAY: &str = "larkgate_cli";

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The format named by `--log-format`: clap lists the possible values when it is another.
pub(crate) fn format_flag() -> impl clap::builder::TypedValueParser<Value = LogFormat> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["text", "json"]).map(|name: String| {
        if name == "json" {
            LogFormat::Json
        } else {
            LogFormat::Text
        }
    })
}

/// The format from the environment variable's value, or what is wrong with it.
pub fn parse_format(value: &str) -> Result<LogFormat, String> {
    match value {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!(
            "{LOG_FORMAT_ENV}={other:?} is not a log format: use \"text\" or \"json\""
        )),
    }
}

/// Installs the subscriber for `format`, logging what `filter` lets through unless `RUST_LOG`
/// says otherwise, and exporting larkgate's spans through `tracer` when there is one (see
/// [`crate::telemetry`]): the log's filter does not decide what is traced, nor the other way
/// round.
pub(crate) fn init(
    format: LogFormat,
    filter: &str,
    tracer: Option<opentelemetry_sdk::trace::Tracer>,
) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    let lines = match format {
        LogFormat::Text => lines.with_ansi(colours()).with_filter(filter).boxed(),
        LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
    };
    // larkgate's own spans, and the warnings and errors logged inside them as span events;
    // never the libraries' (rmcp's, hyper's, the exporter's own).
    let traces = tracer.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("larkgate", tracing::Level::INFO)
                    .with_target(
                        crate::logging::SAY,
                        tracing::level_filters::LevelFilter::OFF,
                    )
                    .with_target(
                        larkgate_platform::observe::ACCESS,
                        tracing::level_filters::LevelFilter::OFF,
                    ),
            )
            .boxed()
    });
    tracing_subscriber::registry()
        .with(lines)
        .with(traces)
        .init();
}

/// Whether text lines may carry colour codes.
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Says `text` to whoever started the command: `larkgate: TEXT` on stderr, or, in JSON, an
/// `info` event whose message is `text`.
pub fn say(text: &str) {
    match FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Text => eprintln!("larkgate: {text}"),
        LogFormat::Json => tracing::info!(target: SAY, "{text}"),
    }
}

/// Says why the command failed: as [`say`], at `error` in JSON.
pub fn fail(text: &str) {
    match FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Text => eprintln!("larkgate: {text}"),
        LogFormat::Json => tracing::error!(target: SAY, "{text}"),
    }
}
