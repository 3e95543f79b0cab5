//! `larkgate call TOOL [--arg key=value ...] [--args-json JSON]`: one tool call through an
//! in-memory session and the whole pipeline — authorization, write barrier, rate limits,
//! approvals and audit apply exactly as for an agent.

use std::io::Write;

use anyhow::{Context as _, bail};
use larkgate_binding::{FieldShape, Limits, Map, Value, from_json_slice};
use larkgate_caller::{CallError, Caller};
use larkgate_platform::RunContext;

use super::context::Context;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tool's name.
    tool: String,
    /// An argument, `key=value`. For a `str` field the value is taken as it is; otherwise it
    /// is read as JSON when it parses (`n=3`, `flag=true`) and as a string when it does not.
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    args: Vec<String>,
    /// All arguments as one JSON object; `--arg` values are added to it.
    #[arg(long, value_name = "JSON")]
    args_json: Option<String>,
}

/// Builds the argument map from `--args-json` and `--arg`; `shape` (the tool's input shape,
/// when it has one) tells which fields are strings.
pub(crate) fn arguments_from(
    args_json: Option<&str>,
    pairs: &[String],
    shape: Option<&[FieldShape]>,
) -> anyhow::Result<Map> {
    let limits = Limits::default();
    let mut map = match args_json {
        Some(json) => match from_json_slice(json.as_bytes(), limits)
            .context("--args-json is not usable JSON")?
        {
            Value::Map(map) => map,
            other => bail!(
                "--args-json must be a JSON object, not a {}",
                other.type_name()
            ),
        },
        None => Map::new(),
    };
    for pair in pairs {
        let Some((key, raw)) = pair.split_once('=') else {
            bail!("--arg {pair:?} must look like key=value");
        };
        let is_str = shape
            .and_then(|fields| fields.iter().find(|f| f.name == key))
            .is_some_and(|f| f.ty == "str" || f.ty == "str | None");
        let value = if is_str {
            Value::from(raw)
        } else {
            from_json_slice(raw.as_bytes(), limits).unwrap_or_else(|_| Value::from(raw))
        };
        map.insert(key.to_owned(), value);
    }
    Ok(map)
}

pub(crate) async fn run(args: Args, context: &Context, out: &mut impl Write) -> anyhow::Result<()> {
    let run = RunContext::direct(context.actor.clone());
    let (caller, teardown) =
        larkgate_session::connect(&context.platform, run, "cli", Limits::default()).await?;
    let result = async {
        let tools = caller.tools().await?;
        let shape = tools
            .iter()
            .find(|t| t.name == args.tool)
            .and_then(|t| t.input_shape.as_deref());
        let arguments = arguments_from(args.args_json.as_deref(), &args.args, shape)?;
        anyhow::Ok(caller.call_tool(&args.tool, arguments).await)
    }
    .await;
    teardown.close().await;
    let result = result?;
    match result {
        Ok(map) => {
            serde_json::to_writer_pretty(&mut *out, &Value::Map(map))?;
            writeln!(out)?;
            Ok(())
        }
        Err(CallError::Refused(refusal)) => bail!("{} ({})", refusal.text, refusal.code),
        Err(other) => Err(other.into()),
    }
}
