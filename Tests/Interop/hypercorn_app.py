"""An ASGI app for Hypercorn, an HTTP/2 server independent of Duplex (PyPI), which speaks
WebSockets over HTTP/2 (RFC 8441): a WebSocket echo at any path, where the text "version" is
answered with the HTTP version the socket runs over ("1.1" or "2"); at /events an SSE stream
whose events carry the HTTP version of their request; and at POST /v1/completions a stream as a
completions API sends it: the JSON body's "prompt" back word by word, then the HTTP version, then
`data: [DONE]` (400 with a JSON error for a body without a prompt, 429 with Retry-After for the
prompt "busy").

Run: hypercorn --certfile CERT --keyfile KEY --bind 127.0.0.1:PORT hypercorn_app:app
"""
import asyncio
import json


async def completions(scope, receive, send):
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    try:
        prompt = json.loads(body)["prompt"]
        assert isinstance(prompt, str)
    except (ValueError, KeyError, TypeError, AssertionError):
        prompt = None
    if prompt is None or prompt == "busy":
        status, kind = (400, "invalid_request_error") if prompt is None else (429, "rate_limit_error")
        headers = [(b"content-type", b"application/json")] + ([(b"retry-after", b"1")] if status == 429 else [])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps({"error": {"type": kind}}).encode()})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for word in prompt.split(" ") + [f"HTTP/{scope['http_version']}"]:
        chunk = f"data: {json.dumps({'text': word})}\n\n".encode()
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                return
            if event.get("text") == "version":
                await send({"type": "websocket.send", "text": scope["http_version"]})
            elif event.get("text") is not None:
                await send({"type": "websocket.send", "text": event["text"]})
            else:
                await send({"type": "websocket.send", "bytes": event["bytes"]})
    elif scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/completions":
        await completions(scope, receive, send)
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(1, 100_000):
            body = f"id: {n}\nevent: tick\ndata: {scope['http_version']}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
            await asyncio.sleep(0.05)
