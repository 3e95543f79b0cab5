// Lists and reads federated resources and prompts through `larkgate serve` with the official MCP
// TypeScript SDK client (2025-11-25). The same requests as catalog_client.py.
//
// Usage: node catalog_client.cjs URL TOKEN   (NODE_PATH: the node_modules holding
// @modelcontextprotocol/sdk). The last line printed is "ok: <steps>".

const assert = require("node:assert/strict");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { McpError } = require("@modelcontextprotocol/sdk/types.js");

const [url, token] = process.argv.slice(2);
const LOGO = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex");
const steps = [];

async function main() {
  const client = new Client({ name: "larkgate-catalog-test", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );

  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === "larkgate://py/notes://index"), JSON.stringify(resources));
  steps.push("resources");

  const { resourceTemplates } = await client.listResourceTemplates();
  assert.ok(
    resourceTemplates.some((t) => t.uriTemplate === "larkgate://py/notes://page/{slug}"),
    JSON.stringify(resourceTemplates),
  );
  steps.push("templates");

  const index = await client.readResource({ uri: "larkgate://py/notes://index" });
  assert.equal(index.contents[0].text, "index of the notes");
  assert.equal(index.contents[0].uri, "larkgate://py/notes://index");
  steps.push("text");

  const logo = await client.readResource({ uri: "larkgate://py/notes://logo" });
  assert.deepEqual(Buffer.from(logo.contents[0].blob, "base64"), LOGO);
  assert.equal(logo.contents[0].mimeType, "image/png");
  steps.push("blob");

  const page = await client.readResource({ uri: "larkgate://everything/demo://resource/dynamic/text/7" });
  assert.ok(page.contents[0].text.startsWith("Resource 7: "), JSON.stringify(page));
  steps.push("template");

  const { prompts } = await client.listPrompts();
  const names = prompts.map((p) => p.name);
  assert.ok(names.includes("everything__args-prompt") && names.includes("py__greeting"), names.join());
  steps.push("prompts");

  const got = await client.getPrompt({ name: "everything__args-prompt", arguments: { city: "Lima", state: "LIM" } });
  assert.equal(got.messages[0].role, "user");
  assert.equal(got.messages[0].content.text, "What's weather in Lima, LIM?");
  steps.push("prompt");

  try {
    await client.readResource({ uri: "larkgate://py/notes://page/../../secret" });
    assert.fail("a URI no template admits was read");
  } catch (error) {
    assert.ok(error instanceof McpError, String(error));
    assert.equal(error.code, -32002);
    assert.equal(error.data["larkgate/envelope"].code, "not_found");
    steps.push("refused");
  }
  await client.close();
  console.log("ok: " + steps.join(" "));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
