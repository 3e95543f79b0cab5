#!/usr/bin/env bash
# The federation benchmark, with wrk (the system package): `tools/call clock_now` of the official
# MCP Python SDK server (crates/larkgate/benches/peers/noop_server.py) over Streamable HTTP,
# 2026-07-28, called directly and, in the same run, through a release `larkgate serve` that
# federates it (approval "never"); then the same server started by larkgate as a command, over
# stdio. One connection, so the figures are per call. Not a test: it prints a table and the
# ratios the targets are stated in, for a person to read.
#
# CPU per call is read from /proc (user + system time of each process over a run, divided by
# the calls wrk made).
#
# Two more rows put the figures in proportion, when their tools are there:
# - the same calls relayed by socat (a TCP relay that does nothing else): what any process in
#   the path costs on this machine, as the floor of what a gateway can add;
# - with BASELINE_BIN=path/to/an/older/larkgate, the same calls through that build too, in the
#   same run (the figures move a lot between runs on a shared machine).
#
# Usage: [BASELINE_BIN=...] scripts/bench-federation.sh [SECONDS per run, default 10]
# Needs: wrk, curl, and the Python SDK that scripts/test installs into .cache/py; socat for the
# relay row.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
python=$PWD/.cache/py/bin/python
peer=$PWD/crates/larkgate/benches/peers/noop_server.py
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
[[ -x $python ]] || { echo "$python is missing: run scripts/test once (it installs the SDK)" >&2; exit 1; }

cargo build --release --quiet -p larkgate
larkgate=$PWD/target/release/larkgate
baseline=${BASELINE_BIN:-}
[[ -z $baseline || -x $baseline ]] || { echo "BASELINE_BIN=$baseline is not a program" >&2; exit 1; }
source scripts/bench-common.sh
ticks=$(getconf CLK_TCK)

# CPU time of process PID (and its children that ended), in ms.
cpu_ms() {
    awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) * 1000 / t }' "/proc/$1/stat"
}

# The Python SDK server over HTTP.
"$python" "$peer" > "$work/python.out" 2> "$work/python.err" &
python_pid=$!
pids+=("$python_pid")
for _ in $(seq 100); do [[ -s $work/python.out ]] && break; sleep 0.1; done
python_port=$(head -1 "$work/python.out")
python_url="http://127.0.0.1:$python_port/mcp"
for _ in $(seq 50); do curl -s -o /dev/null "$python_url" && break; sleep 0.1; done

# larkgate federating it (as `py`), and the same server started as a command (as `cmd`).
mkdir -p "$work/data"
cat > "$work/data/larkgate.toml" <<TOML
[[upstreams]]
alias = "py"
url = "$python_url"
allow = ["127.0.0.1"]
approval = "never"

[[upstreams]]
alias = "cmd"
command = ["$python", "$peer", "stdio"]
approval = "never"
TOML
# start NAME BINARY [VAR=value...]: runs `BINARY serve` (with those variables) on its own copy
# of the configuration; sets NAME_pid, NAME_url and NAME_token.
start() {
    local name=$1 binary=$2 dir=$work/$1
    shift 2
    mkdir -p "$dir"
    cp "$work/data/larkgate.toml" "$dir/"
    # shellcheck disable=SC2046
    (cd "$work" && exec env "$@" "$binary" --data-dir "$dir" serve --listen 127.0.0.1:0 \
        $(ops_free_port "$binary") > "$dir/serve.out" 2> "$dir/serve.err") &
    pids+=("$!")
    printf -v "${name}_pid" %s "$!"
    for _ in $(seq 300); do grep -q "serving MCP at" "$dir/serve.err" 2>/dev/null && break; sleep 0.1; done
    printf -v "${name}_url" %s "$(sed -n 's/^larkgate: serving MCP at //p' "$dir/serve.err")"
    printf -v "${name}_token" %s "$(grep -o 'lgt_[A-Za-z0-9_-]*' "$dir/serve.out" | head -1)"
    local url=${name}_url token=${name}_token
    [[ -n ${!url} && -n ${!token} ]] || { cat "$dir/serve.err" >&2; exit 1; }
}
start lg "$larkgate"
larkgate_pid=$lg_pid larkgate_url=$lg_url token=$lg_token
cmd_pid=$(pgrep -f "$peer stdio" | tail -1)
start one "$larkgate" TOKIO_WORKER_THREADS=1
if [[ -n $baseline ]]; then
    start base "$baseline"
fi
relay_url=
if command -v socat >/dev/null; then
    relay_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    socat "TCP-LISTEN:$relay_port,bind=127.0.0.1,reuseaddr,fork,nodelay" \
        "TCP:127.0.0.1:$python_port,nodelay" 2> "$work/socat.err" &
    pids+=("$!")
    relay_url="http://127.0.0.1:$relay_port/mcp"
    for _ in $(seq 50); do curl -s -o /dev/null "$relay_url" && break; sleep 0.1; done
fi

# "calls/s p50_us calls" of one wrk run's output.
figures() {
    awk '
        /Requests\/sec:/ { rps = $2 }
        /^ +50%/ {
            v = $2; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v)
            f = (unit == "us") ? 1 : (unit == "ms") ? 1000 : (unit == "s") ? 1000000 : 0.001
            p50 = v * f
        }
        /^calls:/ { calls = $2 + 0; bad = $7 + 0 }
        END { printf "%.0f %.0f %d %d\n", rps, p50, calls, bad }'
}

declare -A result
# run NAME URL [env...]: one wrk run at 1 connection; records calls/s, p50, and the CPU ms
# per call of larkgate, the HTTP server and the command-launched server over the run.
run() {
    local name=$1 url=$2; shift 2
    local lg0 py0 cmd0 out
    lg0=$(cpu_ms "$larkgate_pid"); py0=$(cpu_ms "$python_pid"); cmd0=$(cpu_ms "$cmd_pid")
    out=$(env "$@" wrk -t1 -c1 -d"${seconds}s" --latency -s scripts/wrk-tools-call.lua "$url")
    read -r rps p50 calls bad <<< "$(figures <<< "$out")"
    local lg py cmd
    lg=$(awk -v a="$lg0" -v b="$(cpu_ms "$larkgate_pid")" -v n="$calls" 'BEGIN { printf "%.3f", (b - a) / n }')
    py=$(awk -v a="$py0" -v b="$(cpu_ms "$python_pid")" -v n="$calls" 'BEGIN { printf "%.3f", (b - a) / n }')
    cmd=$(awk -v a="$cmd0" -v b="$(cpu_ms "$cmd_pid")" -v n="$calls" 'BEGIN { printf "%.3f", (b - a) / n }')
    result[$name]="$p50 $lg $py $cmd"
    printf '%-40s %7s calls/s  p50 %6s us  CPU ms/call: larkgate %s, HTTP server %s, stdio server %s  (non-200: %s)\n' \
        "$name" "$rps" "$p50" "$lg" "$py" "$cmd" "$bad"
}

echo "== $seconds s per run, 1 connection; larkgate $("$larkgate" --version)"
run "python-sdk over HTTP, direct" "$python_url" WRK_NO_TOKEN=1
run "through larkgate (py__clock_now)" "$larkgate_url" LARKGATE_TOKEN="$token" WRK_TOOL=py__clock_now
run "python-sdk over HTTP, direct (again)" "$python_url" WRK_NO_TOKEN=1
run "through larkgate, by command (cmd__clock_now)" "$larkgate_url" LARKGATE_TOKEN="$token" WRK_TOOL=cmd__clock_now
run "larkgate's own clock_now (no upstream)" "$larkgate_url" LARKGATE_TOKEN="$token"
larkgate_pid=$one_pid
run "through larkgate, 1 worker thread" "$one_url" LARKGATE_TOKEN="$one_token" WRK_TOOL=py__clock_now
larkgate_pid=$lg_pid
if [[ -n $relay_url ]]; then
    run "relayed by socat (nothing else)" "$relay_url" WRK_NO_TOKEN=1
fi
if [[ -n $baseline ]]; then
    larkgate_pid=$base_pid
    run "through BASELINE_BIN (py__clock_now)" "$base_url" LARKGATE_TOKEN="$base_token" WRK_TOOL=py__clock_now
    run "BASELINE_BIN's own clock_now" "$base_url" LARKGATE_TOKEN="$base_token"
    larkgate_pid=$lg_pid
fi

read -r d1 _ _ _ <<< "${result["python-sdk over HTTP, direct"]}"
read -r d2 _ _ _ <<< "${result["python-sdk over HTTP, direct (again)"]}"
read -r via lg py _ <<< "${result["through larkgate (py__clock_now)"]}"
read -r cmdp50 _ _ _ <<< "${result["through larkgate, by command (cmd__clock_now)"]}"
direct=$(awk -v a="$d1" -v b="$d2" 'BEGIN { printf "%.0f", (a < b) ? a : b }')
echo "== targets"
awk -v d="$direct" -v v="$via" 'BEGIN { printf "p50 added by larkgate: %.0f us on %.0f us direct = %.1f%% (target <= 5%%)\n", v - d, d, (v - d) * 100 / d }'
awk -v l="$lg" -v p="$py" 'BEGIN { printf "larkgate CPU per call: %.3f ms = %.1f%% of the Python server'"'"'s %.3f ms (target <= 10%%)\n", l, l * 100 / p, p }'
echo "command-launched server through larkgate: p50 $cmdp50 us"
read -r onep50 onelg onepy _ <<< "${result["through larkgate, 1 worker thread"]}"
awk -v d="$direct" -v v="$onep50" -v l="$onelg" -v p="$onepy" 'BEGIN { printf "with 1 worker thread: p50 added %.0f us = %.1f%%; CPU per call %.3f ms = %.1f%% of the server'"'"'s\n", v - d, (v - d) * 100 / d, l, l * 100 / p }'
if [[ -n $relay_url ]]; then
    read -r relayed _ _ _ <<< "${result["relayed by socat (nothing else)"]}"
    awk -v d="$direct" -v v="$relayed" 'BEGIN { printf "p50 added by a bare TCP relay: %.0f us = %.1f%%\n", v - d, (v - d) * 100 / d }'
fi
if [[ -n $baseline ]]; then
    read -r bvia blg bpy _ <<< "${result["through BASELINE_BIN (py__clock_now)"]}"
    awk -v d="$direct" -v v="$bvia" -v l="$blg" -v p="$bpy" 'BEGIN { printf "BASELINE_BIN: p50 added %.0f us = %.1f%%; CPU per call %.3f ms = %.1f%% of the server'"'"'s\n", v - d, (v - d) * 100 / d, l, l * 100 / p }'
fi
