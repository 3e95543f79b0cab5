// Reads federated content through `larkgate serve` with the official MCP TypeScript SDK client
// (2025-11-25). The same calls as content_client.py.
//
// Usage: node content_client.cjs URL TOKEN IMAGE_BASE64 SOUND_BASE64   (NODE_PATH: the
// node_modules holding @modelcontextprotocol/sdk). The last line printed is "ok: <steps>".

const assert = require("node:assert/strict");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, token, image, sound] = process.argv.slice(2);
const steps = [];

function content(result) {
  assert.notEqual(result.isError, true, `expected success, got ${JSON.stringify(result)}`);
  return result.content;
}

async function main() {
  const client = new Client({ name: "larkgate-content-test", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  const call = (name, args) => client.callTool({ name, arguments: args });

  const pictured = content(await call("everything__get-tiny-image", {}));
  assert.deepEqual(pictured.map((c) => c.type), ["text", "image", "text"]);
  assert.equal(pictured[1].mimeType, "image/png");
  assert.equal(pictured[1].data, image);
  steps.push("image");

  const heard = content(await call("py__sound", {}));
  assert.deepEqual(heard.map((c) => c.type), ["text", "audio"]);
  assert.equal(heard[1].mimeType, "audio/wav");
  assert.equal(heard[1].data, sound);
  steps.push("audio");

  const links = content(await call("everything__get-resource-links", { count: 2 }));
  assert.deepEqual(links.map((c) => c.type), ["text", "resource_link", "resource_link"]);
  for (const link of links.slice(1)) assert.ok(link.uri.startsWith("demo://resource/"), link.uri);
  steps.push("resource_link");

  const embedded = content(
    await call("everything__get-resource-reference", { resourceType: "Text", resourceId: 1 }),
  );
  assert.deepEqual(embedded.map((c) => c.type), ["text", "resource", "text"]);
  assert.equal(embedded[1].resource.uri, "demo://resource/dynamic/text/1");
  assert.ok(embedded[1].resource.text.startsWith("Resource 1: "));
  steps.push("embedded_resource");

  const annotated = content(
    await call("everything__get-annotated-message", { messageType: "error", includeImage: true }),
  );
  assert.equal(annotated[0].annotations.priority, 1.0);
  assert.deepEqual(annotated[1].annotations.audience, ["user"]);
  steps.push("annotations");

  const echoed = await call("everything__echo", { message: "hello" });
  assert.equal(content(echoed)[0].text, "Echo: hello");
  assert.equal(echoed.structuredContent, undefined);
  steps.push("text");

  await client.close();
  console.log("ok: " + steps.join(" "));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
