"""A Python `websockets` echo server, the peer for Benchmarks/server_echo.sh: prints its URL.

Usage: python3 Benchmarks/python_echo_server.py (needs the websockets package)."""
import asyncio

import websockets


async def echo(socket):
    async for message in socket:
        await socket.send(message)


async def main():
    async with websockets.serve(echo, "127.0.0.1", 0, compression=None, max_size=1 << 20, ping_interval=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"ws://127.0.0.1:{port}/", flush=True)
        await asyncio.Future()


asyncio.run(main())
