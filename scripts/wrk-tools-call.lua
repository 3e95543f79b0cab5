-- wrk script: `tools/call clock_now` on `larkgate serve` over the 2026-07-28 revision
-- (stateless: every request carries the bearer token and the protocol headers).
--
--   LARKGATE_TOKEN=lgt_... wrk -t2 -c32 -d20s --latency -s scripts/wrk-tools-call.lua \
--       http://127.0.0.1:8940/mcp
--
-- WRK_TOOL names another tool (no arguments); WRK_NO_TOKEN=1 sends no token (a server
-- without authentication, such as the baseline an upstream is measured against).
--
-- Every answer must be 200; the last line counts the ones that were not.

local token = os.getenv("LARKGATE_TOKEN")
if os.getenv("WRK_NO_TOKEN") == "1" then
  token = nil
end
local tool = os.getenv("WRK_TOOL") or "clock_now"
if os.getenv("WRK_NO_TOKEN") ~= "1" and (not token or token == "") then
  error("set LARKGATE_TOKEN to a token of a principal that may call " .. tool)
end

wrk.method = "POST"
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = tool
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' .. tool .. '",'
  .. '"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{}}}}'

function done(summary, latency, requests)
  -- wrk counts answers with a status of 400 and above as status errors.
  io.write(string.format("calls: %d, refused (status >= 400): %d, socket errors: %d\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
