#!/usr/bin/env bash
# What signed checkpoints cost, with wrk (the system package): `tools/call kv_set` (a new key
# and JSON-RPC id per call) at 32 connections on a release `larkgate serve` on SQLite (the
# embedded default), in one run:
#   off       [audit] checkpoints = false: the hash chain alone (the baseline)
#   on        the default: a signed checkpoint every 1,000 records or 60 s
#   anchored  the default, each checkpoint also appended to an anchor file
# The three alternate, RUNS times each, so that the machine's drift falls on all of them alike.
# Not a test: it prints calls/s, p50 and p99 of each run, the median calls/s of each, and the
# ratio the target is stated in (signing costs at most 5%: on / off >= 0.95).
#
# Usage: [LARKGATE_BIN=path/to/larkgate, default: a release build of this tree]
#        scripts/bench-audit.sh [SECONDS per run, default 10] [RUNS, default 3]
# Needs: wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
runs=${2:-3}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }

if [[ -z ${LARKGATE_BIN:-} ]]; then
    cargo build --release --quiet -p larkgate
fi
source scripts/bench-common.sh
bin="${LARKGATE_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/larkgate}"

configs=(off on anchored)
mkdir -p "$work/off/larkgate-data" "$work/on/larkgate-data" "$work/anchored/larkgate-data"
printf '[audit]\ncheckpoints = false\n' > "$work/off/larkgate-data/larkgate.toml"
printf '[audit]\n' > "$work/on/larkgate-data/larkgate.toml"
printf '[[audit.anchors]]\nfile = "%s"\n' "$work/anchors.jsonl" > "$work/anchored/larkgate-data/larkgate.toml"
declare -A urls tokens
for config in "${configs[@]}"; do
    start "$work/$config" "$bin"
    urls[$config]=$served_url
    tokens[$config]=$served_token
done

echo "== $seconds s per run, $runs runs each, 32 connections; larkgate $("$bin" --version)"
declare -A all
for run in $(seq "$runs"); do
    for config in "${configs[@]}"; do
        export LARKGATE_TOKEN=${tokens[$config]} LARKGATE_KEY_PREFIX="run$run"
        # A short warm-up (connections, statements, the first pages of the table).
        wrk -t2 -c32 -d2s -s scripts/wrk-kv-set.lua "${urls[$config]}" > /dev/null
        out=$(wrk -t2 -c32 -d"${seconds}s" --latency -s scripts/wrk-kv-set.lua "${urls[$config]}")
        read -r r p50 p99 bad <<< "$(awk -f scripts/wrk-figures.awk <<< "$out")"
        all[$config]="${all[$config]:-} $r"
        printf 'run %d %-9s %8s calls/s  p50 %7s us  p99 %7s us  failures %s\n' \
            "$run" "$config" "$r" "$p50" "$p99" "$bad"
    done
done
median() { tr ' ' '\n' <<< "$1" | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "== medians"
for config in "${configs[@]}"; do
    printf '%-9s %8s calls/s\n' "$config" "$(median "${all[$config]}")"
done
echo "== checkpoints signed: $(wc -l < "$work/anchors.jsonl" 2>/dev/null || echo 0) in the anchored runs' anchor file"
echo "== target"
awk -v on="$(median "${all[on]}")" -v off="$(median "${all[off]}")" -v anchored="$(median "${all[anchored]}")" 'BEGIN {
    printf "checkpoints on / off = %.3fx (target >= 0.95); anchored / off = %.3fx\n", on / off, anchored / off
}'
