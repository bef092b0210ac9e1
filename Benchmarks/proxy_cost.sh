#!/bin/bash
# The cost of a proxy route itself (issue 62): an echo upstream (Go gorilla/websocket,
# GOMAXPROCS=1) reached directly, and through duplex-server's pass-through proxy route with no
# rules (--script, one event loop), in the same rounds, interleaved. The upstream and the proxy
# share CPU 0 (so a proxied run has the same one core of server work as a direct one), the load
# generator (Benchmarks/echo_load.c) runs on CPU 1. Shapes: request/response (N100 D1) and
# pipelined (N100 D16), 64-byte messages. Then the memory per idle proxied pair: duplex-server's
# RSS with 1,000 idle connections through the route (each one a client connection and an
# upstream one), by Benchmarks/server_rss.py. Prints one line per run; take the medians.
#
#   swift build -c release --scratch-path .build-release --product duplex-server
#   Benchmarks/proxy_cost.sh .build-release/release/duplex-server [ROUNDS] [SECONDS]
set -euo pipefail
BIN=${1:?usage: proxy_cost.sh DUPLEX_SERVER_BINARY [ROUNDS] [SECONDS]}
ROUNDS=${2:-3}
SECONDS_PER_RUN=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
LOAD=$WORK/echo_load
gcc -O2 -o "$LOAD" "$HERE/echo_load.c"
GORILLA=$WORK/gorilla_echo_server
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$WORK/gocache go build -o "$GORILLA" "$HERE/gorilla_echo_server.go"

start_upstream() {
  local out=$WORK/upstream.out
  GOMAXPROCS=1 taskset -c 0 "$GORILLA" >"$out" 2>&1 &
  UPSTREAM_PID=$!
  for _ in $(seq 200); do grep -qE 'ws://' "$out" && break; sleep 0.05; done
  UPSTREAM_PORT=$(grep -oE 'ws://127.0.0.1:[0-9]+' "$out" | head -1 | sed 's#.*:##')
  printf '{"routes": [{"path": "/p", "proxy": {"upstream": "ws://127.0.0.1:%s/echo"}}]}\n' "$UPSTREAM_PORT" >"$WORK/proxy.json"
}
start_proxy() {
  local port=$((20000 + RANDOM % 20000))
  taskset -c 0 "$BIN" --port "$port" --log-level error --event-loops 1 --script "$WORK/proxy.json" >/dev/null 2>&1 &
  PROXY_PID=$!; PROXY_PORT=$port
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "duplex-server did not start" >&2; exit 1
}

for round in $(seq "$ROUNDS"); do
  for shape in "100 1 64" "100 16 64"; do
    for mode in direct proxied; do
      start_upstream
      if [ $mode = proxied ]; then
        start_proxy
        result=$(taskset -c 1 "$LOAD" "$PROXY_PORT" $shape "$SECONDS_PER_RUN" /p)
        kill $PROXY_PID; wait $PROXY_PID 2>/dev/null || true
      else
        result=$(taskset -c 1 "$LOAD" "$UPSTREAM_PORT" $shape "$SECONDS_PER_RUN" /echo)
      fi
      kill $UPSTREAM_PID; wait $UPSTREAM_PID 2>/dev/null || true
      echo "round $round $mode N/D/S=$(echo $shape | tr ' ' /) $result"
    done
  done
done

start_upstream
DUPLEX_RSS_PATH=/p DUPLEX_RSS_DEFLATE=0 DUPLEX_RSS_SILENT=1 python3 "$HERE/server_rss.py" "$BIN" 1000 --script "$WORK/proxy.json"
kill $UPSTREAM_PID; wait $UPSTREAM_PID 2>/dev/null || true
