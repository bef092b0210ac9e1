"""Interop checks of duplex-server against Python's `websockets` package, a third-party
RFC 6455 client. Usage: websockets_client.py PORT CHECK, where CHECK is one of the functions
below. Exits non-zero, with a message, when a check fails; every wait has a timeout."""
import asyncio
import json
import os
import sys
import time
import urllib.request

import websockets
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory, PerMessageDeflate
from websockets.frames import Opcode

TIMEOUT = 10


async def recv_json(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))


async def recv_until(ws, frame_type):
    while True:
        frame = await recv_json(ws)
        if frame["type"] == frame_type:
            return frame


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAIL: {message}")


async def echo(port):
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo") as ws:
        for text in ["hello", "é ✓ 😀", "x" * 4000]:
            await ws.send(text)
            reply = await asyncio.wait_for(ws.recv(), TIMEOUT)
            check(reply == text and isinstance(reply, str), f"text echo of {len(text)} chars")
        data = bytes(range(256)) * 10
        await ws.send(data)
        reply = await asyncio.wait_for(ws.recv(), TIMEOUT)
        check(reply == data and isinstance(reply, bytes), "binary echo")
        pong = await ws.ping(b"interop")
        await asyncio.wait_for(pong, TIMEOUT)
    print("echo: ok (text, binary, 4000-char text, ping)")


async def chat(port):
    base = f"ws://127.0.0.1:{port}/chat/interop"
    async with websockets.connect(f"{base}?name=alice") as alice:
        welcome = await recv_json(alice)
        check(welcome["type"] == "welcome" and welcome["v"] == 1, f"alice welcome: {welcome}")
        async with websockets.connect(f"{base}?name=bob") as bob:
            bob_welcome = await recv_json(bob)
            check(bob_welcome["members"] == ["alice", "bob"], f"bob welcome members: {bob_welcome}")
            joined = await recv_until(alice, "joined")
            while joined["name"] != "bob":
                joined = await recv_until(alice, "joined")
            await alice.send(json.dumps({"type": "say", "v": 1, "clientMessageId": "p-1", "text": "hi bob"}))
            own = await recv_until(alice, "message")
            ack = await recv_json(alice)
            check(ack == {"type": "ack", "v": 1, "clientMessageId": "p-1", "seq": own["seq"], "duplicate": False}, f"ack: {ack}")
            seen = await recv_until(bob, "message")
            check(seen["text"] == "hi bob" and seen["from"] == "alice" and seen["seq"] == own["seq"], f"bob got: {seen}")
            await bob.send("{broken")
            error = await recv_json(bob)
            check(error["type"] == "error" and error["code"] == "bad_json", f"error frame: {error}")
        left = await recv_until(alice, "left")
        check(left["name"] == "bob", f"left: {left}")
        # resume: a new member with since gets exactly the events after it
        async with websockets.connect(f"{base}?name=carol&since={own['seq'] - 1}") as carol:
            await recv_json(carol)  # welcome
            first = await recv_json(carol)
            check(first["type"] == "message" and first["seq"] == own["seq"], f"resume starts at the message: {first}")
            second = await recv_json(carol)
            check(second["seq"] == own["seq"] + 1 and second["type"] == "left", f"then bob's leave: {second}")
    print("chat: ok (welcome, presence, message, ack, error frame, since resume)")


async def oversize(port):
    """The server runs with --max-message-bytes 4096."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo", max_size=None) as ws:
        await ws.send("y" * 5000)
        try:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
            raise SystemExit("FAIL: an oversized message was echoed")
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 1009, f"close code {closed.rcvd}")
    print("oversize: ok (close 1009)")


class RecordingDeflate(PerMessageDeflate):
    """Records, for every data frame received, whether it came compressed (RSV1)."""
    compressed = []

    def decode(self, frame, *, max_size=None):
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            RecordingDeflate.compressed.append(frame.rsv1)
        return super().decode(frame, max_size=max_size)


class RecordingDeflateFactory(ClientPerMessageDeflateFactory):
    def process_response_params(self, params, accepted_extensions):
        extension = super().process_response_params(params, accepted_extensions)
        extension.__class__ = RecordingDeflate
        return extension


async def negotiation(port):
    """Subprotocols on /echo and /chat; permessage-deflate both ways; a zip bomb gets 1009.
    The server runs with --max-message-bytes 4096."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo", subprotocols=["b", "a"],
                                  extensions=[RecordingDeflateFactory(client_max_window_bits=True)]) as ws:
        check(ws.subprotocol == "b", f"/echo selects the first offered: {ws.subprotocol}")
        check(any(isinstance(e, PerMessageDeflate) for e in ws.protocol.extensions), "permessage-deflate negotiated")
        text = "compress me " * 300
        await ws.send(text)
        reply = await asyncio.wait_for(ws.recv(), TIMEOUT)
        check(reply == text, "a compressed echo comes back intact")
        await ws.send("short")
        check(await asyncio.wait_for(ws.recv(), TIMEOUT) == "short", "a short echo")
        check(RecordingDeflate.compressed == [True, False], f"the server compressed the long reply only: {RecordingDeflate.compressed}")
    async with websockets.connect(f"ws://127.0.0.1:{port}/chat/negotiation?name=p", subprotocols=["duplex.chat.v1"]) as ws:
        check(ws.subprotocol == "duplex.chat.v1", f"/chat answers duplex.chat.v1: {ws.subprotocol}")
        check((await recv_json(ws))["type"] == "welcome", "welcome over the subprotocol")
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo", max_size=None) as ws:
        await ws.send("\0" * 1_000_000)  # about 1 KB on the wire, 1 MB inflated: past 4096
        try:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
            raise SystemExit("FAIL: a zip bomb was echoed")
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 1009, f"zip bomb close code {closed.rcvd}")
    print("negotiation: ok (subprotocols on /echo and /chat, permessage-deflate both ways, zip bomb 1009)")


async def wait_for_shutdown(port):
    """Connects, prints READY, and waits for the server to close the connection."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/chat/shutdown?name=waiter") as ws:
        await recv_json(ws)
        print("READY", flush=True)
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 30)
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 1001, f"close on shutdown: {closed.rcvd}")
            print(f"shutdown: ok (close {closed.rcvd.code} {closed.rcvd.reason!r})")


async def wait_for_chaos_close(port):
    """Connects, prints READY, and expects the close that `POST /_chaos/close?code=4000` sends."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo") as ws:
        await ws.send("warm")
        await asyncio.wait_for(ws.recv(), TIMEOUT)
        print("READY", flush=True)
        try:
            await asyncio.wait_for(ws.recv(), 30)
            raise SystemExit("FAIL: got a message instead of the chaos close")
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 4000 and closed.rcvd.reason == "scripted", f"chaos close: {closed.rcvd}")
            print(f"chaos: ok (close {closed.rcvd.code} {closed.rcvd.reason!r} from a script)")


async def path_switch(port):
    """Through `duplex proxy` (PORT is the proxy's; its control endpoint is in
    $DUPLEX_PROXY_CONTROL): the reference for what a client without a network-change hint sees of
    a path switch. Its send succeeds into a half-open connection, nothing comes back, and it
    notices only when its own keepalive times out (ping_interval + ping_timeout, then its
    close_timeout: the closing handshake gets no answer either); a new connection
    through the same proxy echoes at once."""
    control = os.environ["DUPLEX_PROXY_CONTROL"]
    interval = 0.3
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo", ping_interval=interval, ping_timeout=interval,
                                  close_timeout=interval) as ws:
        await ws.send("before")
        check(await asyncio.wait_for(ws.recv(), TIMEOUT) == "before", "echo before the switch")
        request = urllib.request.Request(f"{control}/toxics?type=path-switch", method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            check(answer.status == 201, f"path-switch answered {answer.status}")
        started = time.monotonic()
        await ws.send("into a half-open connection")
        try:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
            raise SystemExit("FAIL: a reply came back over a switched path")
        except websockets.ConnectionClosed:
            elapsed = time.monotonic() - started
    check(elapsed >= interval, f"noticed after {elapsed:.2f} s, before a ping could go unanswered")
    check(elapsed <= 3 * interval + 3, f"noticed only after {elapsed:.2f} s")
    async with websockets.connect(f"ws://127.0.0.1:{port}/echo") as fresh:
        await fresh.send("a new path")
        check(await asyncio.wait_for(fresh.recv(), TIMEOUT) == "a new path", "a new connection echoes")
    print(f"path switch (websockets, no hint): noticed after {elapsed:.2f} s, by its keepalive "
          f"(ping_interval + ping_timeout + close_timeout, {interval} s each); a new connection echoes")


async def scripted_feed(port):
    """docs/examples/feed.json's /feed, as the file says: hello on connect, pong for a JSON
    ping, close 4001 for "bye", a drop with no close frame at the third message, and no pong
    for a WebSocket ping ("answerPings": false)."""
    url = f"ws://127.0.0.1:{port}/feed"
    async with websockets.connect(url, subprotocols=["feed.v1"], ping_interval=None) as ws:
        check(ws.subprotocol == "feed.v1", f"subprotocol {ws.subprotocol!r}")
        check(await recv_json(ws) == {"type": "hello"}, "no hello")
        await ws.send('{"type":"ping","id":1}')
        check(await recv_json(ws) == {"type": "pong"}, "no pong for a JSON ping")
        pong = await ws.ping(b"are you there")
        try:
            await asyncio.wait_for(pong, 0.5)
            check(False, "a WebSocket ping was answered")
        except asyncio.TimeoutError:
            pass
        await ws.send("bye")
        try:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
            check(False, "a message after bye")
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 4001 and closed.rcvd.reason == "bye", f"closed with {closed.rcvd}")
    async with websockets.connect(url, ping_interval=None) as ws:
        check(ws.subprotocol is None, "a subprotocol chosen though none was offered")
        await recv_json(ws)
        for text in ["one", "two", "three"]:
            await ws.send(text)
        try:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
            check(False, "a message after the third")
        except websockets.ConnectionClosed as closed:
            check(closed.rcvd is None, f"a close frame came ({closed.rcvd}); the script drops")
    print("scripted /feed: hello, JSON ping to pong, close 4001 on bye, no pong, drop at the third message")


if __name__ == "__main__":
    asyncio.run(globals()[sys.argv[2]](int(sys.argv[1])))
