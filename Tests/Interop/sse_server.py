"""A Python aiohttp SSE server on 127.0.0.1 and a free port, for interop tests of the Duplex
SSE client. Prints `http://127.0.0.1:PORT` once listening; runs until killed.

GET /stream sends `retry: 50`, then events with ids counting from Last-Event-ID + 1, a
multi-line event, a comment, and, every 3rd event, ends the response so that the client must
reconnect and resume.

The rest answers as a completions API streams (OpenAI's style):
- POST /v1/completions takes a JSON body {"prompt": "..."} (Content-Type: application/json),
  streams one event per word of "you said: PROMPT" as `data: {"text": "WORD "}`, then
  `data: [DONE]`, and ends the response. A body that is not such JSON gets 400 with a JSON error;
  the prompt "busy" gets 429 with `Retry-After: 1` and a JSON error.
- POST /v1/drop streams one event, then drops the connection (no end of the response).
- GET /v1/count?key=K answers how many requests to /v1/completions or /v1/drop carried ?key=K."""
import asyncio
import collections
import json

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


requests = collections.Counter()


def error(status, message, kind, headers=None):
    body = json.dumps({"error": {"message": message, "type": kind}})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers or {})


async def completions(request):
    requests[request.query.get("key", "")] += 1
    if request.content_type != "application/json":
        return error(400, f"expected application/json, got {request.content_type}", "invalid_request_error")
    try:
        body = json.loads(await request.read())
    except ValueError:
        return error(400, "the body is not JSON", "invalid_request_error")
    if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
        return error(400, "'prompt' is a required string", "invalid_request_error")
    if body["prompt"] == "busy":
        return error(429, "Rate limit reached, retry after 1s", "rate_limit_error", {"Retry-After": "1"})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for word in f"you said: {body['prompt']}".split(" "):
        await response.write(f"data: {json.dumps({'text': word + ' '})}\n\n".encode())
        await asyncio.sleep(0.005)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def drop(request):
    requests[request.query.get("key", "")] += 1
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(b'id: 1\ndata: {"text": "partial "}\n\n')
    await asyncio.sleep(0.05)
    request.transport.abort()
    return response


async def count(request):
    return web.Response(text=str(requests[request.query.get("key", "")]))


async def main():
    app = web.Application()
    app.router.add_get("/stream", stream)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/drop", drop)
    app.router.add_get("/v1/count", count)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Future()


asyncio.run(main())
