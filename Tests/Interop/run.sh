#!/usr/bin/env bash
# Interop checks of the built duplex-server against third-party peers: Python's `websockets`
# (echo, chat, resume, 1009, subprotocols, permessage-deflate and a zip bomb, 1001 on SIGTERM, a
# close injected by curl through /_chaos/) and
# `curl -N` (SSE ticks and Last-Event-ID); GET /metrics parsed by Python's prometheus_client, its
# counters checked against that traffic; those clients' sessions recorded by `duplex record` and
# replayed by `duplex replay` (the duplex CLI next to the server binary); and a path switch
# through `duplex proxy` as websockets and curl see it without a network-change hint; proxy
# routes in front of a Python websockets upstream (proxy_check.py); the protocol presets of
# docs/examples/ against gql, python-socketio and paho-mqtt (presets_check.py).
# Usage: Tests/Interop/run.sh PATH/TO/duplex-server
set -euo pipefail
server_bin=${1:?usage: run.sh PATH/TO/duplex-server}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# Starts the server on a free port with extra flags; sets $pid and $port. It says how long the
# server took to listen; a server that has not listened within 30 s fails with its output.
start_server() {
    local started=$(date +%s%N)
    "$server_bin" --port 0 --log-level warning "$@" >"$work/out" 2>"$work/err" &
    pid=$!
    for _ in $(seq 1 300); do
        if grep -q "listening on" "$work/out"; then break; fi
        kill -0 "$pid" 2>/dev/null || fail "duplex-server exited: $(cat "$work/err")"
        sleep 0.1
    done
    line=$(grep -m1 "listening on" "$work/out" || true)
    [[ "$line" =~ ^duplex-server\ listening\ on\ http://127\.0\.0\.1:([0-9]+)$ ]] \
        || fail "no listening line after $(( ($(date +%s%N) - started) / 1000000 )) ms; stdout: '$(cat "$work/out")'; stderr: '$(cat "$work/err")'"
    port=${BASH_REMATCH[1]}
    echo "duplex-server $* listening on port $port after $(( ($(date +%s%N) - started) / 1000000 )) ms"
}

# Sends SIGTERM and checks the server exits 0 within 15 s.
stop_server() {
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "duplex-server still running 15 s after SIGTERM"
    wait "$pid" && status=0 || status=$?
    pid=""
    [ "$status" -eq 0 ] || fail "duplex-server exited $status after SIGTERM"
}

start_server --max-message-bytes 4096

health=$(curl -sS --max-time 5 "http://127.0.0.1:$port/health")
[ "$health" = '{"status":"ok","store":{"kind":"memory","rooms":0},"http2":{"connections":0,"streams":0,"webSockets":0}}' ] || fail "health: $health"
echo "health: ok"

timeout 30 python3 "$here/websockets_client.py" "$port" echo
timeout 30 python3 "$here/websockets_client.py" "$port" chat
timeout 30 python3 "$here/websockets_client.py" "$port" oversize
timeout 30 python3 "$here/websockets_client.py" "$port" negotiation

# SSE with curl -N: retry first, then ticks with consecutive integer ids.
curl -s -N --max-time 1 "http://127.0.0.1:$port/events?interval=50" >"$work/sse" || true
head -n 1 "$work/sse" | grep -qx "retry: 2000" || fail "SSE does not open with retry: 2000"
grep -q "^event: tick$" "$work/sse" || fail "no tick events"
mapfile -t ids < <(grep '^id: ' "$work/sse" | cut -d' ' -f2)
[ "${#ids[@]}" -ge 5 ] || fail "only ${#ids[@]} ticks in 1 s at 50 ms"
for i in $(seq 1 $((${#ids[@]} - 1))); do
    [ "${ids[$i]}" -eq $((${ids[$((i - 1))]} + 1)) ] || fail "tick ids not consecutive: ${ids[*]}"
done
last=${ids[$((${#ids[@]} - 1))]}
curl -s -N --max-time 1 -H "Last-Event-ID: $last" "http://127.0.0.1:$port/events?interval=50" >"$work/resumed" || true
first=$(grep -m1 '^id: ' "$work/resumed" | cut -d' ' -f2)
[ "$first" -eq $((last + 1)) ] || fail "resume after $last started at $first"
echo "sse (curl -N): ok (${#ids[@]} ticks, resume after $last at $first)"

# What that traffic was counted as, parsed by an independent Prometheus parser.
timeout 30 python3 "$here/metrics_check.py" "$port" \
    'duplex_connections_total{route="echo",transport="tcp"}>=1' 'duplex_messages_total{route="echo",direction="in"}>=1' \
    'duplex_messages_total{route="echo",direction="out"}>=1' 'duplex_connections_total{route="chat",transport="tcp"}>=1' \
    'duplex_messages_total{route="events",direction="out"}>=5' 'duplex_close_codes_sent_total{code="1009"}>=1' \
    'duplex_process_resident_memory_bytes>=1000000' \
    'duplex_compression_bytes_total{direction="in",form="compressed"}>=1' \
    'duplex_compression_bytes_total{direction="out",form="uncompressed"}>=1'

# Graceful shutdown: a connected client gets 1001 and the server exits 0.
python3 "$here/websockets_client.py" "$port" wait_for_shutdown >"$work/waiter" 2>&1 &
waiter=$!
for _ in $(seq 1 100); do grep -q READY "$work/waiter" && break; sleep 0.1; done
grep -q READY "$work/waiter" || fail "shutdown waiter did not connect: $(cat "$work/waiter")"
stop_server
wait "$waiter" || fail "shutdown waiter: $(cat "$work/waiter")"
grep "shutdown: ok" "$work/waiter"

# Chaos from a script: a client's connection broken with curl.
start_server --chaos
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/_chaos/drop?room=nobody")
[ "$status" = 200 ] || fail "/_chaos/drop answered $status"
python3 "$here/websockets_client.py" "$port" wait_for_chaos_close >"$work/chaos" 2>&1 &
victim=$!
for _ in $(seq 1 100); do grep -q READY "$work/chaos" && break; sleep 0.1; done
grep -q READY "$work/chaos" || fail "chaos client did not connect: $(cat "$work/chaos")"
affected=$(curl -s -X POST "http://127.0.0.1:$port/_chaos/close?code=4000&reason=scripted&route=echo")
[ "$affected" = '{"affected":1}' ] || fail "/_chaos/close answered $affected"
wait "$victim" || fail "chaos client: $(cat "$work/chaos")"
grep "chaos: ok" "$work/chaos"
timeout 30 python3 "$here/metrics_check.py" "$port" \
    'duplex_faults_injected_total{fault="close"}>=1' 'duplex_faults_injected_total{fault="drop"}>=1' \
    'duplex_close_codes_sent_total{code="other"}>=1'
stop_server
# Record and replay (docs/cassettes.md): the Python client's echo and chat sessions and a curl
# SSE stream recorded through `duplex record`, then served by `duplex replay` to the same clients,
# strictly: a message of theirs that differs from the recording fails them and the replay. On a
# server of its own: the chat's say would be a duplicate in the room the first run used.
start_server
duplex_bin="$(dirname "$server_bin")/duplex"
[ -x "$duplex_bin" ] || fail "no duplex CLI next to $server_bin: build the duplex product too"
# Waits up to 30 s for a line matching $2 in file $1 from process $3; prints the port after the
# line's first "127.0.0.1:".
listening_port() {
    for _ in $(seq 1 300); do
        grep -q "$2" "$1" && break
        kill -0 "$3" 2>/dev/null || fail "$2: the process exited: $(cat "$1")"
        sleep 0.1
    done
    grep -m1 "$2" "$1" | sed -E 's/^[^:]*127\.0\.0\.1:([0-9]+).*/\1/' | grep -E '^[0-9]+$' || fail "no '$2' line: $(cat "$1")"
}
"$duplex_bin" record --listen 127.0.0.1:0 --upstream "ws://127.0.0.1:$port" --out "$work/session.cassette" >"$work/record.out" 2>&1 &
recorder=$!
record_port=$(listening_port "$work/record.out" "duplex record listening on" "$recorder")
timeout 30 python3 "$here/websockets_client.py" "$record_port" echo
timeout 30 python3 "$here/websockets_client.py" "$record_port" chat
curl -s -N --max-time 1 "http://127.0.0.1:$record_port/events?interval=50" >"$work/recorded-sse" || true
kill -INT "$recorder"
wait "$recorder" || fail "duplex record exited $?: $(cat "$work/record.out")"
sessions=$(grep -c '"open":' "$work/session.cassette")
[ "$sessions" -eq 5 ] || fail "the cassette has $sessions sessions, not 5 (echo, alice, bob, carol, SSE)"
"$duplex_bin" replay "$work/session.cassette" --listen 127.0.0.1:0 --no-delays >"$work/replay.out" 2>&1 &
replayer=$!
replay_port=$(listening_port "$work/replay.out" "duplex replay listening on" "$replayer")
timeout 30 python3 "$here/websockets_client.py" "$replay_port" echo
timeout 30 python3 "$here/websockets_client.py" "$replay_port" chat
curl -s -N --max-time 1 "http://127.0.0.1:$replay_port/events?interval=50" >"$work/replayed-sse" || true
# The cassette holds every event the server sent, which may be one more than curl read before its
# --max-time cut the stream: the replay must serve the cassette's events, and what curl read while
# recording must be where they begin.
recorded_ids=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    step = json.loads(line)
    if "event" in step and "id" in step["event"]:
        print("id: " + step["event"]["id"])
' "$work/session.cassette")
[ "$(grep '^id: ' "$work/replayed-sse")" = "$recorded_ids" ] \
    || fail "the replayed SSE ids differ from the cassette's: $(grep -c '^id: ' "$work/replayed-sse") against $(printf '%s\n' "$recorded_ids" | grep -c '^id: ')"
read_ids=$(grep '^id: ' "$work/recorded-sse") || fail "curl read no SSE event through the recorder"
case "$recorded_ids"$'\n' in
    "$read_ids"$'\n'*) ;;
    *) fail "the cassette's SSE ids do not begin with the ones curl read through the recorder" ;;
esac
kill -INT "$replayer"
wait "$replayer" || fail "duplex replay exited $? (a mismatch?): $(cat "$work/replay.out")"
echo "record and replay: ok ($sessions sessions, $(grep -c '^id: ' "$work/recorded-sse") SSE events, replayed strictly)"
stop_server
# A path switch through `duplex proxy`, as third-party clients without a network-change hint see
# it: Python websockets notices only by its keepalive's timeout; curl -N reading SSE sees its
# stream go silent, nothing closes, and it waits until its own --max-time.
start_server
"$duplex_bin" proxy --listen 127.0.0.1:0 --upstream "127.0.0.1:$port" >"$work/proxy.out" 2>&1 &
proxier=$!
proxy_port=$(listening_port "$work/proxy.out" "duplex proxy listening on" "$proxier")
for _ in $(seq 1 100); do grep -q "duplex proxy control on" "$work/proxy.out" && break; sleep 0.1; done
control_port=$(grep -m1 "duplex proxy control on" "$work/proxy.out" | sed -E 's|.*http://127\.0\.0\.1:([0-9]+).*|\1|')
[[ "$control_port" =~ ^[0-9]+$ ]] || fail "no control line: $(cat "$work/proxy.out")"
control="http://127.0.0.1:$control_port"
DUPLEX_PROXY_CONTROL="$control" timeout 30 python3 "$here/websockets_client.py" "$proxy_port" path_switch
curl -s -X DELETE "$control/toxics" >/dev/null
curl -s -N --max-time 3 "http://127.0.0.1:$proxy_port/events?interval=100" >"$work/switched-sse" &
reader=$!
wait_ticks() { for _ in $(seq 1 50); do [ "$(grep -c '^id: ' "$work/switched-sse")" -ge 3 ] && return 0; sleep 0.1; done; return 1; }
wait_ticks || fail "curl read no ticks through the proxy"
curl -s -X POST "$control/toxics?type=path-switch" >/dev/null
sleep 0.5
at_switch=$(wc -c <"$work/switched-sse")
wait "$reader" && curl_status=0 || curl_status=$?
[ "$curl_status" -eq 28 ] || fail "curl -N exited $curl_status over a switched path, not 28 (its --max-time)"
[ "$(wc -c <"$work/switched-sse")" -eq "$at_switch" ] || fail "bytes arrived over a switched path"
echo "path switch (curl -N, no hint): the stream went silent and stayed open until curl's own --max-time (exit 28)"
kill -TERM "$proxier"; wait "$proxier" || true
stop_server
# Scripted routes from docs/examples/feed.json: Python websockets and curl see what the file
# says, GET /_journal shows what they sent; a wrong script is refused at start with exit 64.
start_server --script "$here/../../docs/examples/feed.json"
grep -q "scripted routes: WebSocket /feed, SSE GET /orders" "$work/out" || fail "no scripted routes line: $(cat "$work/out")"
timeout 30 python3 "$here/websockets_client.py" "$port" scripted_feed
curl -s -N --max-time 5 "http://127.0.0.1:$port/orders" >"$work/orders" && curl_status=0 || curl_status=$?
[ "$curl_status" -eq 18 ] || fail "curl -N exited $curl_status on /orders, not 18 (the script drops the stream unfinished)"
printf 'id: 1\nevent: order\ndata: {"n":1}\n\nid: 2\ndata: b\n\n' | cmp -s - "$work/orders" || fail "/orders sent: $(cat "$work/orders")"
curl -s -N --max-time 5 -H "Last-Event-ID: 1" "http://127.0.0.1:$port/orders" >"$work/orders-resumed" || true
printf 'id: 2\ndata: b\n\n' | cmp -s - "$work/orders-resumed" || fail "/orders after Last-Event-ID 1 sent: $(cat "$work/orders-resumed")"
curl -sS --max-time 5 "http://127.0.0.1:$port/_journal" >"$work/journal"
python3 - "$work/journal" <<'PY' || fail "the journal: $(head -c 2000 "$work/journal")"
import json, sys
entries = json.load(open(sys.argv[1]))
sent = [e["data"] for e in entries if e["path"] == "/feed" and e["direction"] == "in" and e["kind"] == "text"]
assert sent == ['{"type":"ping","id":1}', "bye", "one", "two", "three"], sent
assert any(e["kind"] == "ping" and e["direction"] == "in" for e in entries), "no ping journaled"
assert not any(e["kind"] == "pong" and e["direction"] == "out" for e in entries), "a pong journaled"
assert [e["kind"] for e in entries if e["path"] == "/feed" and e["direction"] == "out"][-1] == "drop"
opens = [e for e in entries if e["kind"] == "open" and e["path"] == "/orders"]
assert [o["request"].get("lastEventID") for o in opens] == [None, "1"], opens
print(f"journal: {len(entries)} entries, the client's messages in order")
PY
[ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$port/_journal")" = 204 ] || fail "DELETE /_journal"
[ "$(curl -s "http://127.0.0.1:$port/_journal")" = "[]" ] || fail "the journal is not empty after DELETE"
stop_server
printf '{"routes":[{"path":"/feed","websocket":{"onMessage":[{"match":{"jsn":{}},"do":[]}]}}]}' >"$work/bad.json"
"$server_bin" --port 0 --script "$work/bad.json" >"$work/bad.out" 2>&1 && bad_status=0 || bad_status=$?
[ "$bad_status" -eq 64 ] || fail "a bad script exited $bad_status, not 64"
grep -q 'routes\[0\].websocket.onMessage\[0\].match: unknown key "jsn"' "$work/bad.out" || fail "a bad script said: $(cat "$work/bad.out")"
printf '{"routes":[{"path":"/echo","websocket":{}}]}' >"$work/clash.json"
"$server_bin" --port 0 --script "$work/clash.json" >"$work/clash.out" 2>&1 && bad_status=0 || bad_status=$?
[ "$bad_status" -eq 64 ] && grep -q "clashes with the built-in route GET /echo" "$work/clash.out" || fail "a clashing script: $bad_status $(cat "$work/clash.out")"
echo "scripted routes: Python websockets and curl -N saw what feed.json says; the journal has what they sent; bad scripts exit 64"
# Proxy routes in front of a Python websockets upstream, from Python clients.
timeout 120 python3 "$here/proxy_check.py" "$server_bin" || fail "proxy routes (above)"
# Protocol presets: the example files of docs/examples/ served to gql, python-socketio and paho-mqtt.
timeout 180 python3 "$here/presets_check.py" "$server_bin" "$here/../../docs/examples" || fail "protocol presets (above)"
echo "interop: all checks passed"
