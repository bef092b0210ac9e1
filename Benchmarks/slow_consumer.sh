#!/usr/bin/env bash
# The slow consumer: 1 GiB from a Node `ws` flood server (Benchmarks/node_flood_server.js) to a
# Duplex client that reads as fast as it can, then to one that reads at a tenth of that rate.
# Prints, for each: the rate, messages lost, messages out of order, and the client's peak RSS.
# Server on core 0, client on core 1.
#
#   Benchmarks/slow_consumer.sh [BYTES]
#
# Needs node and node-ws, taskset, and the release build of client-peers-benchmark (see
# Benchmarks/client_peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=${1:-1073741824}
bench=Benchmarks/.build/release/client-peers-benchmark
[ -x "$bench" ] || { echo "build it first: swift build -c release --package-path Benchmarks --product client-peers-benchmark" >&2; exit 1; }
out=$(mktemp)
taskset -c 0 node Benchmarks/node_flood_server.js >"$out" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 1 50); do grep -q '^ws://' "$out" && break; sleep 0.1; done
url=$(grep -m1 '^ws://' "$out")
echo "flood server at $url; $bytes bytes in 64 KiB messages"
fast=$(taskset -c 1 "$bench" consume "$url" "$bytes" 0)
echo "fast reader:  $fast   (consume MB/s lost out-of-order peak-RSS-MiB)"
rate=$(echo "$fast" | awk '{print $2 * 1000000 / 10}')
slow=$(taskset -c 1 "$bench" consume "$url" "$bytes" "$rate")
echo "slow reader:  $slow   (at a tenth: $rate bytes/s)"
