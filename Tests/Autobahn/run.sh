#!/usr/bin/env bash
# Autobahn|Testsuite on both ends of Duplex, compared with the checked-in expected results.
#
#   Tests/Autobahn/run.sh BIN_DIR [server|client|both] [CASES]
#
# BIN_DIR holds release builds of duplex-server and autobahn-client
# (`swift build -c release --product duplex-server --product autobahn-client`).
# CASES is a comma-separated list of Autobahn case patterns ("*" by default, every case of
# groups 1 to 13, 517 in all; a pattern's "*" matches anything, and a pattern without one names
# one case), or "ci" for the bounded set CI runs (below). "server" runs the fuzzing client against duplex-server's /echo
# (permessage-deflate on, as shipped); "client" runs the fuzzing server against the Duplex client
# (offering permessage-deflate). Each end's results are compared with expected-server.json and
# expected-client.json: any case that does worse than its expected behaviour fails the run.
#
# wstest runs under Python 2.7 (autobahntestsuite is not ported to Python 3); the virtualenv is
# made at $AUTOBAHN_VENV (default: .build-autobahn, ignored by git) from pyenv's 2.7.18 when
# missing. Reports are written to $AUTOBAHN_REPORTS (default: .build-autobahn/reports).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="${1:?usage: run.sh BIN_DIR [server|client|both] [CASES]}"
mode="${2:-both}"
cases="${3:-*}"
# "ci": every case of groups 1 to 10 (301) and cases 1 to 9 of every permessage-deflate group
# (12.1-12.5 and 13.1-13.7, 108 cases: messages up to 4 KiB); the larger compressed messages
# (cases 10 to 18 of each, 108 cases) take most of a full run's time (docs/conformance.md).
if [ "$cases" = "ci" ]; then
    cases="1.*,2.*,3.*,4.*,5.*,6.*,7.*,9.*,10.*"
    for group in 12.1 12.2 12.3 12.4 12.5 13.1 13.2 13.3 13.4 13.5 13.6 13.7; do
        for n in 1 2 3 4 5 6 7 8 9; do cases="$cases,$group.$n"; done
    done
fi
venv="${AUTOBAHN_VENV:-$root/.build-autobahn}"
reports="${AUTOBAHN_REPORTS:-$venv/reports}"

fail() { printf 'autobahn: %s\n' "$*" >&2; exit 1; }

for product in duplex-server autobahn-client; do
    [ -x "$bin_dir/$product" ] || fail "$bin_dir/$product is missing: swift build -c release --product $product"
done

if [ ! -x "$venv/bin/wstest" ]; then
    python27="${PYTHON27:-$(command -v pyenv >/dev/null && pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/2.7.18/bin/python}"
    [ -x "$python27" ] || fail "Python 2.7 is missing (looked for $python27; set PYTHON27): autobahntestsuite needs it"
    echo "autobahn: making a Python 2.7 virtualenv at $venv"
    "$python27" -m pip install --quiet --disable-pip-version-check virtualenv 2>&1 | grep -v -i deprecat || true
    "$python27" -m virtualenv --quiet "$venv" || fail "virtualenv under Python 2.7 failed"
    "$venv/bin/pip" install --quiet --disable-pip-version-check autobahntestsuite 2>&1 | grep -v -i deprecat || true
    [ -x "$venv/bin/wstest" ] || fail "autobahntestsuite did not install into $venv"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cases_json=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1].split(",")))' "$cases")
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

run_server() {
    echo "autobahn: fuzzing client against duplex-server /echo (cases: $cases)"
    "$bin_dir/duplex-server" --port 0 --log-level warning >"$work/server.out" 2>&1 &
    pids+=($!)
    local url=""
    for _ in $(seq 1 100); do
        url=$(grep -o -m1 'http://[0-9.:]*' "$work/server.out" || true)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || fail "duplex-server did not start: $(cat "$work/server.out")"
    rm -rf "$reports/servers"
    cat >"$work/fuzzingclient.json" <<JSON
{"outdir": "$reports/servers", "servers": [{"agent": "duplex-server", "url": "ws://${url#http://}/echo"}],
 "cases": $cases_json, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
    local started=$SECONDS
    (cd "$work" && "$venv/bin/wstest" -m fuzzingclient -s "$work/fuzzingclient.json" >"$work/fuzzingclient.log" 2>&1) \
        || { tail -20 "$work/fuzzingclient.log"; fail "wstest -m fuzzingclient failed"; }
    echo "autobahn: server cases took $((SECONDS - started)) s"
    python3 "$here/compare.py" "$reports/servers/index.json" duplex-server "$here/expected-server.json" "$cases"
}

run_client() {
    echo "autobahn: fuzzing server against the Duplex client (cases: $cases)"
    local port
    port=$(free_port)
    rm -rf "$reports/clients"
    cat >"$work/fuzzingserver.json" <<JSON
{"url": "ws://127.0.0.1:$port", "outdir": "$reports/clients",
 "cases": $cases_json, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
    (cd "$work" && exec "$venv/bin/wstest" -m fuzzingserver -s "$work/fuzzingserver.json" -u 0 >"$work/fuzzingserver.log" 2>&1) &
    pids+=($!)
    for _ in $(seq 1 100); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2).close()" 2>/dev/null && break
        sleep 0.2
    done
    local started=$SECONDS
    timeout 3000 "$bin_dir/autobahn-client" "ws://127.0.0.1:$port" duplex \
        || { tail -20 "$work/fuzzingserver.log"; fail "autobahn-client failed"; }
    echo "autobahn: client cases took $((SECONDS - started)) s"
    python3 "$here/compare.py" "$reports/clients/index.json" duplex "$here/expected-client.json" "$cases"
}

case "$mode" in
    server) run_server ;;
    client) run_client ;;
    both) run_server; run_client ;;
    *) fail "mode must be server, client or both, not $mode" ;;
esac
