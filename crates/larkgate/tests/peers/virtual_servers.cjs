// A client of one of larkgate's endpoints (`/mcp` or a virtual server's `/mcp/NAME`), driven by
// the official MCP TypeScript SDK client (2025-11-25): the same steps, printing the same lines,
// as virtual_servers.py.
//
// Usage: node virtual_servers.cjs URL TOKEN STEPS_JSON   (NODE_PATH: the node_modules holding
// @modelcontextprotocol/sdk). Each step prints one JSON line; see virtual_servers.py.

const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ToolListChangedNotificationSchema } = require("@modelcontextprotocol/sdk/types.js");

const [url, token, stepsJson] = process.argv.slice(2);

function say(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

async function toolNames(client) {
  return (await client.listTools()).tools.map((tool) => tool.name);
}

async function answerOrError(run, shape) {
  try {
    say(shape(await run()));
  } catch (error) {
    say({ error: error.message });
  }
}

async function step(client, told, step) {
  if (step === "lists") {
    say({
      tools: await toolNames(client),
      prompts: (await client.listPrompts()).prompts.map((p) => p.name),
      resources: (await client.listResources()).resources.map((r) => r.uri),
      templates: (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate),
      instructions: client.getInstructions() ?? null,
    });
  } else if (step === "changes") {
    // A round trip after the session opened, so that its stream for notifications is open.
    await client.listTools();
    say({ listening: true });
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("not told in 30 s")), 30000);
    });
    await Promise.race([told, late]);
    clearTimeout(timer);
    say({ tools: await toolNames(client) });
  } else if ("call" in step) {
    const result = await client.callTool({ name: step.call, arguments: step.arguments ?? {} });
    const first = (result.content ?? [])[0];
    say({ text: first ? first.text : null, is_error: Boolean(result.isError) });
  } else if ("read" in step) {
    await answerOrError(
      () => client.readResource({ uri: step.read }),
      (read) => ({ uris: read.contents.map((c) => c.uri), texts: read.contents.map((c) => c.text) }),
    );
  } else if ("get" in step) {
    await answerOrError(
      () => client.getPrompt({ name: step.get, arguments: step.arguments ?? {} }),
      (got) => ({ texts: got.messages.map((m) => m.content.text) }),
    );
  } else if ("complete" in step) {
    const ref =
      step.complete === "prompt"
        ? { type: "ref/prompt", name: step.ref }
        : { type: "ref/resource", uri: step.ref };
    await answerOrError(
      () => client.complete({ ref, argument: { name: step.argument, value: step.value } }),
      (result) => ({ values: result.completion.values }),
    );
  } else {
    throw new Error(`unknown step ${JSON.stringify(step)}`);
  }
}

async function main() {
  const client = new Client({ name: "larkgate-virtual-servers-test", version: "1.0.0" });
  let tell;
  const told = new Promise((resolve) => {
    tell = resolve;
  });
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => tell());
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  for (const each of JSON.parse(stepsJson)) {
    await step(client, told, each);
  }
  await client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
