#!/usr/bin/env bash
# The built `duplex` CLI against third-party peers and a real terminal:
# - `duplex echo` and `duplex ws` against Python's `websockets` echo server ($DUPLEX_INTEROP_WS_URL);
# - `duplex listen --json` against an aiohttp SSE server ($DUPLEX_INTEROP_SSE_URL), and
#   `duplex listen -X POST ... --until '[DONE]'` against its completions API, with curl as reference;
# - `duplex chat` in a tmux terminal: a message that arrives while the user types appears above
#   the input line, and the half-typed line is kept and sent whole.
# Usage: Tests/Interop/cli.sh BIN_DIR   (the folder holding duplex and duplex-server)
set -euo pipefail
bin=${1:?usage: cli.sh BIN_DIR}
: "${DUPLEX_INTEROP_WS_URL:?set DUPLEX_INTEROP_WS_URL to a websockets echo server}"
: "${DUPLEX_INTEROP_SSE_URL:?set DUPLEX_INTEROP_SSE_URL to the aiohttp SSE server}"
work=$(mktemp -d)
pid=""
session="duplex-cli-$$"
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Polls a condition (a shell command) every 0.1 s for at most $1 seconds.
wait_for() {
    local limit=$1; shift
    for _ in $(seq 1 $((limit * 10))); do
        if eval "$@"; then return 0; fi
        sleep 0.1
    done
    return 1
}

# echo and ws against Python websockets.
out=$(timeout 20 "$bin/duplex" echo "$DUPLEX_INTEROP_WS_URL" one "two words") || fail "duplex echo against websockets exited $?"
[ "$out" = $'one\ntwo words' ] || fail "duplex echo printed: $out"
# websockets answers a close at once and drops replies still due, so stdin stays open until
# both replies are printed.
mkfifo "$work/in"
timeout 20 "$bin/duplex" ws "$DUPLEX_INTEROP_WS_URL" <"$work/in" >"$work/ws.out" 2>"$work/ws.err" &
ws_pid=$!
exec 3>"$work/in"
printf 'hello\nworld\n' >&3
wait_for 10 '[ "$(cat "$work/ws.out")" = $'"'"'hello\nworld'"'"' ]' || fail "duplex ws printed: $(cat "$work/ws.out")"
exec 3>&-
wait "$ws_pid" || fail "duplex ws exited $?: $(cat "$work/ws.err")"
grep -q "closed: 1000" "$work/ws.err" || fail "duplex ws did not report the close: $(cat "$work/ws.err")"
# With --linger, piped input works too: the client keeps reading after the end of stdin.
out=$(printf 'one\ntwo\n' | timeout 20 "$bin/duplex" ws --linger 2 "$DUPLEX_INTEROP_WS_URL" 2>/dev/null) || fail "duplex ws --linger exited $?"
[ "$out" = $'one\ntwo' ] || fail "duplex ws --linger printed: $out"
echo "duplex echo and ws against Python websockets: ok"

# listen against aiohttp, whose responses end every few events: ids keep counting across them.
timeout 30 "$bin/duplex" listen --json --max-events 7 "$DUPLEX_INTEROP_SSE_URL/stream" >"$work/sse" 2>"$work/sse.err" \
    || fail "duplex listen exited $?: $(cat "$work/sse.err")"
[ "$(wc -l <"$work/sse")" -eq 7 ] || fail "duplex listen printed $(wc -l <"$work/sse") lines"
python3 - "$work/sse" <<'PY' || fail "duplex listen --json output: $(cat "$work/sse")"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
assert all(set(e) >= {"id", "event", "data"} and isinstance(e["data"], str) for e in events), events
PY
echo "duplex listen --json against aiohttp: ok"

# listen -X POST against aiohttp's completions API: what it prints is what curl -N sees, up to
# [DONE]; a 429 exits 6 with the API's JSON error on stderr; a drop exits 7, and the server counts
# one request (never sent again).
api="$DUPLEX_INTEROP_SSE_URL/v1/completions"
timeout 30 "$bin/duplex" listen --json -X POST -H 'Content-Type: application/json' -d '{"prompt":"hi there"}' --until '[DONE]' "$api" \
    >"$work/post" 2>"$work/post.err" || fail "duplex listen -X POST exited $?: $(cat "$work/post.err")"
curl -sSN -X POST -H 'Content-Type: application/json' -d '{"prompt":"hi there"}' "$api" >"$work/post.curl" || fail "curl -N -X POST failed"
python3 - "$work/post" "$work/post.curl" <<'PY' || fail "duplex listen -X POST printed: $(cat "$work/post") where curl saw: $(cat "$work/post.curl")"
import json, sys
printed = [json.loads(line)["data"] for line in open(sys.argv[1])]
sent = [line[len("data: "):] for line in open(sys.argv[2]).read().splitlines() if line.startswith("data: ")]
assert printed == sent and sent[-1] == "[DONE]", (printed, sent)
PY
set +e
timeout 30 "$bin/duplex" listen -X POST -H 'Content-Type: application/json' -d '{"prompt":"busy"}' "$api" >/dev/null 2>"$work/busy.err"
status=$?
set -e
[ "$status" -eq 6 ] && grep -q '"rate_limit_error"' "$work/busy.err" || fail "duplex listen against a 429 exited $status: $(cat "$work/busy.err")"
# Ten times: the drop's last event and its end reach the command a moment apart, and a drop once
# read as a clean end (exit 0) when the events finished before the end's state arrived.
for n in 1 2 3 4 5 6 7 8 9 10; do
    set +e
    timeout 30 "$bin/duplex" listen -d '{}' "$DUPLEX_INTEROP_SSE_URL/v1/drop?key=cli-$$-$n" >/dev/null 2>"$work/drop.err"
    dropped=$?
    set -e
    [ "$dropped" -eq 7 ] || fail "duplex listen of a dropped POST stream exited $dropped, not 7 (run $n of 10): $(cat "$work/drop.err")"
    [ "$(curl -s "$DUPLEX_INTEROP_SSE_URL/v1/count?key=cli-$$-$n")" = 1 ] || fail "the dropped POST was sent again (run $n of 10)"
done
echo "duplex listen -X POST against aiohttp, as curl -N sees it; 429 exits 6 with its body; a drop exits 7, sent once: ok"

# chat in a real terminal.
"$bin/duplex-server" --port 0 --log-level warning >"$work/server" 2>&1 &
pid=$!
wait_for 10 'grep -q "listening on" "$work/server"' || fail "duplex-server did not start: $(cat "$work/server")"
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/server" | head -n 1)
url="ws://127.0.0.1:$port/chat/terminal"
tmux new-session -d -s "$session" -x 100 -y 20 "$bin/duplex chat $url --name alice; echo EXIT=\$?; sleep 60"
pane() { tmux capture-pane -p -t "$session"; }
wait_for 10 'pane | grep -q "joined #terminal as alice"' || fail "alice did not join: $(pane)"
tmux send-keys -t "$session" "half-typ"
wait_for 10 'pane | grep -q "alice> half-typ"' || fail "the typed text is not on the input line: $(pane)"
echo "message from bob" | timeout 20 "$bin/duplex" chat "$url" --name bob >/dev/null || fail "bob's chat exited $?"
wait_for 10 'pane | grep -q "bob: message from bob"' || fail "bob's message did not appear: $(pane)"
# The incoming line is above the input line, which still holds what alice typed.
pane | grep -v '^$' | tail -n 1 | grep -qx "alice> half-typ" || fail "the input line was garbled: $(pane)"
tmux send-keys -t "$session" "ed line" Enter
wait_for 10 'pane | grep -q "alice: half-typed line"' || fail "the line was not sent whole: $(pane)"
tmux send-keys -t "$session" "/quit" Enter
wait_for 10 'pane | grep -q "EXIT=0"' || fail "/quit did not exit 0: $(pane)"
echo "duplex chat in a terminal: ok"
