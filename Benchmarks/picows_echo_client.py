"""The picows (on uvloop) side of Benchmarks/client_peers.sh, as node_echo_client.js does it:
each of CONNECTIONS connections sends its share of MESSAGES 64-byte text messages at once and
counts the echoes. Prints `picows CONNECTIONS MESSAGES/S`.
Usage: python3 picows_echo_client.py URL MESSAGES CONNECTIONS"""
import asyncio
import sys
import time

import uvloop
from picows import WSCloseCode, WSListener, WSMsgType, ws_connect

PAYLOAD = b"x" * 64


class Counter(WSListener):
    def __init__(self, count):
        self.count = count
        self.seen = 0
        self.done = asyncio.get_running_loop().create_future()

    def on_ws_connected(self, transport):
        for _ in range(self.count):
            transport.send(WSMsgType.TEXT, PAYLOAD)

    def on_ws_frame(self, transport, frame):
        if frame.msg_type == WSMsgType.TEXT:
            self.seen += 1
            if self.seen == self.count and not self.done.done():
                self.done.set_result(None)
                transport.send_close(WSCloseCode.OK)
                transport.disconnect()


async def pump(url, count):
    _, listener = await ws_connect(lambda: Counter(count), url)
    await listener.done


async def main(url, total, connections):
    per = total // connections
    start = time.perf_counter()
    await asyncio.gather(*(pump(url, per) for _ in range(connections)))
    print("picows", connections, round(per * connections / (time.perf_counter() - start)))


uvloop.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
