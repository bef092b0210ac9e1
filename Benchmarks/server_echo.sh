#!/bin/bash
# Server /echo throughput and round trip, duplex-server next to the strongest peers we know, in
# one run: uWebSockets (socketify), picows (on uvloop), Go gorilla/websocket (GOMAXPROCS=1) and
# Node `ws`; a bare hummingbird-websocket echo server and Python `websockets` on request. Every
# server is pinned to CPU 0 with one event loop or thread, the load generator
# (Benchmarks/echo_load.c, epoll, checks every echo) to CPU 1, rounds interleaved. Prints one
# line per run; take the medians. Benchmarks/install_peers.sh installs what is missing first.
# DUPLEX_SERVER_FLAGS adds flags to duplex-server (default: --event-loops 1, one event loop for
# the one core it is pinned to, as Node has one thread).
#
#   swift build -c release --scratch-path .build-release --product duplex-server
#   swift build -c release --package-path Benchmarks --product hummingbird-echo-server
#   Benchmarks/server_echo.sh .build-release/release/duplex-server [ROUNDS] [SECONDS]
# The hummingbird server is taken from beside duplex-server; SERVERS picks which run
# (default: "duplex uws picows gorilla node"; also "hummingbird" and "python"; "duplex=PATH" runs another duplex-server binary,
# to compare two builds in the same rounds), and SHAPES which shapes, as "N D S" triples
# separated by commas (default: "1 64 64,100 16 64,100 1 64").
# TLS=1 runs everything over wss:// instead: duplex-server --tls-self-signed, Node `ws` on Node's
# https module with a certificate made by openssl, and the generator built with OpenSSL
# (-DWITH_TLS); "plain" and "tls" can also be compared in one run with SERVERS entries
# "duplex-plain" and "node-plain", which stay on ws:// while TLS=1 (uws, picows and gorilla run
# over ws:// only, and are skipped under TLS=1).
set -euo pipefail
BIN=${1:?usage: server_echo.sh DUPLEX_SERVER_BINARY [ROUNDS] [SECONDS]}
ROUNDS=${2:-3}
SECONDS_PER_RUN=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
LOAD=$WORK/echo_load
gcc -O2 -o "$LOAD" "$HERE/echo_load.c"
TLS_LOAD=$WORK/echo_load_tls
if [ "${TLS:-0}" = 1 ]; then
  gcc -O2 -DWITH_TLS -o "$TLS_LOAD" "$HERE/echo_load.c" -lssl -lcrypto
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
    -days 1 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
fi
"$HERE/install_peers.sh"
GORILLA=$WORK/gorilla_echo_server
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$WORK/gocache go build -o "$GORILLA" "$HERE/gorilla_echo_server.go"

start_duplex() { # [binary] [tls]
  local port=$((20000 + RANDOM % 20000))
  local tls_flags="" scheme=http
  if [ "${2:-0}" = 1 ]; then tls_flags="--tls-self-signed --tls-directory $WORK/duplex-tls"; scheme=https; fi
  # shellcheck disable=SC2086
  taskset -c 0 "${1:-$BIN}" --port "$port" --log-level error ${DUPLEX_SERVER_FLAGS---event-loops 1} $tls_flags >/dev/null 2>&1 &
  PID=$!; PORT=$port
  for _ in $(seq 100); do curl -skf "$scheme://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "duplex-server did not start" >&2; exit 1
}
start_peer() { # command...
  local out; out=$(mktemp)
  taskset -c 0 "$@" >"$out" 2>&1 &
  PID=$!
  for _ in $(seq 200); do grep -qE 'wss?://' "$out" && break; sleep 0.05; done
  PORT=$(grep -oE 'wss?://127.0.0.1:[0-9]+' "$out" | head -1 | sed 's#.*:##' || true)
  [ -n "$PORT" ] || { echo "$* did not start: $(cat "$out")" >&2; exit 1; }
}
CPU() { awk '{print $14+$15}' /proc/$1/stat; }

for round in $(seq "$ROUNDS"); do
  for server in ${SERVERS:-duplex uws picows gorilla node}; do
    case $server in uws | picows | gorilla) if [ "${TLS:-0}" = 1 ]; then echo "$server: ws:// only, skipped under TLS=1" >&2; continue; fi ;; esac
    IFS=, read -ra shapes <<<"${SHAPES:-1 64 64,100 16 64,100 1 64}"
    for shape in "${shapes[@]}"; do
      tls=${TLS:-0}
      case $server in
        duplex) start_duplex "$BIN" "$tls" ;;
        duplex=*) start_duplex "${server#duplex=}" "$tls" ;;
        duplex-plain) tls=0; start_duplex "$BIN" 0 ;;
        node) if [ "$tls" = 1 ]; then DUPLEX_TLS_CERT=$WORK/cert.pem DUPLEX_TLS_KEY=$WORK/key.pem start_peer node "$HERE/node_echo_server.js"; else start_peer node "$HERE/node_echo_server.js"; fi ;;
        node-plain) tls=0; start_peer node "$HERE/node_echo_server.js" ;;
        hummingbird) start_peer "${HUMMINGBIRD_ECHO_SERVER:-$HERE/.build/release/hummingbird-echo-server}" 0 1 ;;
        python) start_peer python3 "$HERE/python_echo_server.py" ;;
        uws) start_peer python3 "$HERE/uws_echo_server.py" ;;
        picows) start_peer python3 "$HERE/picows_echo_server.py" ;;
        gorilla) GOMAXPROCS=1 start_peer "$GORILLA" ;;
      esac
      before=$(CPU $PID)
      load=$LOAD; [ "$tls" = 1 ] && load=$TLS_LOAD
      result=$(taskset -c 1 "$load" "$PORT" $shape "$SECONDS_PER_RUN" /echo)
      after=$(CPU $PID)
      kill $PID; wait $PID 2>/dev/null || true
      msgs=$(echo "$result" | awk '{print $2}')
      ticks=$((after - before))
      # CPU per message in microseconds (clock ticks are 10 ms; the run includes a 1 s warm-up).
      cpu=$(awk -v t=$ticks -v m=$msgs -v s=$SECONDS_PER_RUN 'BEGIN { printf "%.2f", (t*10000)/(m*(s+1)) }')
      echo "round $round $server$([ "$tls" = 1 ] && echo " tls") N/D/S=$(echo $shape | tr ' ' /) $result cpu_us_per_msg $cpu"
    done
  done
done
