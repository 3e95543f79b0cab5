# What the scripts/bench-*.sh benchmarks share; sourced by them, not run. It makes $work, a
# fresh temporary directory, and at exit kills every process whose pid is in $pids, runs
# $bench_cleanup (a command a benchmark sets before sourcing this, if it has more to undo) and
# removes $work. `start DIR [BIN]` starts `larkgate serve` in DIR; `open_sessions URL N [TOKEN]`
# opens 2025-11-25 sessions.
work=$(mktemp -d)
pids=()
bench_cleanup=${bench_cleanup:-}
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ -n $bench_cleanup ]]; then eval "$bench_cleanup" || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The arguments that put BIN's /healthz, /readyz and /metrics on a free port of their own
# (their default port would be every server's at once); none for a larkgate from before
# they had one, which serves them beside /mcp.
ops_free_port() {
    if "$1" serve --help 2>/dev/null | grep -q -- --ops-listen; then echo "--ops-listen 127.0.0.1:0"; fi
}

# Starts BIN (default: this tree's release build) as `larkgate serve` on a free port, in DIR
# (its data directory is DIR/larkgate-data); sets $served_url and $served_token.
start() {
    local dir=$1 bin=${2:-$PWD/target/release/larkgate}
    # shellcheck disable=SC2046
    (cd "$dir" && exec "$bin" serve --listen 127.0.0.1:0 $(ops_free_port "$bin") > "$dir/serve.out" 2> "$dir/serve.err") &
    pids+=($!)
    for _ in $(seq 100); do grep -q "serving MCP at" "$dir/serve.err" 2>/dev/null && break; sleep 0.1; done
    served_url=$(sed -n 's/^larkgate: serving MCP at //p' "$dir/serve.err")
    served_token=$(grep -o 'lgt_[A-Za-z0-9_-]*' "$dir/serve.out" | head -1)
    [[ -n $served_url && -n $served_token ]] || { cat "$dir/serve.err" >&2; exit 1; }
}

# Opens N sessions on URL (with TOKEN, if any); prints their ids, comma-separated.
open_sessions() {
    local url=$1 n=$2 token=${3:-} ids=() auth=()
    [[ -n $token ]] && auth=(-H "Authorization: Bearer $token")
    for _ in $(seq "$n"); do
        local id
        id=$(curl -sS -o /dev/null -D - "$url" "${auth[@]}" -H 'Content-Type: application/json' \
            -H 'Accept: application/json, text/event-stream' \
            -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' \
            | grep -i '^mcp-session-id:' | cut -d' ' -f2 | tr -d '\r')
        [[ -n $id ]] || { echo "no session opened at $url" >&2; exit 1; }
        curl -sS -o /dev/null "$url" "${auth[@]}" -H 'Content-Type: application/json' \
            -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
            -H "Mcp-Session-Id: $id" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
        ids+=("$id")
    done
    local IFS=,
    echo "${ids[*]}"
}
