-- What the wrk scripts share (loaded by them with dofile, from their own directory): a JSON-RPC
-- id of its own for every request, `next_id()` (thread number * 10^9 + the thread's count of
-- requests; `counter` is that count), and the last line, which counts the answers with a status
-- of 400 or more (`refused`) and the 200s that carried a JSON-RPC error or an `isError` result
-- (`failed`). A script that defines its own init() calls `reset_counts()` from it.

counter = 0
-- Read by done() from each thread (a global of the thread's own Lua state).
failed = 0
local threads = {}
local thread_id = 0

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
  table.insert(threads, thread)
end

function reset_counts()
  counter = 0
  failed = 0
end

function init(args)
  reset_counts()
end

function next_id()
  counter = counter + 1
  return id * 1000000000 + counter
end

function response(status, headers, body)
  if status == 200 and (body:find('"isError":true', 1, true) or body:find('"error":{', 1, true)) then
    failed = failed + 1
  end
end

function done(summary, latency, requests)
  local failures = 0
  for _, thread in ipairs(threads) do
    failures = failures + (thread:get("failed") or 0)
  end
  io.write(string.format("calls: %d, refused (status >= 400): %d, failed (JSON-RPC error or isError): %d, socket errors: %d\n",
    summary.requests, summary.errors.status, failures,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
