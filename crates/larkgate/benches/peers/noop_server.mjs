// The TypeScript baseline of larkgate's federation benchmark: the official MCP TypeScript SDK's
// server (pinned in scripts/node-package.json) with one trivial tool, `clock_now`, answering what
// larkgate's built-in `clock_now` and noop_server.py answer.
//
// Usage: node noop_server.mjs NODE_MODULES          (binds 127.0.0.1 on a free port, prints the
//                                                    port, serves /mcp)
//        node noop_server.mjs NODE_MODULES stdio    (serves over standard input and output)
//
// Over HTTP it is deployed as the SDK's documentation deploys a server that keeps sessions: one
// transport and one server per session (an `initialize` opens one, `Mcp-Session-Id` finds it),
// answers as the SDK's default event streams, on Node's own `http` server with Nagle's algorithm
// off. Larkgate reaches it as any client does, through a session of its own; a benchmark calling
// it directly opens one first.

import http from 'node:http';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';

const modules = process.argv[2];
const sdk = (file) =>
  import(pathToFileURL(path.join(modules, '@modelcontextprotocol', 'sdk', 'dist', 'esm', file)).href);
const { McpServer } = await sdk('server/mcp.js');
const { StreamableHTTPServerTransport } = await sdk('server/streamableHttp.js');
const { StdioServerTransport } = await sdk('server/stdio.js');
const { isInitializeRequest } = await sdk('types.js');

function server() {
  const mcp = new McpServer({ name: 'noop-baseline-ts', version: '1.0.0' });
  mcp.registerTool(
    'clock_now',
    { description: 'The current time in UTC.', annotations: { readOnlyHint: true } },
    async () => {
      const ms = Date.now();
      const now = { unix_ms: ms, rfc3339: new Date(ms).toISOString() };
      return { content: [{ type: 'text', text: JSON.stringify(now) }], structuredContent: now };
    },
  );
  return mcp;
}

if (process.argv[3] === 'stdio') {
  await server().connect(new StdioServerTransport());
} else {
  const sessions = new Map();
  const listener = http.createServer(async (req, res) => {
    try {
      const id = req.headers['mcp-session-id'];
      if (id !== undefined) {
        const transport = sessions.get(id);
        if (transport === undefined) {
          res.writeHead(404).end('no such session');
          return;
        }
        await transport.handleRequest(req, res);
        return;
      }
      // A new session: the body must be an initialize request.
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(400).end('initialize first');
        return;
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sessionId) => sessions.set(sessionId, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
      };
      await server().connect(transport);
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  listener.on('connection', (socket) => socket.setNoDelay(true));
  listener.keepAliveTimeout = 60_000;
  listener.listen(0, '127.0.0.1', () => {
    console.log(listener.address().port);
  });
}
