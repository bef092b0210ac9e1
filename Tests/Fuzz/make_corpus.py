#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into Tests/Fuzz/Corpus/TARGET/ (valid inputs,
from the specifications' own examples where they have them). Run it again after changing it;
libFuzzer's finds worth keeping are added beside these by Tests/Fuzz/run.sh --merge."""
import hashlib
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Corpus")


def write(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def frame(opcode, payload, fin=True, rsv1=False, mask=b"\x37\xfa\x21\x3d"):
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    length = len(payload)
    mask_bit = 0x80 if mask else 0
    if length < 126:
        head = bytes([first, mask_bit | length])
    elif length < 65536:
        head = bytes([first, mask_bit | 126]) + struct.pack(">H", length)
    else:
        head = bytes([first, mask_bit | 127]) + struct.pack(">Q", length)
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return head + mask + payload
    return head + payload


def deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


# SSE: the WHATWG standard's examples (section 9.2.6), and line-ending and BOM cases.
sse = {
    "whatwg-stocks": b"data: YHOO\ndata: +2\ndata: 10\n\n",
    "whatwg-comment-and-id": b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n",
    "whatwg-two-events": b"data\n\ndata\ndata\n\ndata:\n",
    "whatwg-spaces": b"data:test\n\ndata: test\n\n",
    "crlf-cr-lf": b"event: tick\r\ndata: a\rdata: b\n\r\nid: 7\r\ndata: c\r\n\r\n",
    "bom-retry": b"\xef\xbb\xbfretry: 1500\ndata: after bom\n\nretry: 12x\ndata: bad retry ignored\n\n",
    "id-nul-and-utf8": b"id: a\x00b\ndata: \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5 \xff\n\n",
}
for name, stream in sse.items():
    write("sse", name, bytes([3]) + stream)

# Chat frames: what clients and the server send.
chat = [
    {"type": "say", "v": 1, "clientMessageId": "c-1", "text": "hello"},
    {"type": "say", "clientMessageId": "c-\u00e9", "text": "\u03ba\u1f79\u03c3\u03bc\u03b5"},
    {"type": "welcome", "v": 1, "room": "lobby", "name": "alice", "session": "s1", "members": ["alice"], "latestSeq": 0, "epoch": "e", "resumeToken": "t"},
    {"type": "message", "v": 1, "room": "lobby", "seq": 3, "clientMessageId": "c-1", "from": "alice", "text": "hi", "sentAt": "2026-11-25T12:00:00.123Z"},
    {"type": "ack", "v": 1, "clientMessageId": "c-1", "seq": 3, "duplicate": True},
    {"type": "error", "v": 1, "code": "bad_json", "reason": "not JSON"},
]
for i, value in enumerate(chat):
    write("chat-frames", f"frame-{i}", json.dumps(value).encode())
write("chat-frames", "not-json", b"{\"type\": \"say\", ")

# WebSocket frames as a client sends them after the upgrade (masked), for the raw server
# target and the two-engine comparison. The first byte picks permessage-deflate (odd: on).
hello = "Hello, \u03ba\u1f79\u03c3\u03bc\u03b5!".encode()
streams = {
    "text-binary-ping-close": frame(1, hello) + frame(2, bytes(range(40))) + frame(9, b"ping") + frame(8, struct.pack(">H", 1000) + b"bye"),
    "fragmented-text": frame(1, hello[:5], fin=False) + frame(9, b"") + frame(0, hello[5:9], fin=False) + frame(0, hello[9:]) + frame(8, b""),
    "invalid-utf8-fragments": frame(1, "\u03ba\u1f79\u03c3\u03bc\u03b5".encode(), fin=False) + frame(0, b"\xf4\x90\x80\x80", fin=False) + frame(0, b"edited"),
    "reserved-opcode": frame(1, b"a") + frame(3, b""),
    "bad-close-code": frame(8, struct.pack(">H", 1005)),
    "large-16bit-length": frame(2, b"x" * 300) + frame(1, b"y" * 5000),
}
for name, data in streams.items():
    write("ws-server", name, bytes([0, 2]) + data)
    write("ws-engines", name, bytes([0]) + data)
    write("ws-parser", name, bytes([2]) + data)
# The parser next to NIO's decoder: what only the header refuses, and every length form.
parser_streams = {
    "unmasked-64bit-length": frame(2, b"z" * 70000, mask=None)[:10] + frame(2, b"z" * 3000, mask=None),
    "64bit-length-top-bit": bytes([0x82, 0xFF]) + b"\x80" + b"\x00" * 7,
    "fragmented-ping": frame(9, b"p", fin=False),
    "long-pong": frame(10, b"q" * 126),
    "reserved-bits-unmasked": bytes([0xF2, 0x03]) + b"abc" + frame(0, b"", fin=True),
    "empty-frames": frame(1, b"") + frame(2, b"", mask=None) + frame(0, b""),
}
for name, data in parser_streams.items():
    write("ws-parser", name, bytes([5]) + data)
compressed = frame(1, deflate(b"compressed hello " * 20), rsv1=True) + frame(1, deflate(b"compressed hello " * 20 + b"again"), rsv1=True) + frame(1, b"plain")
write("ws-server", "deflate", bytes([1, 0]) + compressed)
write("ws-engines", "deflate", bytes([1]) + compressed)
write("ws-engines", "deflate-fragmented", bytes([1]) + frame(2, deflate(bytes(range(256)) * 4)[:10], fin=False, rsv1=True) + frame(0, deflate(bytes(range(256)) * 4)[10:]))

# Inflate: deflate streams, a bomb, and a stored block. The first byte sets the limit (x64+1).
write("inflate", "text", bytes([8]) + deflate(b"the quick brown fox " * 10))
write("inflate", "bomb", bytes([1]) + deflate(b"\x00" * 100000))
write("inflate", "stored", bytes([4]) + b"\x01\x05\x00\xfa\xffhello")
write("inflate", "empty", bytes([0]) + b"\x00")

# Resume positions: tick ids, room stream ids, join parameters.
for name, text in {"tick": "12345", "negative": "-5", "huge": "99999999999999999999", "room": "Zx9_epoch:42", "bare-seq": "7", "colon-only": ":", "token": "dGhpcyBpcyBhIHRva2Vu"}.items():
    write("resume", name, bytes([2, 10]) + text.encode())



# UTF-8: valid text in several scripts, Autobahn 6.4's invalid sequences, edge code points.
for name, data in {
    "kosme": "\u03ba\u1f79\u03c3\u03bc\u03b5".encode(),
    "above-max": "\u03ba\u1f79\u03c3\u03bc\u03b5".encode() + b"\xf4\x90\x80\x80edited",
    "surrogate": b"a\xed\xa0\x80b",
    "overlong": b"\xe0\x80\xaf",
    "edges": "\u007f\u0080\u07ff\u0800\uffff\U00010000\U0010ffff".encode(),
    "truncated": "\U0001f600".encode()[:3],
}.items():
    write("utf8", name, bytes([5]) + data)
print("corpora written under", ROOT)
