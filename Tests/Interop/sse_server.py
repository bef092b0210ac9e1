"""A Python aiohttp SSE server on 127.0.0.1 and a free port, for interop tests of the Duplex
SSE client. Prints `http://127.0.0.1:PORT` once listening; runs until killed.

GET /stream sends `retry: 50`, then events with ids counting from Last-Event-ID + 1, a
multi-line event, a comment, and, every 3rd event, ends the response so that the client must
reconnect and resume."""
import asyncio

from aiohttp import web


async def stream(request):
    last = request.headers.get("Last-Event-ID", "0")
    start = int(last) + 1 if last.isdigit() else 1
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(b"retry: 50\n: python says hello\n\n")
    for n in range(start, start + 3):
        if n % 5 == 0:
            await response.write(f"id: {n}\nevent: multi\ndata: line one\ndata: line two {n}\n\n".encode())
        else:
            await response.write(f"id: {n}\ndata: {n}\n\n".encode())
        await asyncio.sleep(0.01)
    await response.write_eof()
    return response


async def main():
    app = web.Application()
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Future()


asyncio.run(main())
