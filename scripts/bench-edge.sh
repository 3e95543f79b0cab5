#!/usr/bin/env bash
# The edge's benchmark, with wrk (the system package): `tools/call clock_now` on a release
# `larkgate serve` and, in the same run, on the official MCP Python SDK server (mcp, default
# stateful configuration, one process, the same trivial tool: crates/larkgate/benches/peers/
# noop_server.py). larkgate in both revisions; 2025-11-25 on sessions opened beforehand (one
# for 1 connection, 32 for 32, the Lua script cycling through them). Not a test: it prints a
# table and the ratios the targets are stated in, for a person to read.
#
# Usage: scripts/bench-edge.sh [SECONDS per run, default 10]
# Needs: wrk, curl, and the Python SDK that scripts/test installs into .cache/py.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
python=.cache/py/bin/python
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
[[ -x $python ]] || { echo "$python is missing: run scripts/test once (it installs the SDK)" >&2; exit 1; }

cargo build --release --quiet -p larkgate
source scripts/bench-common.sh

# larkgate, on the embedded defaults in a fresh data directory.
start "$work"; larkgate_url=$served_url; token=$served_token

# The Python SDK server.
"$python" crates/larkgate/benches/peers/noop_server.py > "$work/python.out" 2> "$work/python.err" &
pids+=($!)
for _ in $(seq 100); do [[ -s $work/python.out ]] && break; sleep 0.1; done
python_url="http://127.0.0.1:$(head -1 "$work/python.out")/mcp"
for _ in $(seq 50); do curl -s -o /dev/null "$python_url" && break; sleep 0.1; done

# "calls/s p50_us failures socket_errors" of one wrk run's output (a failure: a status of 400
# or more, a JSON-RPC error or an isError result).
figures() {
    awk '
        /Requests\/sec:/ { rps = $2 }
        /^ +50%/ {
            v = $2; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v)
            f = (unit == "us") ? 1 : (unit == "ms") ? 1000 : (unit == "s") ? 1000000 : 0.001
            p50 = v * f
        }
        /refused \(status >= 400\)/ {
            bad = $7 + 0
            if (match($0, /isError\): [0-9]+/)) bad += substr($0, RSTART + 10, RLENGTH - 10)
            if (match($0, /socket errors: [0-9]+/)) sockets = substr($0, RSTART + 15, RLENGTH - 15) + 0
        }
        END { printf "%.0f %.0f %d %d\n", rps, p50, bad, sockets }'
}

declare -A result
run() {
    local name=$1 connections=$2; shift 2
    local threads=$(( connections > 1 ? 2 : 1 ))
    local out
    out=$(wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency "$@")
    result[$name]=$(figures <<< "$out")
    read -r rps p50 bad sockets <<< "${result[$name]}"
    printf '%-34s %6d conn  %9s calls/s  p50 %7s us  failed %s  socket errors %s\n' \
        "$name" "$connections" "$rps" "$p50" "$bad" "$sockets"
}

echo "== $seconds s per run; larkgate $(target/release/larkgate --version)"
for connections in 1 32; do
    sessions=$(open_sessions "$python_url" "$connections")
    WRK_SESSIONS=$sessions run "python-sdk 2025-11-25 sessions" "$connections" \
        -s scripts/wrk-sessions-call.lua "$python_url"
    sessions=$(open_sessions "$larkgate_url" "$connections" "$token")
    WRK_SESSIONS=$sessions WRK_TOKEN=$token run "larkgate 2025-11-25 sessions" "$connections" \
        -s scripts/wrk-sessions-call.lua "$larkgate_url"
    LARKGATE_TOKEN=$token run "larkgate 2026-07-28" "$connections" \
        -s scripts/wrk-tools-call.lua "$larkgate_url"
    result["py$connections"]=${result["python-sdk 2025-11-25 sessions"]}
    result["lg$connections"]=${result["larkgate 2025-11-25 sessions"]}
    result["new$connections"]=${result["larkgate 2026-07-28"]}
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
read -r py1 _ <<< "${result[py1]}"; read -r lg1 lg1p50 _ <<< "${result[lg1]}"
read -r py32 _ <<< "${result[py32]}"; read -r lg32 _ <<< "${result[lg32]}"
read -r _ new1p50 _ <<< "${result[new1]}"
echo "== targets"
echo "2025-11-25 sessions, 1 connection:  larkgate / Python SDK calls/s = $(ratio "$lg1" "$py1")x (target >= 5)"
echo "2025-11-25 sessions, 32 connections: larkgate / Python SDK calls/s = $(ratio "$lg32" "$py32")x (target >= 10)"
echo "1 connection: larkgate p50, 2025-11-25 / 2026-07-28 = $(ratio "$lg1p50" "$new1p50")x (target <= 1.3)"
