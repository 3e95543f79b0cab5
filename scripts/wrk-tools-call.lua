-- wrk script: `tools/call clock_now` (no arguments), each request with a JSON-RPC id of its own.
--
-- On `larkgate serve`, over the 2026-07-28 revision (stateless: every request carries the bearer
-- token and the protocol headers):
--
--   LARKGATE_TOKEN=lgt_... wrk -t2 -c32 -d20s --latency -s scripts/wrk-tools-call.lua \
--       http://127.0.0.1:8940/mcp
--
-- WRK_TOOL names another tool (no arguments); WRK_NO_TOKEN=1 sends no token (a server without
-- authentication, such as the baseline an upstream is measured against). WRK_SESSION=ID calls
-- over the 2025-11-25 revision in that open session instead (a server without the 2026 one,
-- such as the TypeScript SDK's), every connection in the same session.
--
-- Every answer must be 200 and a result that is no error: the last line counts the answers with
-- a status of 400 or more (`refused`), and the 200s that carried a JSON-RPC error or an
-- `isError` result (`failed`).

local token = os.getenv("LARKGATE_TOKEN")
if os.getenv("WRK_NO_TOKEN") == "1" then
  token = nil
end
local tool = os.getenv("WRK_TOOL") or "clock_now"
local session = os.getenv("WRK_SESSION")
if session == "" then
  session = nil
end
if os.getenv("WRK_NO_TOKEN") ~= "1" and (not token or token == "") then
  error("set LARKGATE_TOKEN to a token of a principal that may call " .. tool)
end

local headers = {
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",
}
local meta = ""
if session then
  headers["MCP-Protocol-Version"] = "2025-11-25"
  headers["Mcp-Session-Id"] = session
else
  headers["MCP-Protocol-Version"] = "2026-07-28"
  headers["Mcp-Method"] = "tools/call"
  headers["Mcp-Name"] = tool
  meta = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    .. '"io.modelcontextprotocol/clientCapabilities":{}}'
end
if token and token ~= "" then
  headers["Authorization"] = "Bearer " .. token
end
local rest = ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{}' .. meta .. '}}'

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk-counting.lua")

function request()
  return wrk.format("POST", nil, headers, '{"jsonrpc":"2.0","id":' .. tostring(next_id()) .. rest)
end
