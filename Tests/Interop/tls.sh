#!/usr/bin/env bash
# The TLS testbed and the client's proxies against third-party peers: curl and Python's ssl and websockets against the
# --tls-self-signed listener (over HTTP/1.1 and HTTP/2: curl --http2 for SSE, Python's h2 for WebSockets through extended
# CONNECT) and
# --tls-self-signed listener and every --tls-faults listener (each fault must fail for them with
# its verification error, and succeed where it should), and the duplex CLI against the same
# (exit status 5 and the fault's cause; a client certificate through client-certificate-required).
# Usage: Tests/Interop/tls.sh PATH/TO/BIN-DIR (holding duplex-server and duplex)
set -euo pipefail
bin=${1:?usage: tls.sh PATH/TO/BIN-DIR}
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin/duplex-server" --port 0 --log-level warning --tls-self-signed --tls-faults --tls-directory "$work/tls" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 100); do
    grep -q "listening on" "$work/out" && break
    kill -0 "$pid" 2>/dev/null || fail "duplex-server exited: $(cat "$work/err")"
    sleep 0.1
done
line=$(head -n 1 "$work/out")
[[ "$line" =~ ^duplex-server\ listening\ on\ https://127\.0\.0\.1:([0-9]+)\ \(CA:\ (.+)\)$ ]] || fail "listening line: '$line'"
port=${BASH_REMATCH[1]}
ca=${BASH_REMATCH[2]}
[ -s "$ca" ] && [ -s "$work/tls/client.pem" ] && [ -s "$work/tls/client-key.pem" ] || fail "the CA or the client certificate was not written"
echo "TLS listener on $port, CA $ca"

# The main listener: curl, Python websockets and the CLI, trusting the CA.
[ "$(curl -sS --cacert "$ca" "https://127.0.0.1:$port/health" | head -c 15)" = '{"status":"ok",' ] || fail "curl https /health"
[ "$(curl -sS --http1.1 --cacert "$ca" -N --max-time 5 "https://localhost:$port/events?interval=50" 2>/dev/null | grep -m1 '^event: ')" = "event: tick" ] || fail "curl https SSE"
# GET /metrics over TLS: the HTTP/1.1 SSE stream above counted under transport="tls".
# (Read whole first: grep -q stops reading at its match, and under pipefail curl's failed write
# would fail the check.)
metrics=$(curl -sS --cacert "$ca" "https://127.0.0.1:$port/metrics")
grep -qE '^duplex_connections_total\{route="events",transport="tls"\} [1-9]' <<<"$metrics" \
    || fail "GET /metrics over https: no events connection counted under transport=\"tls\""
[ "$("$bin/duplex" echo "wss://127.0.0.1:$port/echo" --ca "$ca" hi)" = "hi" ] || fail "duplex echo over wss"
curl -sS --cacert "$ca" "https://127.0.0.1:$port/tls-faults" >"$work/faults.json"

# HTTP/2 (ALPN h2): curl streams SSE over it, ten SSE streams share one connection, and Python's
# h2 runs WebSockets through extended CONNECT (RFC 8441); the server's counters agree.
[ "$(curl -sS --http2 --cacert "$ca" -o /dev/null -w '%{http_version}' "https://127.0.0.1:$port/health")" = "2" ] || fail "curl --http2 /health did not use HTTP/2"
curl -sS --http2 --cacert "$ca" -N --max-time 2 "https://127.0.0.1:$port/events?interval=50" -D "$work/h2.headers" >"$work/h2.sse" 2>/dev/null || true
head -n 1 "$work/h2.headers" | grep -q "^HTTP/2 200" || fail "SSE over h2: $(head -n 1 "$work/h2.headers")"
[ "$(grep -c '^event: tick' "$work/h2.sse")" -ge 5 ] || fail "SSE over h2: $(grep -c '^event: tick' "$work/h2.sse") ticks in 2 s at 50 ms"
for n in $(seq 1 10); do echo "url = \"https://127.0.0.1:$port/events?interval=100&n=$n\""; done >"$work/many.cfg"
curl -sS --http2 --cacert "$ca" -N --max-time 2 --parallel --parallel-max 10 -K "$work/many.cfg" -w 'connects=%{num_connects}\n' >"$work/many.out" 2>/dev/null || true
[ "$(grep -c '^event: tick' "$work/many.out")" -ge 50 ] || fail "ten SSE streams over h2: $(grep -c '^event: tick' "$work/many.out") ticks"
connects=$(awk -F= '/^connects=/ { sum += $2 } END { print sum }' "$work/many.out")
[ "$connects" = 1 ] || fail "ten SSE streams over h2 took $connects connections, not 1"
timeout 30 python3 "$(dirname "$0")/h2_websocket.py" "$port" "$ca"
[ "$("$bin/duplex" echo "wss://127.0.0.1:$port/echo" --ca "$ca" --http 2 over-h2)" = "over-h2" ] || fail "duplex echo --http 2"
metrics=$(curl -sS --http2 --cacert "$ca" "https://127.0.0.1:$port/metrics")
grep -qE '^duplex_http2_streams_total\{kind="websocket"\} ([4-9]|[1-9][0-9])' <<<"$metrics" || fail "GET /metrics: WebSocket streams over h2 not counted: $(grep http2 <<<"$metrics")"
grep -qE '^duplex_http2_streams_total\{kind="refused"\} [2-9]' <<<"$metrics" || fail "GET /metrics: refused h2 streams not counted"
grep -qE '^duplex_connections_total\{route="echo",transport="h2"\} [3-9]' <<<"$metrics" || fail "GET /metrics: WebSockets over h2 not counted under transport=\"h2\""
grep -qE '^duplex_connections_total\{route="events",transport="h2"\} ([1-9][0-9])' <<<"$metrics" || fail "GET /metrics: SSE streams over h2 not counted under transport=\"h2\""
echo "http/2: curl SSE (one stream, and ten on one connection), Python h2 and duplex --http 2 WebSockets through extended CONNECT, counted in /metrics"

# The duplex client against an independent HTTP/2 server: Hypercorn (PyPI), which speaks
# WebSockets over HTTP/2 too, with a certificate openssl makes. Its echo answers "version" with
# the HTTP version the socket runs over.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/hc-ca.key" -out "$work/hc-ca.pem" -days 1 -subj "/CN=duplex hypercorn test CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/hc-key.pem" -out "$work/hc.csr" -subj "/CN=127.0.0.1" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$work/hc-ext.cnf"
openssl x509 -req -in "$work/hc.csr" -CA "$work/hc-ca.pem" -CAkey "$work/hc-ca.key" -CAcreateserial -out "$work/hc-cert.pem" -days 1 -extfile "$work/hc-ext.cnf" 2>/dev/null
hc_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$(dirname "$0")" && exec hypercorn --certfile "$work/hc-cert.pem" --keyfile "$work/hc-key.pem" --bind "127.0.0.1:$hc_port" hypercorn_app:app) >"$work/hypercorn.log" 2>&1 &
hypercorn_pid=$!
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$hc_port") 2>/dev/null && break; sleep 0.1; done
for version in 2 auto 1.1; do
    expected=$([ "$version" = 1.1 ] && echo 1.1 || echo 2)
    answer=$(echo version | timeout 20 "$bin/duplex" ws "wss://127.0.0.1:$hc_port/echo" --ca "$work/hc-ca.pem" --http "$version" --linger 0.2 2>"$work/hc-client.err") \
        || fail "duplex ws --http $version against Hypercorn: $(cat "$work/hc-client.err") $(tail -5 "$work/hypercorn.log")"
    [ "$answer" = "$expected" ] || fail "duplex ws --http $version against Hypercorn ran over HTTP/$answer, not $expected"
done
# SSE: the event data is the HTTP version of the request; duplex listen uses HTTP/2 by default.
[ "$(timeout 20 "$bin/duplex" listen "https://127.0.0.1:$hc_port/events" --ca "$work/hc-ca.pem" --max-events 1)" = "tick 1 2" ] \
    || fail "duplex listen against Hypercorn did not run over HTTP/2"
# A streaming API over HTTP/2 and TLS: a POST with a JSON body, events until [DONE] (curl -N is
# the reference for what duplex prints), and a 429 that exits 6 with the body on stderr.
for version in 2 1.1; do
    timeout 20 "$bin/duplex" listen --http "$version" --ca "$work/hc-ca.pem" -X POST -H 'Content-Type: application/json' -d '{"prompt":"hi there"}' \
        --until '[DONE]' --json "https://127.0.0.1:$hc_port/v1/completions" >"$work/hc-post" 2>"$work/hc-post.err" \
        || fail "duplex listen --http $version -X POST against Hypercorn exited $?: $(cat "$work/hc-post.err")"
    curl -sSN --http"$version" --cacert "$work/hc-ca.pem" -X POST -H 'Content-Type: application/json' -d '{"prompt":"hi there"}' \
        "https://127.0.0.1:$hc_port/v1/completions" >"$work/hc-post.curl" || fail "curl --http$version -X POST against Hypercorn failed"
    python3 - "$work/hc-post" "$work/hc-post.curl" "$version" <<'PY' || fail "duplex listen --http $version -X POST printed: $(cat "$work/hc-post")"
import json, sys
printed = [json.loads(line)["data"] for line in open(sys.argv[1])]
sent = [line[len("data: "):] for line in open(sys.argv[2]).read().splitlines() if line.startswith("data: ")]
assert printed == sent, (printed, sent)
assert [json.loads(d)["text"] for d in printed[:-1]] == ["hi", "there", "HTTP/" + sys.argv[3]] and printed[-1] == "[DONE]", printed
PY
done
set +e
timeout 20 "$bin/duplex" listen --ca "$work/hc-ca.pem" -X POST -H 'Content-Type: application/json' -d '{"prompt":"busy"}' \
    "https://127.0.0.1:$hc_port/v1/completions" >/dev/null 2>"$work/hc-busy.err"
status=$?
set -e
[ "$status" -eq 6 ] || fail "duplex listen against a 429 exited $status, not 6: $(cat "$work/hc-busy.err")"
grep -q 'HTTP 429 (Retry-After: 1)' "$work/hc-busy.err" && grep -q rate_limit_error "$work/hc-busy.err" \
    || fail "duplex listen did not print the 429's body: $(cat "$work/hc-busy.err")"
kill -KILL $hypercorn_pid 2>/dev/null || true
wait $hypercorn_pid 2>/dev/null || true
echo "hypercorn: duplex --http 2 and auto ran WebSockets over HTTP/2 (RFC 8441), --http 1.1 over HTTP/1.1; duplex listen ran SSE over HTTP/2, and a POST stream to [DONE] over HTTP/2 and 1.1 as curl sees it, a 429 with its body"

# Public-key pinning: a wrong pin exits 5 naming the server's key; that key, as curl checks it
# too, connects.
wrong="sha256//$(printf 'x%.0s' $(seq 1 32) | openssl dgst -sha256 -binary | base64)"
set +e
"$bin/duplex" echo "wss://127.0.0.1:$port/echo" --ca "$ca" --pinnedpubkey "$wrong" hi >/dev/null 2>"$work/pin.err"
pin_status=$?
set -e
[ "$pin_status" = 5 ] && grep -q "pin mismatch" "$work/pin.err" || fail "a wrong pin: exit $pin_status, $(cat "$work/pin.err")"
actual=$(grep -o 'sha256//[A-Za-z0-9+/=]*' "$work/pin.err" | head -1)
curl -sS --cacert "$ca" --pinnedpubkey "$actual" "https://127.0.0.1:$port/health" >/dev/null || fail "curl refused the pin duplex reported ($actual)"
[ "$("$bin/duplex" echo "wss://127.0.0.1:$port/echo" --ca "$ca" --pinnedpubkey "$wrong;$actual" hi)" = "hi" ] || fail "duplex with the right pin"
set +e
"$bin/duplex" listen "https://127.0.0.1:$port/events?interval=50" --ca "$ca" --pinnedpubkey "$wrong" --max-events 1 >/dev/null 2>"$work/pin.err"
pin_status=$?
set -e
[ "$pin_status" = 5 ] && grep -q "pin mismatch" "$work/pin.err" || fail "a wrong pin over SSE: exit $pin_status, $(cat "$work/pin.err")"
[ "$("$bin/duplex" listen "https://127.0.0.1:$port/events?interval=50" --ca "$ca" --pinnedpubkey "$actual" --max-events 1 | cut -d' ' -f1)" = "tick" ] || fail "duplex listen with the right pin"
echo "pinning: $actual (curl agrees)"

python3 - "$ca" "$port" "$work/faults.json" "$work/tls" <<'PY' || fail "Python ssl/websockets against the TLS listeners (above)"
import asyncio, json, socket, ssl, sys
from urllib.parse import urlparse
import websockets
ca, port, faults_file, tls_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
faults = json.load(open(faults_file))
def context(client_cert=False):
    ctx = ssl.create_default_context(cafile=ca)
    if client_cert:
        ctx.load_cert_chain(f"{tls_dir}/client.pem", f"{tls_dir}/client-key.pem")
    return ctx
async def echo(url, ctx):
    async with websockets.connect(url, ssl=ctx, open_timeout=10) as ws:
        await ws.send("over tls")
        return await asyncio.wait_for(ws.recv(), 10)
async def main():
    assert await echo(f"wss://127.0.0.1:{port}/echo", context()) == "over tls"
    # OpenSSL's verification message for each fault, as Python reports it.
    expected = {
        "expired": "certificate has expired",
        "not-yet-valid": "certificate is not yet valid",
        "wrong-host": "IP address mismatch",
        "self-signed": "self-signed certificate",
        "untrusted-root": "self-signed certificate in certificate chain",
        "incomplete-chain": "unable to get local issuer certificate",
        "weak-key": "key too weak",
    }
    for fault, words in expected.items():
        url = faults[fault].replace("https://", "wss://") + "/echo"
        try:
            await echo(url, context())
        except Exception as error:  # ssl.SSLCertVerificationError, ssl.SSLError, or websockets' wrapper
            text = f"{error!r} {getattr(error, 'verify_message', '')}"
            assert words.lower() in text.lower(), f"{fault}: {text}"
            print(f"python {fault}: refused ({words})")
        else:
            raise AssertionError(f"{fault}: Python connected")
    assert await echo(faults["tls12-only"].replace("https://", "wss://") + "/echo", context()) == "over tls"
    strict = context()
    strict.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        await echo(faults["tls12-only"].replace("https://", "wss://") + "/echo", strict)
        raise AssertionError("tls12-only: a TLS 1.3-only client connected")
    except ssl.SSLError as error:
        print(f"python tls12-only with TLS 1.3 required: refused ({error.reason})")
    # TLS 1.3 sends certificate_required after the handshake, which asyncio reports as an EOF:
    # read it with a plain ssl socket, where the alert is raised.
    target = urlparse(faults["client-certificate-required"])
    with socket.create_connection((target.hostname, target.port), timeout=10) as raw:
        with context().wrap_socket(raw, server_hostname=target.hostname) as tls:
            try:
                tls.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                tls.recv(100)
                raise AssertionError("client-certificate-required: served without a client certificate")
            except ssl.SSLError as error:
                assert "CERTIFICATE_REQUIRED" in str(error), f"client-certificate-required: {error!r}"
                print(f"python client-certificate-required: refused ({error.reason})")
    assert await echo(faults["client-certificate-required"].replace("https://", "wss://") + "/echo", context(client_cert=True)) == "over tls"
    print("python: every listener as expected")
asyncio.run(main())
PY

# curl and the duplex CLI (WebSocket and SSE) against every fault.
check() {  # fault, curl's exit status, words in curl's error, words in duplex's error
    local url
    url=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/faults.json" "$1")
    set +e
    curl -sS --max-time 10 --cacert "$ca" "$url/health" >"$work/curl.out" 2>"$work/curl.err"
    local curl_status=$?
    "$bin/duplex" echo "${url/https:/wss:}/echo" --ca "$ca" hi >"$work/duplex.out" 2>"$work/duplex.err"
    local duplex_status=$?
    "$bin/duplex" listen "$url/events?interval=50" --ca "$ca" --max-events 1 >"$work/listen.out" 2>"$work/listen.err"
    local listen_status=$?
    set -e
    [ "$curl_status" = "$2" ] || fail "$1: curl exited $curl_status, not $2: $(cat "$work/curl.err")"
    grep -qi "$3" "$work/curl.err" || fail "$1: curl said '$(cat "$work/curl.err")', not '$3'"
    [ "$duplex_status" = 5 ] || fail "$1: duplex exited $duplex_status, not 5: $(cat "$work/duplex.err")"
    grep -q "$4" "$work/duplex.err" || fail "$1: duplex said '$(cat "$work/duplex.err")', not '$4'"
    [ "$listen_status" = 5 ] || fail "$1: duplex listen exited $listen_status, not 5: $(cat "$work/listen.err")"
    grep -q "$4" "$work/listen.err" || fail "$1: duplex listen said '$(cat "$work/listen.err")', not '$4'"
    echo "$1: curl ($2, $3) and duplex echo and listen (5, $4)"
}
check expired 60 "certificate has expired" "certificate expired"
check not-yet-valid 60 "not yet valid" "certificate not yet valid"
check wrong-host 60 "no alternative certificate subject name matches" "host-name mismatch"
check self-signed 60 "self-signed certificate" "self-signed certificate"
check untrusted-root 60 "self-signed certificate in certificate chain" "unknown CA"
check incomplete-chain 60 "unable to get local issuer certificate" "unknown CA"
check client-certificate-required 56 "certificate required" "certificate required"
check weak-key 60 "key too weak" "weak key: the server's certificate has a 1024-bit RSA key"
tls12=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tls12-only'])" "$work/faults.json")
[ "$("$bin/duplex" echo "${tls12/https:/wss:}/echo" --ca "$ca" hi)" = "hi" ] || fail "duplex through tls12-only"
mutual=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['client-certificate-required'])" "$work/faults.json")
[ "$("$bin/duplex" echo "${mutual/https:/wss:}/echo" --ca "$ca" --cert "$work/tls/client.pem" --key "$work/tls/client-key.pem" hi)" = "hi" ] \
    || fail "duplex with a client certificate through client-certificate-required"
[ "$(curl -sS --cacert "$ca" --cert "$work/tls/client.pem" --key "$work/tls/client-key.pem" "$mutual/health" | head -c 15)" = '{"status":"ok",' ] \
    || fail "curl with a client certificate through client-certificate-required"
listened=$("$bin/duplex" listen "$mutual/events?interval=50" --ca "$ca" --cert "$work/tls/client.pem" --key "$work/tls/client-key.pem" --max-events 1)
grep -q '^tick ' <<<"$listened" || fail "duplex listen with a client certificate"

# Through real proxies: tinyproxy (CONNECT, with a password) and dante (SOCKS5), named by
# --proxy or by the environment as curl reads it; a refusal exits 9.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tp_port=$(free_port)
printf 'Port %s\nListen 127.0.0.1\nTimeout 30\nAllow 127.0.0.1\nLogLevel Connect\nBasicAuth alice s3cret\n' "$tp_port" >"$work/tinyproxy.conf"
tinyproxy -d -c "$work/tinyproxy.conf" >"$work/tinyproxy.log" 2>&1 &
tinyproxy_pid=$!
socks_port=$(free_port)
{
    printf 'logoutput: stderr\ninternal: 127.0.0.1 port = %s\nexternal: 127.0.0.1\nsocksmethod: none\nclientmethod: none\n' "$socks_port"
    [ "$(id -u)" = 0 ] && printf 'user.privileged: root\nuser.unprivileged: nobody\n'
    printf 'client pass { from: 127.0.0.1/32 to: 0.0.0.0/0 log: connect }\nsocks pass { from: 127.0.0.1/32 to: 0.0.0.0/0 log: connect }\n'
} >"$work/dante.conf"
danted -f "$work/dante.conf" -N 1 >"$work/dante.log" 2>&1 &
dante_pid=$!
trap 'kill -KILL $tinyproxy_pid $dante_pid 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$tp_port") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$socks_port") 2>/dev/null && break
    sleep 0.1
done
[ "$("$bin/duplex" echo "wss://127.0.0.1:$port/echo" --ca "$ca" --proxy "http://alice:s3cret@127.0.0.1:$tp_port" via-http)" = "via-http" ] || fail "duplex through tinyproxy: $(cat "$work/tinyproxy.log")"
grep -q "Established connection to host \"127.0.0.1\"" "$work/tinyproxy.log" || fail "tinyproxy did not log the tunnel"
[ "$(HTTPS_PROXY="socks5://127.0.0.1:$socks_port" "$bin/duplex" echo "wss://localhost:$port/echo" --ca "$ca" via-socks)" = "via-socks" ] || fail "duplex through dante (HTTPS_PROXY): $(cat "$work/dante.log")"
grep -q "$port" "$work/dante.log" || fail "dante did not log the tunnel: $(cat "$work/dante.log")"
[ "$(HTTPS_PROXY="socks5://127.0.0.1:$socks_port" NO_PROXY=localhost "$bin/duplex" listen "https://localhost:$port/events?interval=50" --ca "$ca" --max-events 1 | cut -d' ' -f1)" = "tick" ] || fail "duplex listen with NO_PROXY"
set +e
"$bin/duplex" echo "ws://127.0.0.1:1/echo" --proxy "http://127.0.0.1:$tp_port" hi >/dev/null 2>"$work/proxy.err"
proxy_status=$?
set -e
[ "$proxy_status" = 9 ] && grep -q "407" "$work/proxy.err" || fail "a proxy asking for a password: exit $proxy_status, $(cat "$work/proxy.err")"
echo "proxies: tinyproxy (CONNECT, password), dante (SOCKS5 from HTTPS_PROXY), NO_PROXY, and 407 exits 9"
kill -KILL $tinyproxy_pid $dante_pid 2>/dev/null || true
wait $tinyproxy_pid $dante_pid 2>/dev/null || true

kill -TERM "$pid"
for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid" && status=0 || status=$?
pid=""
[ "$status" -eq 0 ] || fail "duplex-server exited $status after SIGTERM"
echo "tls interop: all checks passed"
