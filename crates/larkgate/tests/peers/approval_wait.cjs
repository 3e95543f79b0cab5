// A gated call that waits for its approver, driven by the official MCP TypeScript SDK client
// (2025-11-25, the revision this SDK offers). The server's policy gates `kv_delete` with a 30 s
// wait. The same scenarios as approval_wait.py, each printing one line:
//
// - "approved": the held call runs once the approver approves; the caller was told of the wait
//   by progress notifications ("waiting for an approver: approval ID, asked HH:MM UTC");
// - "withdrawn": the caller aborts its held call (the SDK sends notifications/cancelled); the
//   request is then `withdrawn`.
//
// Usage: node approval_wait.cjs URL CALLER_TOKEN APPROVER_TOKEN SUFFIX   (NODE_PATH: the
// node_modules holding @modelcontextprotocol/sdk). The last line printed is "ok: ts".

const assert = require("node:assert/strict");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, caller, approver, suffix] = process.argv.slice(2);
const WAITING = /^waiting for an approver: approval (\S+), asked \d\d:\d\d UTC$/;

async function connect(token) {
  const client = new Client({ name: "larkgate-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

// The id of the request for `key` once the approver sees it with `status` (waits for it).
async function listedId(client, key, status = "pending") {
  const until = Date.now() + 20000;
  for (;;) {
    const listed = await client.callTool({ name: "approvals_list", arguments: { status } });
    assert.notEqual(listed.isError, true, JSON.stringify(listed));
    const found = listed.structuredContent.approvals.find((a) => a.arguments && a.arguments.key === key);
    if (found) return found.id;
    assert.ok(Date.now() < until, `no ${status} request for ${key}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function approved(callerClient, approverClient) {
  const key = `held_${suffix}`;
  const told = [];
  const held = callerClient.callTool({ name: "kv_delete", arguments: { key } }, undefined, {
    onprogress: (progress) => told.push(progress),
    timeout: 60000,
  });
  const id = await listedId(approverClient, key);
  const answer = await approverClient.callTool({ name: "approvals_approve", arguments: { id } });
  assert.notEqual(answer.isError, true, JSON.stringify(answer));
  const result = await held;
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.ok(told.length > 0, "no progress while the call waited");
  assert.equal(told[0].total, 30);
  const match = WAITING.exec(told[0].message);
  assert.ok(match && match[1] === id, told[0].message);
  return "approved";
}

async function withdrawn(callerClient, approverClient) {
  const key = `dropped_${suffix}`;
  const abort = new AbortController();
  const held = callerClient.callTool({ name: "kv_delete", arguments: { key } }, undefined, {
    signal: abort.signal,
    timeout: 60000,
  });
  const id = await listedId(approverClient, key);
  abort.abort("the user gave up");
  await assert.rejects(held);
  assert.equal(await listedId(approverClient, key, "withdrawn"), id);
  return "withdrawn";
}

async function main() {
  const callerClient = await connect(caller);
  const approverClient = await connect(approver);
  console.log(await approved(callerClient, approverClient));
  console.log(await withdrawn(callerClient, approverClient));
  await callerClient.close();
  await approverClient.close();
  console.log("ok: ts");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
