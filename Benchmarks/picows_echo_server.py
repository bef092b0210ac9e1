"""picows (Cython, PyPI) echo server on uvloop for Benchmarks/server_echo.sh: one event loop,
every data frame sent back as it came (picows works frame by frame), pings answered, a close
answered. Prints `ws://127.0.0.1:PORT` once listening. Usage: python3 picows_echo_server.py"""
import asyncio

import uvloop
from picows import WSListener, WSMsgType, ws_create_server


class Echo(WSListener):
    def on_ws_frame(self, transport, frame):
        if frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
        elif frame.msg_type == WSMsgType.PING:
            transport.send_pong(frame.get_payload_as_bytes())
        elif frame.msg_type != WSMsgType.PONG:
            transport.send(frame.msg_type, frame.get_payload_as_memoryview(), frame.fin)


async def main():
    server = await ws_create_server(lambda _: Echo(), "127.0.0.1", 0, max_frame_size=16 * 1024 * 1024)
    print(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


uvloop.run(main())
