#!/usr/bin/env bash
# Client echo throughput, side by side: the Duplex client, picows (on uvloop), swift-websocket's
# WSClient, Node `ws` (Debian node-ws) and Python `websockets`, each against the same
# out-of-process echo server (SERVER, below). Server pinned to core 0, clients to core 1 (taskset); ROUNDS interleaved rounds; the
# median per client and connection count, and each client's own CPU time per message (user +
# system, which the server cannot limit). 64-byte text messages, MESSAGES per run.
#
#   Benchmarks/client_peers.sh [MESSAGES] [ROUNDS]
#
# Benchmarks/install_peers.sh installs the peers that are missing; taskset (util-linux) and a
# release build are needed:
#   swift build -c release --package-path Benchmarks --product client-peers-benchmark
# DUPLEX_BENCH names another build of it; BEFORE names the same product built from an earlier
# commit, run beside it in every round as "duplex-before" (a before/after comparison in one run).
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${1:-200000}
rounds=${2:-3}
swift_bench=${DUPLEX_BENCH:-Benchmarks/.build/release/client-peers-benchmark}
before=${BEFORE:-}
[ -z "$before" ] || [ -x "$before" ] || { echo "BEFORE=$before is not an executable" >&2; exit 1; }
[ -x "$swift_bench" ] || { echo "build it first: swift build -c release --package-path Benchmarks --product client-peers-benchmark" >&2; exit 1; }
Benchmarks/install_peers.sh

# SERVER picks the echo server: "node" (the default), "uws" (socketify, the fastest peer server),
# or a duplex-server binary's path (served with --event-loops 1). A slow server hides the
# differences between clients.
server_out=$(mktemp)
case ${SERVER:-node} in
    node) taskset -c 0 node Benchmarks/node_echo_server.js >"$server_out" & ;;
    uws) taskset -c 0 python3 Benchmarks/uws_echo_server.py >"$server_out" & ;;
    *)
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        taskset -c 0 "$SERVER" --port "$port" --event-loops 1 --log-level error >/dev/null 2>&1 &
        echo "ws://127.0.0.1:$port/echo" >"$server_out"
        for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
        ;;
esac
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$server_out"' EXIT
for _ in $(seq 1 50); do grep -q '^ws://' "$server_out" && break; sleep 0.1; done
url=$(grep -m1 '^ws://' "$server_out")
echo "${SERVER:-node} echo server at $url (core 0); clients on core 1; $messages messages of 64 bytes per run"

results=$(mktemp)
line=$(mktemp)
# Runs one client on core 1 and appends its line, with the client's own CPU time (user + system)
# per message in microseconds: the figure the server cannot limit.
run() { # sed-expression command...
    local rename=$1 cpu
    shift
    cpu=$( { TIMEFORMAT='%3U %3S'; time taskset -c 1 "$@" >"$line"; } 2>&1 | tail -1)
    sed "$rename" "$line" | awk -v cpu="$cpu" -v n="$messages" '{split(cpu, c, " "); printf "%s %s %s %.2f\n", $1, $2, $3, (c[1] + c[2]) * 1e6 / n}' >>"$results"
}
for round in $(seq 1 "$rounds"); do
    for connections in 1 100; do
        run "" "$swift_bench" duplex "$url" "$messages" "$connections"
        if [ -n "$before" ]; then
            run 's/^duplex /duplex-before /' "$before" duplex "$url" "$messages" "$connections"
        fi
        run "" python3 Benchmarks/picows_echo_client.py "$url" "$messages" "$connections"
        run "" "$swift_bench" wsclient "$url" "$messages" "$connections"
        run "" node Benchmarks/node_echo_client.js "$url" "$messages" "$connections"
        run "" python3 Benchmarks/python_echo_client.py --throughput "$url" "$messages" "$connections"
    done
    echo "round $round done" >&2
done
echo
echo "| client | 1 connection (msgs/s) | 100 connections (msgs/s) | client CPU per message, 1 / 100 (µs) | runs |"
echo "|---|---|---|---|---|"
for client in duplex ${before:+duplex-before} picows wsclient node-ws python-websockets; do
    median() { grep "^$client $1 " "$results" | awk -v f="$2" '{print $f}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    runs=$(grep -c "^$client 1 " "$results")
    echo "| $client | $(median 1 3) | $(median 100 3) | $(median 1 4) / $(median 100 4) | $runs each |"
done
echo
echo "all runs:"
sort "$results"
rm -f "$results" "$line"
