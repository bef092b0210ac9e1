#!/usr/bin/env bash
# HTTP/2 against HTTP/1.1 over TLS (issue 31, item 4): 100 WebSockets and 100 SSE subscribers on
# one HTTP/2 connection against 100 TLS connections; the server's memory and throughput.
# Each run has a fresh release duplex-server, pinned to core 0 with one event loop, and the
# Duplex client pinned to core 1; the four modes interleaved, ROUNDS rounds, medians.
# Usage: Benchmarks/http2.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-5}
swift build -c release --scratch-path .build-release --product duplex-server >/dev/null 2>&1 \
    || { echo "swift build -c release --product duplex-server failed" >&2; exit 1; }
swift build -c release --package-path Benchmarks --product http2-benchmark >/dev/null 2>&1 \
    || { echo "swift build -c release --package-path Benchmarks --product http2-benchmark failed" >&2; exit 1; }
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT
: >"$work/results"
for round in $(seq 1 "$rounds"); do
    for mode in ws-http1 ws-http2 sse-http1 sse-http2; do
        rm -f "$work/out"
        taskset -c 0 .build-release/release/duplex-server --port 0 --event-loops 1 --log-level warning --tls-self-signed --tls-directory "$work/tls" >"$work/out" 2>&1 &
        server=$!
        for _ in $(seq 1 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
        port=$(grep -o 'https://127.0.0.1:[0-9]*' "$work/out" | head -1 | cut -d: -f3)
        line=$(taskset -c 1 Benchmarks/.build/release/http2-benchmark "$mode" "$port" "$server" "$work/tls/ca.pem" "$seconds")
        # The server's CPU seconds over the whole run (connecting, the timed part, closing).
        cpu=$(awk '{ printf "%.1f", ($14 + $15) / 100 }' "/proc/$server/stat")
        line="$line	$cpu"
        kill $server; wait $server 2>/dev/null || true; server=""
        echo "round $round  $line"
        echo "$line" >>"$work/results"
    done
done
echo
echo "medians of $rounds rounds ($seconds s each; WebSockets: echoes/s with 8 messages of 64 B in flight each; SSE: events/s at 100 a second each)"
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, rate, kib, cpu = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append((float(rate), int(kib), float(cpu)))
for name, runs in rows.items():
    rate = statistics.median(r for r, _, _ in runs)
    kib = statistics.median(k for _, k, _ in runs)
    cpu = statistics.median(c for _, _, c in runs)
    print(f"{name}: {rate:,.0f}/s, server +{kib:,.0f} KiB ({kib / 100:.1f} KiB each), server CPU {cpu:.1f} s")
PY
