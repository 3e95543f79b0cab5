-- wrk script: `tools/call kv_set` on `larkgate serve` over the 2026-07-28 revision, each
-- request a new key (per thread, cycling through 100,000) so that writes do not queue on one
-- row, and a JSON-RPC id of its own.
--
--   LARKGATE_TOKEN=lgt_... wrk -t2 -c32 -d20s --latency -s scripts/wrk-kv-set.lua \
--       http://127.0.0.1:8940/mcp
--
-- Every answer must be 200 and a result that is no error: the last line counts the answers
-- with a status of 400 or more (`refused`), and the 200s that carried a JSON-RPC error or an
-- `isError` result (`failed`). LARKGATE_KEY_PREFIX (default `bench`) keeps the keys of wrk
-- processes run at once apart.

local token = os.getenv("LARKGATE_TOKEN")
if not token or token == "" then
  error("set LARKGATE_TOKEN to a token of a principal that may call kv_set")
end
local prefix = os.getenv("LARKGATE_KEY_PREFIX") or "bench"
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk-counting.lua")

function request()
  local request_id = next_id()
  local key = prefix .. "-" .. tostring(id) .. "-" .. tostring(counter % 100000)
  local body = '{"jsonrpc":"2.0","id":' .. tostring(request_id)
    .. ',"method":"tools/call","params":{"name":"kv_set",'
    .. '"arguments":{"key":"' .. key .. '","value":"v"},'
    .. '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    .. '"io.modelcontextprotocol/clientCapabilities":{}}}}'
  return wrk.format("POST", nil, {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2026-07-28",
    ["Mcp-Method"] = "tools/call",
    ["Mcp-Name"] = "kv_set",
  }, body)
end
