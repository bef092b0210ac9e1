"""A Python `websockets` echo server on 127.0.0.1 and a free port, for interop tests of the
Duplex client. Prints `ws://127.0.0.1:PORT` once listening; runs until killed."""
import asyncio

import websockets


async def echo(connection):
    async for message in connection:
        await connection.send(message)


async def main():
    async with websockets.serve(echo, "127.0.0.1", 0, max_size=2**24) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"ws://127.0.0.1:{port}", flush=True)
        await asyncio.Future()


asyncio.run(main())
