-- wrk script: `tools/call clock_now` on one 2025-11-25 session of `larkgate serve` (the revision
-- the TypeScript SDK and most desktop clients speak). Open the session first, then pass its id:
--
--   LARKGATE_TOKEN=lgt_... LARKGATE_SESSION=... wrk -t1 -c1 -d10s --latency \
--       -s scripts/wrk-session-call.lua http://127.0.0.1:8940/mcp
--
-- `scripts/wrk-session-call.sh URL` does both. The last line counts answers that were not 200.

local token = os.getenv("LARKGATE_TOKEN")
local session = os.getenv("LARKGATE_SESSION")
if not token or token == "" or not session or session == "" then
  error("set LARKGATE_TOKEN and LARKGATE_SESSION (see scripts/wrk-session-call.sh)")
end

wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
wrk.headers["Mcp-Session-Id"] = session
wrk.body = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"clock_now","arguments":{}}}'

function done(summary, latency, requests)
  io.write(string.format("calls: %d, refused (status >= 400): %d, socket errors: %d\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
