"""Measures duplex-server's resident memory: idle, and with N idle connections open.

DUPLEX_RSS_KIND says which connections: `websocket` (the default, on /echo), `chat` (members of
chat rooms of 100, each welcomed; then silent, as the presence frames settle), `tcp` (silent TCP
connections that never send a request head: measured before the request head timeout closes
them), or `sse` (subscribers of a room's event stream, GET /chat/rss/events, which stays silent;
DUPLEX_RSS_SSE_PATH streams another path, such as /events?interval=3600000).

DUPLEX_RSS_DEFLATE=0 makes the WebSocket clients offer no permessage-deflate (as curl, the
Duplex client by default and many native clients do); by default they offer it, as browsers,
Python's websockets and Node's ws do.

DUPLEX_RSS_TLS=1 starts the server with --tls-self-signed and connects over wss:// (https:// for
SSE and TLS without a request for `tcp`), trusting the CA it made: the memory of a TLS connection.

DUPLEX_RSS_PATH connects the WebSocket clients to another path than /echo (a proxy route of a
--script file, for the memory of a proxied connection pair: Benchmarks/proxy_cost.sh).

DUPLEX_RSS_MESSAGE_BYTES sets the size of the one message each WebSocket connection sends and
gets back (default 1). With compression, 8192 fills the windows a connection keeps both ways
(4 KiB each at the server's default 12 bits): the most an idle compressing connection holds.

Usage: python3 Benchmarks/server_rss.py PATH/TO/duplex-server [N [SERVER FLAGS...]]
(for example `... 1000 --no-compression`: the clients offer permessage-deflate, as Python's
websockets does by default, and each sends one message).
Build the server in release mode first: swift build -c release --product duplex-server
Needs Linux (/proc) and Python's websockets package. Every connection is to 127.0.0.1 and is
closed before the script ends; each wait has a timeout."""
import asyncio
import os
import re
import resource
import ssl
import subprocess
import sys
import tempfile

import websockets


def report(idle, loaded, count, what):
    print(f"idle RSS: {idle / 1024:.1f} MiB")
    print(f"RSS with {count} {what}: {loaded / 1024:.1f} MiB")
    print(f"per connection: {(loaded - idle) / count:.1f} KiB")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+) kB", status.read()).group(1))


async def main(binary, count, flags):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count * 2 + 256)), hard))
    tls = os.environ.get("DUPLEX_RSS_TLS") == "1"
    if tls:
        flags = [*flags, "--tls-self-signed", "--tls-directory", tempfile.mkdtemp(prefix="duplex-rss-tls-")]
    server = subprocess.Popen([binary, "--port", "0", "--log-level", "error", *flags], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().strip()
        match = re.search(r"listening on (https?)://127\.0\.0\.1:(\d+)(?: \(CA: (.+)\))?$", line)
        port = int(match.group(2))
        context = ssl.create_default_context(cafile=match.group(3)) if tls else None
        scheme = "wss" if tls else "ws"
        connect_extra = {"ssl": context} if tls else {}

        async def open_stream():
            return await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1" if tls else None)

        # warm up: one echo round trip, so lazily built state exists before the idle figure (on
        # the measured path: a proxy route's first connection starts what its upstream legs share)
        warm_path = os.environ.get("DUPLEX_RSS_PATH", "/echo") if os.environ.get("DUPLEX_RSS_KIND", "websocket") == "websocket" else "/echo"
        async with websockets.connect(f"{scheme}://127.0.0.1:{port}{warm_path}", **connect_extra) as ws:
            await ws.send("warm")
            await asyncio.wait_for(ws.recv(), 10)
        await asyncio.sleep(1)
        idle = rss_kib(server.pid)

        kind = os.environ.get("DUPLEX_RSS_KIND", "websocket")
        if kind in ("tcp", "sse"):
            streams = []
            path = os.environ.get("DUPLEX_RSS_SSE_PATH", "/chat/rss/events").encode()
            for start in range(0, count, 100):
                batch = await asyncio.wait_for(asyncio.gather(*(open_stream() for _ in range(start, min(count, start + 100)))), 60)
                if kind == "sse":
                    # each subscriber asks at once, as a client does: at most a batch waits
                    # for its request at any time
                    for _, writer in batch:
                        writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
                    heads = await asyncio.wait_for(asyncio.gather(*(reader.readuntil(b"\r\n\r\n") for reader, _ in batch)), 30)
                    assert all(head.startswith(b"HTTP/1.1 200") for head in heads), heads[0]
                streams += batch
            await asyncio.sleep(1)
            loaded = rss_kib(server.pid)
            for _, writer in streams:
                writer.close()
            report(idle, loaded, count, 'silent TCP connections' if kind == 'tcp' else 'room SSE subscribers')
            return

        sockets = []
        for start in range(0, count, 100):
            deflate = {} if os.environ.get("DUPLEX_RSS_DEFLATE", "1") == "1" else {"compression": None}
            if kind == "chat":
                urls = [f"{scheme}://127.0.0.1:{port}/chat/rss{start // 100}?name=m{i}" for i in range(start, min(count, start + 100))]
            else:
                path = os.environ.get("DUPLEX_RSS_PATH", "/echo")
                urls = [f"{scheme}://127.0.0.1:{port}{path}" for _ in range(start, min(count, start + 100))]
            batch = [websockets.connect(url, ping_interval=None, max_queue=None, **deflate, **connect_extra) for url in urls]
            sockets += await asyncio.wait_for(asyncio.gather(*batch), 60)
        if kind == "chat":
            # every member's welcome, then the room's presence frames, read as they come
            welcomes = await asyncio.wait_for(asyncio.gather(*(ws.recv() for ws in sockets)), 60)
            assert all('"welcome"' in welcome for welcome in welcomes), welcomes[0]
            await asyncio.sleep(2)
            loaded = rss_kib(server.pid)
            await asyncio.gather(*(ws.close() for ws in sockets))
            report(idle, loaded, count, "chat members")
            return
        # prove every connection is live and served, then let the server settle; with
        # DUPLEX_RSS_SILENT=1 no connection sends anything after its handshake
        if os.environ.get("DUPLEX_RSS_SILENT") != "1":
            size = int(os.environ.get("DUPLEX_RSS_MESSAGE_BYTES", "1"))
            message = "".join(f"{{\"seq\":{i},\"text\":\"message {i * 7919 % 10007}\"}}," for i in range(size // 20 + 1))[:size]
            await asyncio.wait_for(asyncio.gather(*(ws.send(message) for ws in sockets)), 60)
            echoes = await asyncio.wait_for(asyncio.gather(*(ws.recv() for ws in sockets)), 60)
            assert all(echo == message for echo in echoes), "an echo differed from its message"
        await asyncio.sleep(1)
        loaded = rss_kib(server.pid)
        await asyncio.gather(*(ws.close() for ws in sockets))

        report(idle, loaded, count, "idle WebSocket connections")
    finally:
        server.terminate()
        server.wait(15)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000, sys.argv[3:]))
