//! `larkgate capabilities`: what the built-in tools are and how to call them.

use std::io::Write;

use anyhow::Context;
use larkgate_platform::{Listing, capabilities};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the listing as JSON (an array of objects) instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args, out: &mut impl Write) -> anyhow::Result<()> {
    let listings =
        capabilities::listings().context("a built-in capability's binding plan is invalid")?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &listings)?;
        writeln!(out)?;
    } else {
        for (i, listing) in listings.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            write_text(listing, out)?;
        }
    }
    Ok(())
}

fn write_text(listing: &Listing, out: &mut impl Write) -> anyhow::Result<()> {
    let kind = if listing.annotations.read_only {
        "read-only"
    } else {
        "write"
    };
    writeln!(out, "{}", listing.signature)?;
    writeln!(out, "  {} ({kind})", listing.title)?;
    writeln!(out, "  {}", listing.description)?;
    let returns: Vec<String> = listing
        .output_shape
        .iter()
        .map(|f| format!("{}: {}", f.name, f.ty))
        .collect();
    writeln!(out, "  returns: {{{}}}", returns.join(", "))?;
    writeln!(out, "  input schema:  {}", listing.input_schema)?;
    writeln!(out, "  output schema: {}", listing.output_schema)?;
    Ok(())
}
