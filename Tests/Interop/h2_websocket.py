"""WebSockets over HTTP/2 (RFC 8441) against duplex-server, with Python's h2, an independent
HTTP/2 implementation: one TLS connection that negotiates h2 by ALPN, the server's
SETTINGS_ENABLE_CONNECT_PROTOCOL checked, then two WebSockets on two streams of that connection
at once through extended CONNECT (:protocol = websocket) to /echo, each echoing text and binary
messages, interleaved, and closing with 1000; a chat member welcomed; a CONNECT with version 12
gets 426 and one to no route 400. Then, on a second connection, the "rapid reset" attack (300
streams opened and reset at once) gets GOAWAY with ENHANCE_YOUR_CALM.

Usage: h2_websocket.py PORT CA_PEM
"""
import os
import socket
import ssl
import struct
import sys

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

port, ca = int(sys.argv[1]), sys.argv[2]


def fail(message):
    print(f"FAIL: h2 websocket: {message}", file=sys.stderr)
    sys.exit(1)


def frame(opcode, payload):
    """A masked client frame."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    return head + mask + masked


def parse(buffer):
    """(opcode, payload, rest) for the first whole unmasked server frame, or None."""
    if len(buffer) < 2:
        return None
    opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
    if buffer[1] & 0x80:
        fail("the server masked a frame")
    offset = 2
    if length == 126:
        if len(buffer) < 4:
            return None
        length, offset = struct.unpack("!H", buffer[2:4])[0], 4
    elif length == 127:
        if len(buffer) < 10:
            return None
        length, offset = struct.unpack("!Q", buffer[2:10])[0], 10
    if len(buffer) < offset + length:
        return None
    return opcode, buffer[offset:offset + length], buffer[offset + length:]


context = ssl.create_default_context(cafile=ca)
context.set_alpn_protocols(["h2"])
sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")
if sock.selected_alpn_protocol() != "h2":
    fail(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
connection.initiate_connection()
sock.sendall(connection.data_to_send())

streams = {}  # stream id -> {"buffer", "received", "ended", "headers", "reset"}
settings_received = []


def pump(until):
    """Reads frames until until() holds."""
    while not until():
        data = sock.recv(65536)
        if not data:
            fail("the server closed the connection")
        for event in connection.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                streams[event.stream_id]["headers"] = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                state = streams[event.stream_id]
                state["buffer"] += event.data
                while (parsed := parse(state["buffer"])) is not None:
                    opcode, payload, state["buffer"] = parsed
                    state["received"].append((opcode, payload))
            elif isinstance(event, h2.events.StreamEnded):
                streams[event.stream_id]["ended"] = True
            elif isinstance(event, h2.events.StreamReset):
                streams[event.stream_id]["reset"] = event.error_code
                print("reset", event, [(o, len(p)) for o, p in streams[event.stream_id]["received"]], file=sys.stderr)
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                settings_received.append(event)
            elif isinstance(event, h2.events.ConnectionTerminated):
                fail(f"GOAWAY: {event}")
        sock.sendall(connection.data_to_send())


pump(lambda: settings_received)
if connection.remote_settings[h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL] != 1:
    fail("the server did not announce SETTINGS_ENABLE_CONNECT_PROTOCOL = 1")


def connect(path, version="13", extra=()):
    stream = connection.get_next_available_stream_id()
    streams[stream] = {"buffer": b"", "received": [], "ended": False}
    connection.send_headers(stream, [
        (":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"),
        (":path", path), (":authority", f"127.0.0.1:{port}"), ("sec-websocket-version", version), *extra,
    ])
    sock.sendall(connection.data_to_send())
    pump(lambda: "headers" in streams[stream])
    return stream


def send(stream, opcode, payload, end=False):
    """Sends a frame as the server's flow-control windows allow."""
    data = frame(opcode, payload)
    while data:
        room = min(connection.local_flow_control_window(stream), connection.max_outbound_frame_size)
        if room == 0:
            pump(lambda: connection.local_flow_control_window(stream) > 0)
            continue
        chunk, data = data[:room], data[room:]
        connection.send_data(stream, chunk, end_stream=end and not data)
        sock.sendall(connection.data_to_send())


first, second = connect("/echo"), connect("/echo")
for stream in (first, second):
    if streams[stream]["headers"].get(":status") != "200":
        fail(f"CONNECT answered {streams[stream]['headers']}")
big = os.urandom(100_000)  # beyond one stream window's first DATA frames
for n in range(3):
    send(first, 0x1, f"first {n}".encode())
    send(second, 0x2, bytes([n]) * 10)
send(second, 0x2, big)
pump(lambda: len(streams[first]["received"]) == 3 and len(streams[second]["received"]) == 4)
if streams[first]["received"] != [(0x1, f"first {n}".encode()) for n in range(3)]:
    fail(f"first stream echoed {streams[first]['received']}")
if streams[second]["received"][:3] != [(0x2, bytes([n]) * 10) for n in range(3)] or streams[second]["received"][3] != (0x2, big):
    fail("second stream's echoes differ")
for stream in (first, second):
    send(stream, 0x8, struct.pack("!H", 1000) + b"bye", end=True)
pump(lambda: all(streams[s]["received"][-1][0] == 0x8 or "reset" in streams[s] for s in (first, second)))
for stream in (first, second):
    opcode, payload = streams[stream]["received"][-1]
    if opcode != 0x8 or struct.unpack("!H", payload[:2])[0] != 1000:
        fail(f"stream {stream} closed with {opcode}, {payload!r}")
# The server ends each stream after its close frame (END_STREAM, as a FIN over TCP).
pump(lambda: all(streams[s]["ended"] or "reset" in streams[s] for s in (first, second)))

# A chat member over HTTP/2: the subprotocol is chosen, and the server's first frames (welcome,
# members) come at once, before the client says anything.
chat = connect("/chat/h2room?name=h2", extra=[("sec-websocket-protocol", "duplex.chat.v1")])
if streams[chat]["headers"].get(":status") != "200" or streams[chat]["headers"].get("sec-websocket-protocol") != "duplex.chat.v1":
    fail(f"chat CONNECT answered {streams[chat]['headers']}")
pump(lambda: any(b'"welcome"' in payload for _, payload in streams[chat]["received"]))
send(chat, 0x8, struct.pack("!H", 1000), end=True)
pump(lambda: streams[chat]["received"][-1][0] == 0x8 or "reset" in streams[chat])

wrong = connect("/echo", version="12")
if streams[wrong]["headers"].get(":status") != "426" or streams[wrong]["headers"].get("sec-websocket-version") != "13":
    fail(f"version 12 answered {streams[wrong]['headers']}")
nowhere = connect("/nowhere")
if streams[nowhere]["headers"].get(":status") != "400":
    fail(f"/nowhere answered {streams[nowhere]['headers']}")
print("h2 websocket: two WebSockets on one connection echoed text, binary and 100 kB, closed 1000; a chat member welcomed; 426 and 400 as over HTTP/1.1")

# The "rapid reset" attack (CVE-2023-44487): a client that opens streams and resets them at once,
# 300 times, is cut off with GOAWAY (ENHANCE_YOUR_CALM) by swift-nio-http2's limit, not served on.
sock.close()
sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")
connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
connection.initiate_connection()
sock.sendall(connection.data_to_send())
for _ in range(300):
    stream = connection.get_next_available_stream_id()
    connection.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":path", "/health"), (":authority", f"127.0.0.1:{port}")], end_stream=True)
    connection.reset_stream(stream)
try:
    sock.sendall(connection.data_to_send())
except (BrokenPipeError, ConnectionResetError):
    pass
terminated = None
try:
    while terminated is None:
        data = sock.recv(65536)
        if not data:
            break
        for event in connection.receive_data(data):
            if isinstance(event, h2.events.ConnectionTerminated):
                terminated = event
except (ConnectionResetError, h2.exceptions.ProtocolError):
    pass
if terminated is None or terminated.error_code != h2.errors.ErrorCodes.ENHANCE_YOUR_CALM:
    fail(f"300 rapid resets were answered with {terminated}, not GOAWAY ENHANCE_YOUR_CALM")
print("h2: 300 rapid resets got GOAWAY ENHANCE_YOUR_CALM")
