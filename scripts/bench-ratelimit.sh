#!/usr/bin/env bash
# The cost of shared rate limits, with wrk (the system package): `tools/call clock_now` at 1 and
# 32 connections on a release `larkgate serve` whose policy counts every call in a budget that
# never runs out, once with the budgets in the process (the baseline) and once in Redis, in one
# run. Not a test: it prints calls/s and p50 of each and the p50 Redis adds.
#
# Usage: scripts/bench-ratelimit.sh [SECONDS per run, default 10]
# Needs: wrk, and Redis where LARKGATE_TEST_REDIS_URL points (default redis://127.0.0.1:6379).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
redis="${LARKGATE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
scripts/check-services

cargo build --release --quiet -p larkgate
prefix="bench:$(date +%s):$$:"
source scripts/bench-common.sh

policy='[policy.roles.admin]
call = ["*"]
[[policy.rate_limits]]
per = "principal"
calls = 4000000000
period_seconds = 1
'
mkdir -p "$work/local/larkgate-data" "$work/redis/larkgate-data"
printf '%s' "$policy" > "$work/local/larkgate-data/larkgate.toml"
printf '%s[ratelimit]\nredis = "%s"\nprefix = "%s"\n' "$policy" "$redis" "$prefix" \
    > "$work/redis/larkgate-data/larkgate.toml"
start "$work/local"; local_url=$served_url; local_token=$served_token
start "$work/redis"; redis_url=$served_url; redis_token=$served_token

# "calls/s p50_us p99_us failures" (scripts/wrk-figures.awk).
figures() { awk -f scripts/wrk-figures.awk; }

echo "== $seconds s per run; larkgate $(target/release/larkgate --version)"
for connections in 1 32; do
    threads=$(( connections > 1 ? 2 : 1 ))
    declare -A p50s
    for where in local redis; do
        url_var=${where}_url; token_var=${where}_token
        LARKGATE_TOKEN=${!token_var} wrk -t"$threads" -c"$connections" -d2s \
            -s scripts/wrk-tools-call.lua "${!url_var}" > /dev/null
        out=$(LARKGATE_TOKEN=${!token_var} wrk -t"$threads" -c"$connections" -d"${seconds}s" \
            --latency -s scripts/wrk-tools-call.lua "${!url_var}")
        read -r rps p50 _ bad <<< "$(figures <<< "$out")"
        p50s[$where]=$p50
        printf '%-6s %3d conn  %8s calls/s  p50 %6s us  failed %s\n' "$where" "$connections" "$rps" "$p50" "$bad"
    done
    echo "   Redis adds $(( ${p50s[redis]} - ${p50s[local]} )) us to the p50 at $connections connection(s)"
done
