-- wrk script: `tools/call clock_now` on 2025-11-25 sessions opened beforehand, taking the next
-- session for each request, so that every connection's calls spread over all of them. Used by
-- scripts/bench-edge.sh against larkgate and the Python SDK server alike:
--
--   WRK_SESSIONS=id1,id2,... [WRK_TOKEN=lgt_...] wrk -t2 -c32 -d10s --latency \
--       -s scripts/wrk-sessions-call.lua http://127.0.0.1:8940/mcp
--
-- The last line counts answers that were not 200.

local sessions = {}
for id in string.gmatch(os.getenv("WRK_SESSIONS") or "", "[^,]+") do
  table.insert(sessions, id)
end
if #sessions == 0 then
  error("set WRK_SESSIONS to the comma-separated ids of open sessions")
end

local token = os.getenv("WRK_TOKEN")
local next_session = 0

function init(args)
  -- Threads start at different sessions.
  next_session = math.random(#sessions) - 1
end

local body = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"clock_now","arguments":{}}}'

function request()
  next_session = next_session % #sessions + 1
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

function done(summary, latency, requests)
  io.write(string.format("calls: %d, refused (status >= 400): %d, socket errors: %d\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
