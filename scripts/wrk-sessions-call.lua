-- wrk script: `tools/call clock_now` on 2025-11-25 sessions opened beforehand, taking the next
-- session for each request, so that every connection's calls spread over all of them. Used by
-- scripts/bench-edge.sh against larkgate and the Python SDK server alike:
--
--   WRK_SESSIONS=id1,id2,... [WRK_TOKEN=lgt_...] wrk -t2 -c32 -d10s --latency \
--       -s scripts/wrk-sessions-call.lua http://127.0.0.1:8940/mcp
--
-- Each request has a JSON-RPC id of its own. The last line counts the answers with a status of
-- 400 or more (`refused`), and the 200s that carried a JSON-RPC error or an `isError` result
-- (`failed`).

local sessions = {}
for id in string.gmatch(os.getenv("WRK_SESSIONS") or "", "[^,]+") do
  table.insert(sessions, id)
end
if #sessions == 0 then
  error("set WRK_SESSIONS to the comma-separated ids of open sessions")
end

local token = os.getenv("WRK_TOKEN")
local next_session = 0
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk-counting.lua")

function init(args)
  -- Threads start at different sessions.
  next_session = math.random(#sessions) - 1
  reset_counts()
end

function request()
  next_session = next_session % #sessions + 1
  local body = '{"jsonrpc":"2.0","id":' .. tostring(next_id())
    .. ',"method":"tools/call","params":{"name":"clock_now","arguments":{}}}'
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2025-11-25",
    ["Mcp-Session-Id"] = sessions[next_session],
  }
  if token and token ~= "" then
    headers["Authorization"] = "Bearer " .. token
  end
  return wrk.format("POST", nil, headers, body)
end
