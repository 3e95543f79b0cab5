//! What larkgate writes to stderr: log lines through `tracing`, as text or one JSON object per
//! line, and the few lines a command says to the person or program that started it (where it
//! serves, which configuration it read, why it failed), in the same format.
//!
//! - The format is `--log-format`, else `LARKGATE_LOG_FORMAT`, else `[server] log_format`,
//!   else `text`.
//! - Text has colours only when stderr is a terminal and `NO_COLOR` is not set, so a log file
//!   or a collector never gets escape codes.
//! - What is logged is `RUST_LOG`, else warnings only, except that `serve` and `stdio` also
//!   log the upstreams' allow-lists at start and the end of a background task's failure
//!   (`larkgate_platform::failing::RECOVERED`; see `Cli::default_log_filter`). What a command
//!   says ([`say`]) is an `info` event of the target [`SAY`], which the default filters let
//!   through.
//! - Access lines (`[server] access_log`) are events of the target
//!   [`larkgate_platform::observe::ACCESS`]; the log writes them while [`set_access_lines`]
//!   says so.
//!
//! A reload changes the format ([`set_format`], unless the flag or the variable chose it) and
//! whether access lines are written, from the next line on.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

pub use larkgate_edge::server::LogFormat;

/// The environment variable naming the format.
pub const LOG_FORMAT_ENV: &str = "LARKGATE_LOG_FORMAT";

/// The target of what a command says, in JSON.
pub const SAY: &str = "larkgate_cli";

/// The format in force: 0 text, 1 JSON.
static FORMAT: AtomicU8 = AtomicU8::new(0);
/// Whether `--log-format` or [`LOG_FORMAT_ENV`] chose the format (a reload then keeps it).
static FORMAT_CHOSEN: AtomicBool = AtomicBool::new(false);
/// Whether access lines are written.
static ACCESS_LINES: AtomicBool = AtomicBool::new(true);

/// The format in force.
pub fn format() -> LogFormat {
    match FORMAT.load(Ordering::Relaxed) {
        1 => LogFormat::Json,
        _ => LogFormat::Text,
    }
}

/// Writes lines in `format` from now on, unless `--log-format` or [`LOG_FORMAT_ENV`] chose
/// the format at start: then nothing changes, and the answer is `false`.
pub(crate) fn set_format(format: LogFormat) -> bool {
    if FORMAT_CHOSEN.load(Ordering::Relaxed) {
        return false;
    }
    let code = match format {
        LogFormat::Text => 0,
        LogFormat::Json => 1,
    };
    FORMAT.store(code, Ordering::Relaxed);
    true
}

/// Whether access lines are written from now on (`[server] access_log`).
pub(crate) fn set_access_lines(on: bool) {
    ACCESS_LINES.store(on, Ordering::Relaxed);
}

/// The event format: text or JSON, whichever is in force when the event is written.
struct Switched {
    text: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Full>,
    json: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json>,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Switched
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        match format() {
            LogFormat::Text => self.text.format_event(context, writer, event),
            LogFormat::Json => self.json.format_event(context, writer, event),
        }
    }
}

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

/// Installs the subscriber, writing `format` (`chosen`: by `--log-format` or
/// [`LOG_FORMAT_ENV`], which a reload does not override) and logging what `filter` lets
/// through unless `RUST_LOG` says otherwise; for a command that serves MCP, with a layer that
/// exports larkgate's spans while traces are exported (see [`crate::telemetry`]): the log's
/// filter does not decide what is traced, nor the other way round.
pub(crate) fn init(
    format: LogFormat,
    chosen: bool,
    filter: &str,
    tracer: Option<crate::telemetry::LiveTracer>,
) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::FilterExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    set_format(format);
    FORMAT_CHOSEN.store(chosen, Ordering::Relaxed);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    // Access lines are asked for each time (the switch may change); every other callsite's
    // answer is kept.
    let access = tracing_subscriber::filter::dynamic_filter_fn(|meta, _| {
        meta.target() != larkgate_platform::observe::ACCESS || ACCESS_LINES.load(Ordering::Relaxed)
    })
    .with_callsite_filter(|meta| {
        if meta.target() == larkgate_platform::observe::ACCESS {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    });
    let events = Switched {
        text: tracing_subscriber::fmt::format().with_target(false),
        json: tracing_subscriber::fmt::format()
            .with_target(false)
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false),
    };
    // JSON carries no colour codes whatever the writer allows.
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colours())
        .event_format(events)
        .with_filter(filter.and(access));
    // larkgate's own spans, and the warnings and errors logged inside them as span events;
    // never the libraries' (rmcp's, hyper's, the exporter's own). Asked for each time, since
    // a reload turns export on and off.
    let traces = tracer.map(|tracer| {
        let exporting =
            tracing_subscriber::filter::dynamic_filter_fn(|_, _| crate::telemetry::exporting());
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
                    )
                    .and(exporting),
            )
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
    match format() {
        LogFormat::Text => eprintln!("larkgate: {text}"),
        LogFormat::Json => tracing::info!(target: SAY, "{text}"),
    }
}

/// Says why the command failed: as [`say`], at `error` in JSON.
pub fn fail(text: &str) {
    match format() {
        LogFormat::Text => eprintln!("larkgate: {text}"),
        LogFormat::Json => tracing::error!(target: SAY, "{text}"),
    }
}
