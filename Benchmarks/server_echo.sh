#!/bin/bash
# Server /echo throughput and round trip, duplex-server next to Node `ws` (Debian node-ws), a
# bare hummingbird-websocket echo server and Python `websockets`, in one run: servers pinned to CPU 0, the load generator (Benchmarks/echo_load.c, epoll, checks
# every echo) to CPU 1, rounds interleaved. Prints one line per run; take the medians.
# DUPLEX_SERVER_FLAGS adds flags to duplex-server (default: --event-loops 1, one event loop for
# the one core it is pinned to, as Node has one thread).
#
#   swift build -c release --scratch-path .build-release --product duplex-server
#   swift build -c release --scratch-path .build-release --product hummingbird-echo-server
#   Benchmarks/server_echo.sh .build-release/release/duplex-server [ROUNDS] [SECONDS]
# The hummingbird server is taken from beside duplex-server; SERVERS picks which run
# (default: "duplex node hummingbird python"; "duplex=PATH" runs another duplex-server binary,
# to compare two builds in the same rounds), and SHAPES which shapes, as "N D S" triples
# separated by commas (default: "1 64 64,100 16 64,100 1 64").
set -euo pipefail
BIN=${1:?usage: server_echo.sh DUPLEX_SERVER_BINARY [ROUNDS] [SECONDS]}
ROUNDS=${2:-3}
SECONDS_PER_RUN=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
LOAD=$(mktemp -d)/echo_load
gcc -O2 -o "$LOAD" "$HERE/echo_load.c"
[ -d /usr/share/nodejs/ws ] || { echo "node-ws is missing: apt-get install node-ws" >&2; exit 1; }

start_duplex() { # [binary]
  local port=$((20000 + RANDOM % 20000))
  # shellcheck disable=SC2086
  taskset -c 0 "${1:-$BIN}" --port "$port" --log-level error ${DUPLEX_SERVER_FLAGS---event-loops 1} >/dev/null 2>&1 &
  PID=$!; PORT=$port
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "duplex-server did not start" >&2; exit 1
}
start_peer() { # command...
  local out; out=$(mktemp)
  taskset -c 0 "$@" >"$out" 2>&1 &
  PID=$!
  for _ in $(seq 200); do grep -q ws:// "$out" && break; sleep 0.05; done
  PORT=$(grep -oE 'ws://127.0.0.1:[0-9]+' "$out" | head -1 | sed 's#.*:##' || true)
  [ -n "$PORT" ] || { echo "$* did not start: $(cat "$out")" >&2; exit 1; }
}
CPU() { awk '{print $14+$15}' /proc/$1/stat; }

for round in $(seq "$ROUNDS"); do
  for server in ${SERVERS:-duplex node hummingbird python}; do
    IFS=, read -ra shapes <<<"${SHAPES:-1 64 64,100 16 64,100 1 64}"
    for shape in "${shapes[@]}"; do
      case $server in
        duplex) start_duplex ;;
        duplex=*) start_duplex "${server#duplex=}" ;;
        node) start_peer node "$HERE/node_echo_server.js" ;;
        hummingbird) start_peer "$(dirname "$BIN")/hummingbird-echo-server" 0 1 ;;
        python) start_peer python3 "$HERE/python_echo_server.py" ;;
      esac
      before=$(CPU $PID)
      result=$(taskset -c 1 "$LOAD" "$PORT" $shape "$SECONDS_PER_RUN" /echo)
      after=$(CPU $PID)
      kill $PID; wait $PID 2>/dev/null || true
      msgs=$(echo "$result" | awk '{print $2}')
      ticks=$((after - before))
      # CPU per message in microseconds (clock ticks are 10 ms; the run includes a 1 s warm-up).
      cpu=$(awk -v t=$ticks -v m=$msgs -v s=$SECONDS_PER_RUN 'BEGIN { printf "%.2f", (t*10000)/(m*(s+1)) }')
      echo "round $round $server N/D/S=$(echo $shape | tr ' ' /) $result cpu_us_per_msg $cpu"
    done
  done
done
