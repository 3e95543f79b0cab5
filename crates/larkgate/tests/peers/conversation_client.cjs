// A client's conversation with a server during a call, driven by the official MCP TypeScript
// SDK client (2025-11-25, the revision this SDK offers). The same commands as
// conversation_client.py, printing the same JSON; run against larkgate and against the server
// directly, so that a test can compare the two.
//
// Usage (NODE_PATH: the node_modules holding @modelcontextprotocol/sdk; the bearer token in
// LARKGATE_TOKEN, when set; TARGET is `http:URL` or `stdio:COMMAND ARG...`):
//   node conversation_client.cjs progress TARGET TOOL ARGS_JSON
//   node conversation_client.cjs logs TARGET TOOL ARGS_JSON LEVEL WAIT
//   node conversation_client.cjs ask TARGET TOOL ARGS_JSON ANSWERS_JSON
//   node conversation_client.cjs subscribe TARGET URI TOOL ARGS_JSON
//
// `progress` prints {"progress": [[progress, total, message], ...], "text"}; `logs` sets the
// level, calls, waits (at most 20 s) until it heard WAIT messages and prints {"logs": [{level,
// logger, data}], "text"}; `ask` answers elicitations ({"elicit": an ElicitResult}) and
// sampling requests ({"sample": {"text", "model"}}) as ANSWERS_JSON says, declaring only those,
// and prints {"asked": [each request's params without its _meta], "text", "is_error"}, or
// {"asked", "error"} when the call is refused; `subscribe` subscribes to URI, calls TOOL, waits
// (at most 20 s) for an update of URI and prints {"updated": [each URI heard]}.

const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} = require("@modelcontextprotocol/sdk/types.js");

const [what, target, ...rest] = process.argv.slice(2);

async function connect(capabilities, prepare) {
  const client = new Client({ name: "larkgate-test", version: "1.0.0" }, { capabilities });
  if (prepare) prepare(client);
  let transport;
  if (target.startsWith("http:")) {
    const token = process.env.LARKGATE_TOKEN;
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    transport = new StreamableHTTPClientTransport(new URL(target.slice("http:".length)), {
      requestInit: { headers },
    });
  } else {
    const [command, ...args] = target.slice("stdio:".length).split(" ");
    transport = new StdioClientTransport({ command, args, stderr: "ignore" });
  }
  await client.connect(transport);
  return client;
}

const textOf = (result) =>
  result.content
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");

// Resolves once `done()` says so, or after 20 s (the test then sees what was heard).
function until(done) {
  return new Promise((resolve) => {
    const started = Date.now();
    const poll = () => (done() || Date.now() - started > 20000 ? resolve() : setTimeout(poll, 20));
    poll();
  });
}

async function progress(tool, args) {
  const heard = [];
  const client = await connect({});
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, {
    onprogress: (p) => heard.push([p.progress, p.total ?? null, p.message ?? null]),
  });
  await client.close();
  return { progress: heard, text: textOf(result) };
}

async function logs(tool, args, level, wait) {
  const heard = [];
  const client = await connect({}, (c) =>
    c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      const { level, logger, data } = n.params;
      heard.push({ level, logger: logger ?? null, data });
    }),
  );
  try {
    await client.setLoggingLevel(level);
  } catch {
    // A server without logging/setLevel sends what it chooses.
  }
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  await until(() => heard.length >= Number(wait));
  await client.close();
  return { logs: heard, text: textOf(result) };
}

async function ask(tool, args, answersJson) {
  const answers = JSON.parse(answersJson);
  const asked = [];
  const capabilities = {};
  if ("elicit" in answers) capabilities.elicitation = {};
  if ("sample" in answers) capabilities.sampling = {};
  const client = await connect(capabilities, (c) => {
    if ("elicit" in answers) {
      c.setRequestHandler(ElicitRequestSchema, async (request) => {
        const { _meta, ...params } = request.params;
        asked.push(params);
        return answers.elicit;
      });
    }
    if ("sample" in answers) {
      c.setRequestHandler(CreateMessageRequestSchema, async (request) => {
        asked.push({ mode: "sampling", messages: request.params.messages.map((m) => m.content.text) });
        return {
          role: "assistant",
          content: { type: "text", text: answers.sample.text },
          model: answers.sample.model,
        };
      });
    }
  });
  try {
    const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
    return { asked, text: textOf(result), is_error: result.isError ?? false };
  } catch (error) {
    return { asked, error: error.message };
  } finally {
    await client.close();
  }
}

async function subscribe(uri, tool, args) {
  const updated = [];
  const client = await connect({}, (c) =>
    c.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.push(n.params.uri)),
  );
  await client.subscribeResource({ uri });
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  if (result.isError) throw new Error(JSON.stringify(result));
  await until(() => updated.includes(uri));
  await client.unsubscribeResource({ uri });
  await client.close();
  return { updated };
}

const commands = { progress, logs, ask, subscribe };

commands[what](...rest).then(
  (printed) => {
    console.log(JSON.stringify(printed));
    process.exit(0);
  },
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
