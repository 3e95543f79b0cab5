#!/usr/bin/env bash
# The store's benchmark, with wrk (the system package): `tools/call kv_set` (a new key per
# call) at 32 connections on a release `larkgate serve` on SQLite (the embedded default) and,
# in the same run, on one on PostgreSQL (a schema of its own on the test server, dropped
# after). Not a test: it prints calls/s, p50 and p99 of each and the ratio the target is stated
# in (PostgreSQL at least half of SQLite's throughput).
#
# Usage: scripts/bench-store.sh [SECONDS per run, default 10]
# Needs: wrk, curl, psql, and PostgreSQL where LARKGATE_TEST_POSTGRES_URL points (default
# postgres://postgres@127.0.0.1:5432/test).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
url="${LARKGATE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql is missing: apt-get install postgresql-client" >&2; exit 1; }
scripts/check-services

cargo build --release --quiet -p larkgate
schema="bench_$(date +%s)_$$"
bench_cleanup='psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null'
source scripts/bench-common.sh

mkdir -p "$work/sqlite" "$work/postgres/larkgate-data"
printf '[store]\nurl = "%s"\nschema = "%s"\n' "$url" "$schema" > "$work/postgres/larkgate-data/larkgate.toml"
start "$work/sqlite"; sqlite_url=$served_url; sqlite_token=$served_token
start "$work/postgres"; postgres_url=$served_url; postgres_token=$served_token

# "calls/s p50_us p99_us non-200" of one wrk run's output.
figures() { awk -f scripts/wrk-figures.awk; }

echo "== $seconds s per run, 32 connections; larkgate $(target/release/larkgate --version)"
declare -A rps
for store in sqlite postgres; do
    target_url=${store}_url; target_token=${store}_token
    # A short warm-up (connections, statements, the first pages of the table).
    LARKGATE_TOKEN=${!target_token} wrk -t2 -c32 -d2s -s scripts/wrk-kv-set.lua "${!target_url}" > /dev/null
    out=$(LARKGATE_TOKEN=${!target_token} wrk -t2 -c32 -d"${seconds}s" --latency \
        -s scripts/wrk-kv-set.lua "${!target_url}")
    read -r r p50 p99 bad <<< "$(figures <<< "$out")"
    rps[$store]=$r
    printf '%-10s %8s calls/s  p50 %7s us  p99 %7s us  non-200 %s\n' "$store" "$r" "$p50" "$p99" "$bad"
done
echo "== target"
awk -v p="${rps[postgres]}" -v s="${rps[sqlite]}" \
    'BEGIN { printf "PostgreSQL / SQLite calls/s = %.2fx (target >= 0.5)\n", (s > 0) ? p / s : 0 }'
