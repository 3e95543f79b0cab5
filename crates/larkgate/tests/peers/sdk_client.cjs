// An agent's session with `larkgate serve`, driven by the official MCP TypeScript SDK client
// (2025-11-25, the revision this SDK offers). The same steps as sdk_client.py.
//
// Usage: node sdk_client.cjs URL TOKENS_JSON SUFFIX   (NODE_PATH: the node_modules holding
// @modelcontextprotocol/sdk). The last line printed is "ok: <steps>".

const assert = require("node:assert/strict");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, tokensJson, suffix] = process.argv.slice(2);
const tokens = JSON.parse(tokensJson);
const steps = [];

const GREET = `
def main(*, name: str):
    """Greets someone and says when."""
    now = clock_now()
    print("greeting " + name)
    return {"greeting": "hello " + name, "at": now["rfc3339"]}
`;

async function connect(token) {
  const client = new Client({ name: "larkgate-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

// `callTool` checks a result's structured content against the tool's output schema, for
// error results too; larkgate's refusals carry none (the envelope is in `_meta`), so every
// call, refused or not, goes through `callTool` as a client application's would.
const call = (client, name, args) => client.callTool({ name, arguments: args });


function envelope(result, code) {
  assert.equal(result.isError, true, `expected a ${code} refusal, got ${JSON.stringify(result)}`);
  assert.equal(result.structuredContent, undefined, "an error result carries no structured content");
  const env = result._meta && result._meta["larkgate/envelope"];
  assert.equal(env && env.code, code, `expected ${code}, got ${JSON.stringify(result)}`);
  assert.ok(env.message);
  // What a person sees in a client that shows only text: code, message, hint, approval id.
  const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
  assert.ok(text.startsWith(`${code}: ${env.message}`), text);
  if (env.hint) assert.ok(text.includes(`hint: ${env.hint}`), text);
  if (env.approval_id) assert.ok(text.includes(`approval id: ${env.approval_id}`), text);
  return env;
}

function structured(result) {
  assert.notEqual(result.isError, true, `expected success, got ${JSON.stringify(result)}`);
  return result.structuredContent;
}

async function main() {
  const draft = `greet_${suffix}`;
  let author = await connect(tokens.author);
  const names = new Set((await author.listTools()).tools.map((t) => t.name));
  for (const expected of ["clock_now", "kv_get", "script_save_draft", "script_run_draft", "run_get"]) {
    assert.ok(names.has(expected), `${expected} is not listed`);
  }
  assert.ok(!names.has("approvals_approve"), "an author sees the approvers' tools");
  assert.ok(!names.has("script_publish"), "an author sees the publishers' tools");
  steps.push("list");

  assert.ok("rfc3339" in structured(await call(author, "clock_now", {})));
  steps.push("call_capability");

  const saved = structured(await call(author, "script_save_draft", { name: draft, source: GREET }));
  assert.equal(saved.signature, "main(*, name: str) -> any");
  const ran = structured(await call(author, "script_run_draft", { name: draft, args: { name: "Ada" } }));
  assert.equal(ran.result.greeting, "hello Ada");
  assert.equal(ran.printed, "greeting Ada\n");
  const record = structured(await call(author, "run_get", { run_id: ran.run_id }));
  assert.equal(record.status, "succeeded");
  steps.push("run_draft");

  envelope(await call(author, "script_run_draft", { source: "def main():\n    kv_set(key = 'k', value = 'v')\n" }), "write_barrier");
  steps.push("write_barrier");

  envelope(await call(author, `script__${draft}`, { name: "Ada" }), "not_found");
  envelope(await call(author, "no_such_tool", {}), "not_found");
  steps.push("not_found");

  const publisher = await connect(tokens.publisher);
  const version = structured(await call(publisher, "script_publish", { name: draft }));
  assert.equal(version.tool, `script__${draft}`);
  await publisher.close();
  steps.push("publish");

  await author.close();
  author = await connect(tokens.author);
  const tool = (await author.listTools()).tools.find((t) => t.name === `script__${draft}`);
  assert.ok(tool, "the published script is not listed");
  assert.equal(tool.description, "Greets someone and says when.");
  assert.equal(tool.inputSchema.properties.name.type, "string");
  const called = structured(await call(author, `script__${draft}`, { name: "Bob" }));
  assert.equal(called.result.greeting, "hello Bob");
  const published = structured(await call(author, "run_get", { run_id: called.run_id }));
  assert.equal(published.principal, `script:${draft}`);
  steps.push("call_script_tool");

  envelope(await call(author, `script__${draft}`, { name: 7 }), "invalid_arguments");
  steps.push("invalid_arguments");

  let limited = null;
  for (let i = 0; i < 5 && !limited; i++) {
    const result = await call(author, "kv_list", {});
    if (result.isError) limited = envelope(result, "rate_limited");
  }
  assert.ok(limited, "kv_list was never rate limited");
  assert.ok(limited.retry_after_seconds >= 1);
  steps.push("rate_limited");

  const gated = envelope(await call(author, "kv_delete", { key: `gone_${suffix}` }), "approval_required");
  const approver = await connect(tokens.approver);
  structured(await call(approver, "approvals_approve", { id: gated.approval_id }));
  await approver.close();
  assert.ok("deleted" in structured(await call(author, "kv_delete", { key: `gone_${suffix}` })));
  steps.push("approval_required");
  await author.close();

  try {
    await connect("lgt_000000000000_" + "A".repeat(43));
    assert.fail("a client with an unknown token was served");
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    const text = String(error && (error.stack || error));
    assert.ok(/401|unauthenticated|Unauthorized/i.test(text), text);
  }
  steps.push("unauthenticated");
  console.log("ok: " + steps.join(" "));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
