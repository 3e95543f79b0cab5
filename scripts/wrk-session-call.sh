#!/usr/bin/env bash
# Opens a 2025-11-25 session on a running `larkgate serve` and loads it with wrk
# (`tools/call clock_now`, one connection, 10 s).
#
# Usage: LARKGATE_TOKEN=lgt_... scripts/wrk-session-call.sh [URL] [extra wrk arguments]
set -euo pipefail
url=${1:-http://127.0.0.1:8940/mcp}
shift || true
: "${LARKGATE_TOKEN:?set LARKGATE_TOKEN to a token of a principal that may call clock_now}"
headers=$(mktemp)
trap 'rm -f "$headers"' EXIT
curl -sS -o /dev/null -D "$headers" "$url" \
    -H "Authorization: Bearer $LARKGATE_TOKEN" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}'
session=$(grep -i '^mcp-session-id:' "$headers" | cut -d' ' -f2 | tr -d '\r')
[[ -n "$session" ]] || { echo "no session was opened (is the token valid?)" >&2; exit 1; }
curl -sS -o /dev/null "$url" \
    -H "Authorization: Bearer $LARKGATE_TOKEN" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
    -H "Mcp-Session-Id: $session" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
WRK_SESSIONS=$session WRK_TOKEN=$LARKGATE_TOKEN exec wrk -t1 -c1 -d10s --latency "$@" \
    -s "$(dirname "$0")/wrk-sessions-call.lua" "$url"
