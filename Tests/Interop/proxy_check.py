"""Proxy routes in front of a real backend, from outside (issue 62): a Python `websockets`
upstream with a subprotocol that reads the request's headers (and the same over TLS, with a
certificate made by openssl) and an aiohttp SSE upstream,
`duplex-server --script` with proxy routes in front of them, and Python `websockets` clients and
curl through them.

Checks: pass-through with headers, query and the subprotocol; a `toClient` rule with `nth: 3`
and `forward: false` holds back exactly the upstream's third message; `set` rewrites a field on
the way up; `reply` answers without reaching the upstream; `send` injects before the forwarded
message; `close` 4001 reaches the client; `drop` ends the client's connection with no close
frame and the upstream's too; an upstream's refusal (403 with a body) is relayed; a route whose
upstream is down answers 502; a wss:// upstream is trusted through the script's caFile, and an
untrusted one answers 502 saying TLS; an SSE `toClient` rule holds back the second event, and
`Last-Event-ID` reaches the upstream (curl -N); `GET /_journal` holds both legs; a bad upstream
URL exits 64.

Usage: python3 proxy_check.py PATH/TO/duplex-server
"""
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

import websockets
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

server_bin = sys.argv[1]
seen = {"requests": [], "messages": [], "closes": [], "last_event_ids": []}


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def refuse_some(connection, request):
    """The upstream refuses a request whose Authorization is `Bearer no` with 403 and a body."""
    if request.headers.get("Authorization") == "Bearer no":
        return Response(403, "Forbidden", Headers([("Content-Type", "application/json")]), b'{"error":"not you"}')
    return None


async def backend(connection):
    """Sends {"n":1} … {"n":5}, then answers each message with `got:` and the message."""
    seen["requests"].append({"path": connection.request.path, "headers": dict(connection.request.headers.raw_items()),
                             "subprotocol": connection.subprotocol})
    for n in range(1, 6):
        await connection.send(json.dumps({"n": n}, separators=(",", ":")))
    try:
        async for message in connection:
            seen["messages"].append(message)
            await connection.send("got:" + message)
    except websockets.ConnectionClosed:
        pass
    seen["closes"].append((connection.request.path, connection.close_code))


async def sse_events(request):
    """Four events with ids 1 to 4, then the end; notes the request's Last-Event-ID."""
    seen["last_event_ids"].append(request.headers.get("Last-Event-ID"))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for n in range(1, 5):
        await response.write(f'id: {n}\nevent: tick\ndata: {{"n":{n}}}\n\n'.encode())
    await response.write_eof()
    return response


def start_duplex(script):
    path = os.path.join(tempfile.mkdtemp(), "proxy.json")
    with open(path, "w") as file:
        json.dump(script, file)
    process = subprocess.Popen([server_bin, "--port", "0", "--log-level", "warning", "--script", path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.match(r"duplex-server listening on http://127\.0\.0\.1:(\d+)", line)
    if not match:
        process.kill()
        fail(f"duplex-server did not listen: {line!r} {process.stderr.read()}")
    return process, int(match.group(1))


async def texts(connection, count):
    return [await asyncio.wait_for(connection.recv(), 10) for _ in range(count)]


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1, made by openssl: the TLS upstream's, and its CA."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


async def main():
    import ssl
    certs = tempfile.mkdtemp()
    cert, key = make_certificate(certs)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    async with serve(backend, "127.0.0.1", 0, subprotocols=["feed.v1"], process_request=refuse_some) as upstream, \
            serve(backend, "127.0.0.1", 0, subprotocols=["feed.v1"], ssl=tls) as secure:
        secure_port = secure.sockets[0].getsockname()[1]
        up_port = upstream.sockets[0].getsockname()[1]
        # A port nothing listens on: bound, never listening.
        import socket
        down = socket.socket()
        down.bind(("127.0.0.1", 0))
        down_port = down.getsockname()[1]
        feed = f"ws://127.0.0.1:{up_port}/feed"
        app = web.Application()
        app.router.add_get("/events", sse_events)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        sse_port = site._server.sockets[0].getsockname()[1]
        script = {"routes": [
            {"path": "/plain", "proxy": {"upstream": feed}},
            {"path": "/rules", "proxy": {
                "upstream": feed,
                "toClient": [{"match": {"nth": 3}, "do": [{"forward": False}]}],
                "toUpstream": [
                    {"match": {"json": {"type": "order"}}, "do": [{"set": {"price": 0}}]},
                    {"match": {"text": "ping"}, "do": [{"reply": "pong"}, {"forward": False}]},
                    {"match": {"text": "hi"}, "do": [{"send": "injected"}]},
                    {"match": {"text": "quit"}, "do": [{"close": 4001, "reason": "bye"}]},
                    {"match": {"text": "vanish"}, "do": [{"drop": True}]},
                ]}},
            {"path": "/down", "proxy": {"upstream": f"ws://127.0.0.1:{down_port}/feed"}},
            {"path": "/secure", "proxy": {"upstream": f"wss://127.0.0.1:{secure_port}/feed", "caFile": cert}},
            {"path": "/untrusted", "proxy": {"upstream": f"wss://127.0.0.1:{secure_port}/feed"}},
            {"path": "/sse", "proxy": {"upstream": f"http://127.0.0.1:{sse_port}/events",
                                       "toClient": [{"match": {"nth": 2}, "do": [{"forward": False}]}]}},
        ]}
        process, port = start_duplex(script)
        try:
            await checks(port)
        finally:
            process.terminate()
            process.wait(10)
            await runner.cleanup()
        down.close()

    # A bad upstream URL: exit 64 with the place in the script.
    path = os.path.join(tempfile.mkdtemp(), "bad.json")
    with open(path, "w") as file:
        json.dump({"routes": [{"path": "/p", "proxy": {"upstream": "ftp://127.0.0.1:1/x"}}]}, file)
    bad = subprocess.run([server_bin, "--port", "0", "--script", path], capture_output=True, text=True, timeout=30)
    if bad.returncode != 64 or "routes[0].proxy.upstream" not in bad.stderr:
        fail(f"a bad upstream URL: exit {bad.returncode}, {bad.stderr!r}")
    print("proxy: a bad upstream URL exits 64 with routes[0].proxy.upstream")


async def checks(port):
    base = f"ws://127.0.0.1:{port}"
    # Pass-through: the subprotocol the upstream chose, headers and query forwarded.
    async with connect(f"{base}/plain?token=7", subprotocols=["other", "feed.v1"],
                       additional_headers={"Authorization": "Bearer yes"}, origin="http://app.test") as client:
        if client.subprotocol != "feed.v1":
            fail(f"subprotocol through the proxy: {client.subprotocol}")
        got = await texts(client, 5)
        if got != [f'{{"n":{n}}}' for n in range(1, 6)]:
            fail(f"pass-through: {got}")
        await client.send("hello")
        if await texts(client, 1) != ["got:hello"]:
            fail("pass-through: no echo")
    request = seen["requests"][-1]
    headers = {name.lower(): value for name, value in request["headers"].items()}
    if request["path"] != "/feed?token=7" or headers.get("authorization") != "Bearer yes" or headers.get("origin") != "http://app.test":
        fail(f"the upstream's request: {request}")
    print("proxy: pass-through with the subprotocol, Authorization, Origin and the query")

    # Rules.
    async with connect(f"{base}/rules", subprotocols=["feed.v1"]) as client:
        got = await texts(client, 4)
        if got != ['{"n":1}', '{"n":2}', '{"n":4}', '{"n":5}']:
            fail(f"nth 3 held back: {got}")
        await client.send('{"type":"order","price":5}')
        if await texts(client, 1) != ['got:{"price":0,"type":"order"}']:
            fail("set on the way up")
        await client.send("ping")
        if await texts(client, 1) != ["pong"]:
            fail("reply")
        await client.send("hi")
        got = await texts(client, 2)
        if got != ["got:injected", "got:hi"]:
            fail(f"send before the forwarded message: {got}")
        if "ping" in seen["messages"]:
            fail("the upstream saw a message a rule replied to")
        await client.send("quit")
        try:
            await asyncio.wait_for(client.recv(), 10)
            fail("no close after quit")
        except websockets.ConnectionClosed as closed:
            if closed.rcvd is None or closed.rcvd.code != 4001 or closed.rcvd.reason != "bye":
                fail(f"close 4001: {closed.rcvd}")
    print("proxy: nth 3 held back, set, reply, send, close 4001")

    async with connect(f"{base}/rules?c=drop", subprotocols=["feed.v1"]) as client:
        await texts(client, 4)
        await client.send("vanish")
        try:
            await asyncio.wait_for(client.recv(), 10)
            fail("no end after vanish")
        except websockets.ConnectionClosed as closed:
            if closed.rcvd is not None:
                fail(f"drop sent a close frame: {closed.rcvd}")
    # The connection's own end (another's close can come meanwhile).
    for _ in range(100):
        dropped = [code for path, code in seen["closes"] if path.endswith("?c=drop")]
        if dropped:
            break
        await asyncio.sleep(0.05)
    else:
        fail("the upstream's connection outlived a drop")
    if dropped != [1006]:
        fail(f"the upstream got a close frame on a drop: {dropped}")
    print("proxy: drop ends the client's connection and the upstream's, both with no close frame")

    # Refusals.
    try:
        async with connect(f"{base}/plain", subprotocols=["feed.v1"], additional_headers={"Authorization": "Bearer no"}):
            fail("a refused upgrade opened")
    except websockets.InvalidStatus as refused:
        if refused.response.status_code != 403 or refused.response.body != b'{"error":"not you"}':
            fail(f"the upstream's refusal: {refused.response.status_code} {refused.response.body!r}")
    try:
        async with connect(f"{base}/down"):
            fail("a proxy to a down upstream opened")
    except websockets.InvalidStatus as refused:
        if refused.response.status_code != 502 or b"refused" not in refused.response.body:
            fail(f"a down upstream: {refused.response.status_code} {refused.response.body!r}")
    print("proxy: the upstream's 403 relayed with its body; a down upstream answers 502")

    # A TLS upstream, trusted through the CA file of the script; untrusted without it: 502.
    async with connect(f"{base}/secure", subprotocols=["feed.v1"]) as client:
        if await texts(client, 1) != ['{"n":1}'] or client.subprotocol != "feed.v1":
            fail("through the proxy to a wss:// upstream")
    try:
        async with connect(f"{base}/untrusted", subprotocols=["feed.v1"]):
            fail("a proxy to an untrusted wss:// upstream opened")
    except websockets.InvalidStatus as refused:
        if refused.response.status_code != 502 or b"TLS" not in refused.response.body:
            fail(f"an untrusted upstream: {refused.response.status_code} {refused.response.body!r}")
    print("proxy: a wss:// upstream trusted through caFile; an untrusted one answers 502 saying TLS")

    # SSE: curl -N through the proxy; the second event held back, Last-Event-ID passed on.
    curl = await asyncio.create_subprocess_exec(
        "curl", "-sN", "--max-time", "10", "-H", "Last-Event-ID: 7", f"http://127.0.0.1:{port}/sse",
        stdout=asyncio.subprocess.PIPE)
    out, _ = await curl.communicate()
    ids = re.findall(r"^id: ?(\S+)$", out.decode(), re.M)
    if ids != ["1", "3", "4"] or "event: tick" not in out.decode():
        fail(f"SSE through the proxy: ids {ids} in {out.decode()!r}")
    if seen["last_event_ids"][-1:] != ["7"]:
        fail(f"Last-Event-ID did not reach the upstream: {seen['last_event_ids']}")
    print("proxy: SSE through curl -N, the second event held back, Last-Event-ID passed on")

    # The journal: both legs.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_journal", timeout=10) as response:
        journal = json.load(response)
    legs = {(entry.get("leg"), entry["direction"], entry.get("data")) for entry in journal if entry["kind"] == "text"}
    for wanted in [("client", "in", "hello"), ("upstream", "out", "hello"), ("upstream", "in", "got:hello"), ("client", "out", "got:hello")]:
        if wanted not in legs:
            fail(f"the journal lacks {wanted}")
    held = [entry for entry in journal if entry.get("leg") == "upstream" and entry.get("data") == '{"n":3}' and entry["path"] == "/rules"]
    if not held or "hold back" not in held[0].get("action", ""):
        fail(f"the journal does not say the third message was held back: {held}")
    print("proxy: GET /_journal holds both legs, with what the rules did")


asyncio.run(main())
