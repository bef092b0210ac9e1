"""Browser tests of duplex-server's demo page in real headless Chromium, driven over the
DevTools protocol (CDP) with Python's `websockets`.

Usage: browser_test.py PATH/TO/duplex-server [SCREENSHOT.png]

Starts the server (with --chaos) on a free port and Chromium with a throwaway profile, then:
two pages chat with each other over the duplex.chat.v1 subprotocol with permessage-deflate;
EventSource resumes after /_chaos/drop with consecutive ids; a server close code (4000) reaches
the page's CloseEvent and the page resumes; a page's own WebSocket to /echo offering
subprotocols gets the first, and compression. Then the same page over TLS, from a second server
started with --tls-self-signed, which Chromium trusts through --ignore-certificate-errors-spki-list
(the SPKI hash of the server's certificate): https:// page, wss:// chat and echo, https://
EventSource. Every wait has a timeout; exits non-zero with a message on the first failure."""
import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websockets

TIMEOUT = 15


def fail(message):
    raise SystemExit(f"FAIL: {message}")


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("no chromium on PATH (Debian: apt-get install chromium)")


def start_server(binary, work, tls=False):
    out = open(os.path.join(work, "server-tls.out" if tls else "server.out"), "w+")
    flags = ["--tls-self-signed", "--tls-directory", os.path.join(work, "tls")] if tls else []
    process = subprocess.Popen([binary, "--port", "0", "--chaos", "--log-level", "warning"] + flags, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + TIMEOUT
    scheme = "https" if tls else "http"
    while time.time() < deadline:
        out.seek(0)
        match = re.search(scheme + r"://127\.0\.0\.1:(\d+)", out.read())
        if match:
            return process, int(match.group(1))
        if process.poll() is not None:
            fail(f"duplex-server exited: {open(out.name).read()}")
        time.sleep(0.05)
    fail("duplex-server did not start")


def spki_hash(port):
    """The base64 SHA-256 of the SubjectPublicKeyInfo of the certificate the server presents."""
    import ssl
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        with context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    pem = subprocess.run(["openssl", "x509", "-inform", "der", "-pubkey", "-noout"], input=der, capture_output=True, check=True).stdout
    spki = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pem, capture_output=True, check=True).stdout
    import hashlib
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def start_chromium(work, trusted_spki):
    profile = os.path.join(work, "profile")
    process = subprocess.Popen(
        [find_chromium(), "--headless=new", f"--ignore-certificate-errors-spki-list={trusted_spki}", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-dev-shm-usage", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile}", "--window-size=1100,760", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "chromium.err"), "w"))
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split()
            if len(lines) >= 2:
                return process, f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        if process.poll() is not None:
            fail(f"chromium exited: {open(os.path.join(work, 'chromium.err')).read()[-2000:]}")
        time.sleep(0.05)
    fail("chromium did not open its DevTools port")


class DevTools:
    """A minimal CDP client: commands with ids, one flat session per page."""

    def __init__(self, socket):
        self.socket = socket
        self.next_id = 0
        self.waiting = {}
        self.reader = asyncio.create_task(self.read())

    async def read(self):
        async for raw in self.socket:
            message = json.loads(raw)
            future = self.waiting.pop(message.get("id"), None)
            if future and not future.done():
                future.set_result(message)

    async def send(self, method, params=None, session=None, check=True):
        self.next_id += 1
        request = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.socket.send(json.dumps(request))
        reply = await asyncio.wait_for(future, TIMEOUT)
        if not check:
            return reply
        if "error" in reply:
            fail(f"{method}: {reply['error']}")
        return reply["result"]

    async def open_page(self, url):
        target = (await self.send("Target.createTarget", {"url": url}))["targetId"]
        session = (await self.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        return Page(self, session)


class Page:
    def __init__(self, devtools, session):
        self.devtools = devtools
        self.session = session

    async def evaluate(self, expression):
        # While the page loads, its execution context can be replaced under an evaluation:
        # evaluate again in the new one.
        deadline = time.time() + TIMEOUT
        while True:
            reply = await self.devtools.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, self.session, check=False)
            if "error" not in reply:
                result = reply["result"]
                break
            if "context" not in reply["error"].get("message", "") or time.time() > deadline:
                fail(f"Runtime.evaluate: {reply['error']}")
            await asyncio.sleep(0.05)
        if "exceptionDetails" in result:
            fail(f"page error in {expression[:80]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, condition, what, timeout=TIMEOUT):
        """Waits, in the page, until `condition` (a JS expression) holds."""
        script = f"""new Promise((resolve) => {{
            const check = () => {{ try {{ if ({condition}) return resolve(true); }} catch (e) {{}} setTimeout(check, 20); }};
            check();
        }})"""
        try:
            await asyncio.wait_for(self.evaluate(script), timeout)
        except asyncio.TimeoutError:
            state = await self.evaluate("JSON.stringify({chat: {...window.duplexDemo?.chat, socket: undefined, pending: undefined}, ticks: {...window.duplexDemo?.ticks, source: undefined}})")
            fail(f"timed out waiting for {what}; page state: {state}")

    async def say(self, text):
        await self.evaluate(f"""(() => {{
            document.querySelector('#say input[name=text]').value = {json.dumps(text)};
            document.getElementById('say').requestSubmit();
        }})()""")

    async def screenshot(self, path):
        # The whole page, the live view below the fold included.
        size = (await self.devtools.send("Page.getLayoutMetrics", {}, self.session))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = (await self.devtools.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, self.session))["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))


def post(port, path):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return json.loads(response.read())


async def run_tls(port, devtools):
    """The demo page over TLS: https://, wss:// (chat and /echo) and an https:// EventSource."""
    page = await devtools.open_page(f"https://127.0.0.1:{port}/?room=secure&interval=200&name=carol")
    await page.wait_for("location.protocol === 'https:' && duplexDemo.chat.opens >= 1 && duplexDemo.chat.members.length >= 1", "the chat over wss:// to open")
    await page.say("over tls")
    await page.wait_for("document.getElementById('chat-log').textContent.includes('carol: over tls') && duplexDemo.chat.pending.size === 0", "the message over wss:// to be acknowledged")
    await page.wait_for("duplexDemo.ticks.ids.length >= 2", "two ticks over https://")
    echo = await page.evaluate("""new Promise((resolve, reject) => {
        const ws = new WebSocket(`wss://${location.host}/echo`);
        ws.onopen = () => ws.send('secure echo');
        ws.onmessage = (e) => { resolve({ url: ws.url, data: e.data, extensions: ws.extensions }); ws.close(); };
        ws.onerror = () => reject(new Error('the wss echo socket failed'));
    })""")
    if echo.get("data") != "secure echo" or not echo.get("url", "").startswith("wss://") or "permessage-deflate" not in echo.get("extensions", ""):
        fail(f"wss:// /echo from the page: {echo}")
    # Over TLS, Chromium negotiates HTTP/2: the page, its EventSource, and (extended CONNECT,
    # RFC 8441) its WebSockets ride one connection. The server's counters say so.
    protocol = await page.evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol")
    if protocol != "h2":
        fail(f"the page loaded over {protocol!r}, not h2")
    sources = await page.evaluate("""new Promise((resolve, reject) => {
        const opened = [];
        for (let n = 0; n < 8; n++) {
            const source = new EventSource(`/events?interval=100&n=${n}`);
            source.addEventListener('tick', () => {
                if (!opened.includes(n)) opened.push(n);
                if (opened.length === 8) resolve(opened.length);
                source.close();
            });
        }
        setTimeout(() => reject(new Error(`only ${opened.length} of 8 EventSources got a tick`)), 10000);
    })""")
    metrics = await page.evaluate("fetch('/metrics').then((r) => r.text())")
    def sample(name):
        for line in metrics.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0
    websockets_h2 = sample('duplex_http2_streams_total{kind="websocket"}')
    http_h2 = sample('duplex_http2_streams_total{kind="http"}')
    if websockets_h2 < 2 or http_h2 < 9:
        fail(f"the server counted {websockets_h2} WebSocket and {http_h2} HTTP streams over h2 (chat and echo, page and 8 EventSources expected)")
    print(f"browser: over TLS, the page at https:// over {protocol}, chat and /echo over wss:// ({echo['extensions']}) on HTTP/2 streams "
          f"(RFC 8441: {websockets_h2:.0f} counted), {sources} EventSources at once over one connection")


async def run(port, tls_port, browser_url, screenshot):
    async with websockets.connect(browser_url, max_size=None) as socket:
        devtools = DevTools(socket)
        base = f"http://127.0.0.1:{port}/?room=browser&interval=200&liveInterval=200"
        alice = await devtools.open_page(base + "&name=alice")
        bob = await devtools.open_page(base + "&name=bob")

        # Both pages join over the subprotocol, with compression.
        for page in (alice, bob):
            await page.wait_for("duplexDemo.chat.opens >= 1 && duplexDemo.chat.members.length >= 1", "the chat to open")
            negotiated = await page.evaluate("[duplexDemo.chat.protocol, duplexDemo.chat.extensions]")
            if negotiated[0] != "duplex.chat.v1" or "permessage-deflate" not in negotiated[1]:
                fail(f"negotiated {negotiated}")
        print("browser: both pages joined with subprotocol duplex.chat.v1 and permessage-deflate")

        # Two pages chat with each other, a long (compressed) message included.
        await alice.say("hello from alice")
        await bob.wait_for("document.getElementById('chat-log').textContent.includes('alice: hello from alice')", "bob to see alice")
        await bob.say("hi alice")
        await alice.wait_for("document.getElementById('chat-log').textContent.includes('bob: hi alice')", "alice to see bob")
        long = "the quick brown fox " * 100
        await alice.say(long)
        await bob.wait_for(f"document.getElementById('chat-log').textContent.includes({json.dumps('alice: ' + long)})", "bob to see the long message")
        await alice.wait_for("duplexDemo.chat.pending.size === 0", "alice's messages to be acknowledged")
        print("browser: two pages chat, a 2 KB message included, every message acknowledged")

        # EventSource resumes after a drop, with consecutive ids.
        await alice.wait_for("duplexDemo.ticks.ids.length >= 3", "three ticks")
        dropped = post(port, "/_chaos/drop?route=events")
        if dropped.get("affected", 0) < 1:
            fail(f"/_chaos/drop affected nothing: {dropped}")
        await alice.wait_for("duplexDemo.ticks.opens >= 2 && duplexDemo.ticks.ids.length >= duplexDemo.ticks.ids.indexOf(duplexDemo.ticks.resumes[0]) + 4",
                             "EventSource to resume and get three more ticks", timeout=30)
        ids = await alice.evaluate("duplexDemo.ticks.ids")
        if any(b != a + 1 for a, b in zip(ids, ids[1:])):
            fail(f"tick ids not consecutive across the resume: {ids}")
        print(f"browser: EventSource resumed after /_chaos/drop, ids {ids[0]}..{ids[-1]} consecutive")

        # A server close code reaches CloseEvent; the page resumes the room.
        closed = post(port, "/_chaos/close?code=4000&reason=bye&route=chat")
        if closed.get("affected", 0) < 2:
            fail(f"/_chaos/close affected {closed}")
        for page in (alice, bob):
            await page.wait_for("duplexDemo.chat.closes.some((c) => c.code === 4000 && c.reason === 'bye')", "CloseEvent 4000 'bye'")
            await page.wait_for("duplexDemo.chat.opens >= 2", "the page to reconnect")
        await bob.say("after the close")
        await alice.wait_for("document.getElementById('chat-log').textContent.includes('bob: after the close')", "chat after the reconnect")
        print("browser: close 4000 'bye' reached CloseEvent on both pages; both resumed the room")

        # A page's own WebSocket to /echo: subprotocol and compression.
        echo = await alice.evaluate("""new Promise((resolve, reject) => {
            const ws = new WebSocket(`ws://${location.host}/echo`, ['chat', 'x']);
            ws.onopen = () => ws.send('x'.repeat(5000));
            ws.onmessage = (e) => { resolve({ protocol: ws.protocol, extensions: ws.extensions, length: e.data.length }); ws.close(); };
            ws.onerror = () => reject(new Error('the echo socket failed'));
        })""")
        if echo != {"protocol": "chat", "extensions": echo.get("extensions"), "length": 5000} or "permessage-deflate" not in echo["extensions"]:
            fail(f"/echo from the page: {echo}")
        print(f"browser: /echo selected {echo['protocol']!r} of ['chat', 'x'] with {echo['extensions']!r}")

        # The live view: the server's metrics once a moment, charted; a fault from its controls.
        await alice.wait_for("duplexDemo.live.events >= 3 && duplexDemo.live.chaos && !document.getElementById('chaos-panel').hidden", "the live view and its chaos controls")
        await alice.wait_for("duplexDemo.live.last['duplex_connections_open{route=\"chat\",transport=\"tcp\"}'] >= 2 && duplexDemo.live.points.some((p) => p.outRate > 0)",
                             "the live view to count both chat pages and a message rate")
        opens = await alice.evaluate("duplexDemo.ticks.opens")
        await alice.evaluate("""(() => {
            document.querySelector('#chaos-scope select[name=scope]').value = 'route=events';
            document.querySelector('#chaos-panel button[data-fault="end-sse"]').click();
        })()""")
        await alice.wait_for("duplexDemo.live.results.some((r) => r.fault === 'end-sse' && r.status === 200 && JSON.parse(r.body).affected >= 2)",
                             "the page's End SSE control to reach both pages' tick streams")
        await alice.wait_for(f"duplexDemo.ticks.opens > {opens} && duplexDemo.live.last['duplex_faults_injected_total{{fault=\"end-sse\"}}'] >= 1",
                             "EventSource to resume and the live view to count the fault", timeout=30)
        print("browser: the live view charts connections and message rates; its End SSE control ended the tick streams, which resumed")

        if screenshot:
            await alice.screenshot(screenshot)
            print(f"browser: screenshot in {screenshot}")

        await run_tls(tls_port, devtools)
        devtools.reader.cancel()


def main():
    binary = sys.argv[1]
    screenshot = sys.argv[2] if len(sys.argv) > 2 else None
    work = tempfile.mkdtemp(prefix="duplex-browser-")
    server = tls_server = chromium = None
    try:
        server, port = start_server(binary, work)
        tls_server, tls_port = start_server(binary, work, tls=True)
        chromium, browser_url = start_chromium(work, spki_hash(tls_port))
        asyncio.run(asyncio.wait_for(run(port, tls_port, browser_url, screenshot), 120))
        print("browser: ok")
    finally:
        for process in (chromium, server, tls_server):
            if process and process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
