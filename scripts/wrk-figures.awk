# Reads one wrk run's output (with --latency and a done() that prints "refused (status >= 400):
# N", and, when it reads the answers, "failed (JSON-RPC error or isError): N") and prints
# "calls/s p50_us p99_us failures". Used by the bench-*.sh scripts.
function us(v,   unit, f) {
    unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v)
    f = (unit == "us") ? 1 : (unit == "ms") ? 1000 : (unit == "s") ? 1000000 : 0.001
    return v * f
}
/Requests\/sec:/ { rps = $2 }
/^ +50%/ { p50 = us($2) }
/^ +99%/ { p99 = us($2) }
/refused \(status >= 400\)/ {
    bad = $7 + 0
    # Scripts that read the answers also count the 200s that carried an error.
    if (match($0, /isError\): [0-9]+/)) bad += substr($0, RSTART + 10, RLENGTH - 10)
}
END { printf "%.0f %.0f %.0f %d\n", rps, p50, p99, bad }
