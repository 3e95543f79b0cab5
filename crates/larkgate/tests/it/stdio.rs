//! `larkgate stdio` as a desktop client starts it: a child process speaking MCP on its pipes,
//! authenticated by `LARKGATE_TOKEN` or `--token-file`.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::{fails, ok};

fn command(dir: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_larkgate"));
    command.current_dir(dir).arg("stdio");
    command
}

#[test]
fn a_desktop_client_lists_and_calls_as_the_token_s_principal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("larkgate.toml"),
        "[policy.roles.admin]\ncall = [\"*\"]\n[policy.roles.reader]\ncall = [\"kv_get\", \"clock_now\"]\n",
    )
    .unwrap();
    ok(d, &["principal", "add", "desk", "--roles", "reader,author"]);
    let token = ok(d, &["token", "create", "--principal", "desk"])
        .trim()
        .to_owned();
    std::fs::write(d.join("token"), format!("{token}\n")).unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for from_file in [false, true] {
            let mut child = command(d);
            if from_file {
                child.args(["--token-file", "token"]);
            } else {
                child.env("LARKGATE_TOKEN", &token);
            }
            let client = ().serve(TokioChildProcess::new(child).unwrap()).await.unwrap();
            let tools = client.list_all_tools().await.unwrap();
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            assert!(names.contains(&"kv_get"), "{names:?}");
            assert!(!names.contains(&"kv_set"), "not the reader's: {names:?}");
            let now = client
                .call_tool(CallToolRequestParams::new("clock_now"))
                .await
                .unwrap();
            assert!(now.structured_content.unwrap()["unix_ms"].as_i64().unwrap() > 0);
            let refused = client
                .call_tool(CallToolRequestParams::new("kv_set"))
                .await
                .unwrap();
            assert_eq!(refused.is_error, Some(true));
            // Code mode over stdio: a draft runs in a worker, as the token's principal.
            let source = "def main():\n    return clock_now()['unix_ms'] > 0\n";
            let ran = client
                .call_tool(
                    CallToolRequestParams::new("script_run_draft").with_arguments(
                        serde_json::json!({"source": source})
                            .as_object()
                            .unwrap()
                            .clone(),
                    ),
                )
                .await
                .unwrap();
            assert_eq!(
                ran.structured_content.as_ref().unwrap()["result"],
                true,
                "{ran:?}"
            );
            client.cancel().await.unwrap();
        }
    });
    let tail = ok(d, &["audit", "tail", "--principal", "desk"]);
    assert!(tail.contains("clock_now -> ok"), "{tail}");
    assert!(tail.contains("script_run_draft -> ok"), "{tail}");

    // Without a valid token there is no session.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .arg("stdio")
        .env("LARKGATE_TOKEN", "lgt_nope")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("the token is not valid"));
    let missing = fails(d, &["stdio"]);
    assert!(missing.contains("LARKGATE_TOKEN"), "{missing}");
}
