#!/usr/bin/env bash
# The shared audit chain's benchmark, with wrk (the system package): `tools/call kv_set` (a new
# key per call) at 32 connections, in one run, on release `larkgate serve` processes:
#   sqlite     one replica on SQLite (the embedded default)
#   pg         one replica on PostgreSQL + Redis (rate limits in Redis, the shared chain)
#   pg x2      two replicas on one PostgreSQL schema + Redis, the 32 connections split 16/16
#              between them (what a round-robin balancer does per connection): two wrk at once
#   baseline   (when BASELINE_BIN names a larkgate built before the shared chain) one replica on
#              PostgreSQL + Redis with that binary: the chain as it was, one owner per schema
# Not a test: it prints calls/s, p50 and p99 of each, and the ratio the target is stated in
# (the shared chain costs at most 20% of one PostgreSQL replica's throughput with the chain as
# it was: pg / baseline >= 0.8).
#
# Usage: [BASELINE_BIN=path/to/older/larkgate] [LARKGATE_BIN=path/to/larkgate, default: a
#        release build of this tree] scripts/bench-replicas.sh [SECONDS, default 10]
# Needs: wrk, psql, PostgreSQL where LARKGATE_TEST_POSTGRES_URL points (default
# postgres://postgres@127.0.0.1:5432/test) and Redis where LARKGATE_TEST_REDIS_URL points
# (default redis://127.0.0.1:6379).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
url="${LARKGATE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
redis="${LARKGATE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql is missing: apt-get install postgresql-client" >&2; exit 1; }
scripts/check-services

if [[ -z ${LARKGATE_BIN:-} ]]; then
    cargo build --release --quiet -p larkgate
fi
bin="${LARKGATE_BIN:-$PWD/target/release/larkgate}"
work=$(mktemp -d)
stamp="$(date +%s)_$$"
schemas=("bench_shared_$stamp" "bench_one_$stamp" "bench_base_$stamp")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for schema in "${schemas[@]}"; do
        psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# Writes the configuration of a replica in DIR on SCHEMA (PostgreSQL + Redis).
configure() {
    local dir=$1 schema=$2
    mkdir -p "$dir/larkgate-data"
    cat > "$dir/larkgate-data/larkgate.toml" <<EOF
[store]
url = "$url"
schema = "$schema"
[ratelimit]
redis = "$redis"
prefix = "$schema:"
[policy.roles.admin]
call = ["*"]
[[policy.rate_limits]]
per = "principal"
calls = 100000000
period_seconds = 3600
burst = 100000000
EOF
}

# Starts BINARY serve in DIR; sets $served_url and $served_token (the first start's admin
# token; empty when the store already had an administrator).
start() {
    local binary=$1 dir=$2
    local ops=()
    # Three replicas on one machine: each its own port for /healthz and /metrics (a larkgate
    # from before they had one serves them beside /mcp).
    if "$binary" serve --help 2>/dev/null | grep -q -- --ops-listen; then ops=(--ops-listen 127.0.0.1:0); fi
    (cd "$dir" && exec "$binary" serve --listen 127.0.0.1:0 "${ops[@]}" \
        > "$dir/serve.out" 2> "$dir/serve.err") &
    pids+=($!)
    for _ in $(seq 100); do grep -q "serving MCP at" "$dir/serve.err" 2>/dev/null && break; sleep 0.1; done
    served_url=$(sed -n 's/^larkgate: serving MCP at //p' "$dir/serve.err")
    served_token=$(grep -o 'lgt_[A-Za-z0-9_-]*' "$dir/serve.out" | head -1 || true)
    [[ -n $served_url ]] || { cat "$dir/serve.err" >&2; exit 1; }
}

mkdir -p "$work/sqlite"
start "$bin" "$work/sqlite"; sqlite_url=$served_url; sqlite_token=$served_token
configure "$work/one" "${schemas[1]}"
start "$bin" "$work/one"; one_url=$served_url; one_token=$served_token
configure "$work/a" "${schemas[0]}"; configure "$work/b" "${schemas[0]}"
start "$bin" "$work/a"; a_url=$served_url; shared_token=$served_token
start "$bin" "$work/b"; b_url=$served_url
if [[ -n ${BASELINE_BIN:-} ]]; then
    configure "$work/base" "${schemas[2]}"
    start "$BASELINE_BIN" "$work/base"; base_url=$served_url; base_token=$served_token
fi

# "calls/s p50_us p99_us non-200" of one wrk run's output.
figures() { awk -f scripts/wrk-figures.awk; }

# wrk on URL with TOKEN, CONNECTIONS connections, for SECONDS; keys under PREFIX.
load() {
    LARKGATE_TOKEN=$2 LARKGATE_KEY_PREFIX=$5 wrk -t2 -c"$3" -d"$4" --latency \
        -s scripts/wrk-kv-set.lua "$1"
}

echo "== $seconds s per run, 32 connections; larkgate $("$bin" --version)"
declare -A rps
one() {
    local name=$1 target=$2 token=$3
    load "$target" "$token" 32 2s warm > /dev/null
    read -r r p50 p99 bad <<< "$(load "$target" "$token" 32 "${seconds}s" "$name" | figures)"
    rps[$name]=$r
    printf '%-9s %8s calls/s  p50 %7s us  p99 %7s us  non-200 %s\n' "$name" "$r" "$p50" "$p99" "$bad"
}
one sqlite "$sqlite_url" "$sqlite_token"
one pg "$one_url" "$one_token"
if [[ -n ${BASELINE_BIN:-} ]]; then one baseline "$base_url" "$base_token"; fi

# Two replicas, 16 connections each, at once: calls/s add up; latencies are each replica's.
load "$a_url" "$shared_token" 16 2s warma > /dev/null & warm=$!
load "$b_url" "$shared_token" 16 2s warmb > /dev/null; wait "$warm"
load "$a_url" "$shared_token" 16 "${seconds}s" x2a > "$work/a.wrk" & first=$!
load "$b_url" "$shared_token" 16 "${seconds}s" x2b > "$work/b.wrk"; wait "$first"
read -r ra p50a p99a bada <<< "$(figures < "$work/a.wrk")"
read -r rb p50b p99b badb <<< "$(figures < "$work/b.wrk")"
rps[x2]=$((ra + rb))
printf '%-9s %8s calls/s  p50 %7s / %s us  p99 %7s / %s us  non-200 %s\n' "pg x2" "${rps[x2]}" \
    "$p50a" "$p50b" "$p99a" "$p99b" "$((bada + badb))"

echo "== chains"
for schema in "${schemas[0]}" "${schemas[1]}"; do
    (cd "$work/$([[ $schema == "${schemas[0]}" ]] && echo a || echo one)" && "$bin" audit verify | tail -1)
done
echo "== target"
if [[ -n ${BASELINE_BIN:-} ]]; then
    awk -v n="${rps[pg]}" -v b="${rps[baseline]}" \
        'BEGIN { printf "pg (shared chain) / baseline (one owner) calls/s = %.2fx (target >= 0.80)\n", (b > 0) ? n / b : 0 }'
fi
awk -v x="${rps[x2]}" -v n="${rps[pg]}" -v s="${rps[sqlite]}" \
    'BEGIN { printf "pg x2 / pg = %.2fx; pg / sqlite = %.2fx\n", (n > 0) ? x / n : 0, (s > 0) ? n / s : 0 }'
