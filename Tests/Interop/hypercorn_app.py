"""An ASGI app for Hypercorn, an HTTP/2 server independent of Duplex (PyPI), which speaks
WebSockets over HTTP/2 (RFC 8441): a WebSocket echo at any path, where the text "version" is
answered with the HTTP version the socket runs over ("1.1" or "2"); and at /events an SSE stream
whose events carry the HTTP version of their request.

Run: hypercorn --certfile CERT --keyfile KEY --bind 127.0.0.1:PORT hypercorn_app:app
"""
import asyncio


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
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(1, 100_000):
            body = f"id: {n}\nevent: tick\ndata: {scope['http_version']}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
            await asyncio.sleep(0.05)
