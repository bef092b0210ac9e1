"""Memory per idle WebSocket connection of Node `ws` (Benchmarks/node_echo_server.js), over TCP
or, with DUPLEX_RSS_TLS=1, over TLS (Node's https module, a certificate made by openssl): the peer
figure next to Benchmarks/server_rss.py's. Each connection sends one message and gets it back.

Usage: [DUPLEX_RSS_TLS=1] python3 Benchmarks/node_rss.py [N]
Needs Linux (/proc), Debian's node-ws, openssl and Python's websockets. Every connection is to
127.0.0.1 and is closed before the script ends; each wait has a timeout."""
import asyncio
import os
import re
import resource
import ssl
import subprocess
import sys
import tempfile

import websockets

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+) kB", status.read()).group(1))


async def main(count):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count * 2 + 256)), hard))
    tls = os.environ.get("DUPLEX_RSS_TLS") == "1"
    environment = dict(os.environ)
    context = None
    if tls:
        work = tempfile.mkdtemp(prefix="duplex-node-rss-")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", f"{work}/key.pem", "-out", f"{work}/cert.pem", "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
        environment.update(DUPLEX_TLS_CERT=f"{work}/cert.pem", DUPLEX_TLS_KEY=f"{work}/key.pem")
        context = ssl.create_default_context(cafile=f"{work}/cert.pem")
    server = subprocess.Popen(["node", f"{HERE}/node_echo_server.js"], stdout=subprocess.PIPE, text=True, env=environment)
    try:
        url = server.stdout.readline().strip() + "echo"
        extra = {"ssl": context} if tls else {}
        async with websockets.connect(url, **extra) as ws:
            await ws.send("warm")
            await asyncio.wait_for(ws.recv(), 10)
        await asyncio.sleep(1)
        idle = rss_kib(server.pid)
        sockets = []
        for start in range(0, count, 100):
            batch = [websockets.connect(url, ping_interval=None, max_queue=None, compression=None, **extra) for _ in range(start, min(count, start + 100))]
            sockets += await asyncio.wait_for(asyncio.gather(*batch), 60)
        await asyncio.wait_for(asyncio.gather(*(ws.send("x") for ws in sockets)), 60)
        echoes = await asyncio.wait_for(asyncio.gather(*(ws.recv() for ws in sockets)), 60)
        assert all(echo == "x" for echo in echoes), "an echo differed from its message"
        await asyncio.sleep(1)
        loaded = rss_kib(server.pid)
        await asyncio.gather(*(ws.close() for ws in sockets))
        print(f"idle RSS: {idle / 1024:.1f} MiB")
        print(f"RSS with {count} idle WebSocket connections: {loaded / 1024:.1f} MiB")
        print(f"per connection: {(loaded - idle) / count:.1f} KiB")
    finally:
        server.terminate()
        server.wait(15)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
