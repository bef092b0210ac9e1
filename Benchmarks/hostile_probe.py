#!/usr/bin/env python3
"""Hostile-peer probe of a duplex-server binary (issue 16): what each attack gets, how long the
server holds it, and the server's RSS after each. Loopback only; every loop is bounded.

    python3 Benchmarks/hostile_probe.py .build/release/duplex-server

Prints one line per probe. Uses only the Python standard library.
"""
import base64, os, signal, socket, subprocess, sys, time, threading

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def start(binary, *args):
    proc = subprocess.Popen([binary, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    port = int(line.strip().rsplit(":", 1)[1])
    return proc, port

CRLF = b"\r\n"

def status_line(answer):
    return answer.split(CRLF)[0].decode(errors="replace")

def read_all(sock, limit=10.0):
    sock.settimeout(limit)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data

def wait_closed(sock, limit):
    """Seconds until the peer closes, or None."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
        return time.monotonic() - start
    except (socket.timeout, ConnectionResetError):
        return time.monotonic() - start if not isinstance(sys.exc_info()[1], socket.timeout) else None

def ws_join(port, path):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    while len(rest) < 2:
        rest += s.recv(65536)
    n = rest[1] & 0x7F
    hdr = 2 + (2 if n == 126 else 8 if n == 127 else 0)
    while len(rest) < hdr:
        rest += s.recv(65536)
    if n == 126: n = int.from_bytes(rest[2:4], "big")
    elif n == 127: n = int.from_bytes(rest[2:10], "big")
    while len(rest) < hdr + n:
        rest += s.recv(65536)
    return s, head.split(b"\r\n")[0].decode(), rest[hdr:hdr + n].decode(errors="replace")

def main():
    binary = sys.argv[1]
    proc, port = start(binary, "--request-head-timeout", "10")
    pid = proc.pid
    print(f"idle server RSS: {rss_kib(pid)} KiB")

    # 1. 2,000 silent connections
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2000)]
    time.sleep(1)
    print(f"2000 silent connections open: RSS {rss_kib(pid)} KiB")
    t0 = time.monotonic()
    closed = [wait_closed(silent[0], 30)]
    for s in silent[1:]:
        s.settimeout(max(0.1, 30 - (time.monotonic() - t0)))
        try:
            while s.recv(65536):
                pass
        except Exception:
            pass
    print(f"silent connections: the first closed after {closed[0]:.1f} s, all 2000 closed after {time.monotonic() - t0 + 1:.1f} s; RSS {rss_kib(pid)} KiB")
    for s in silent: s.close()

    # 2. slowloris: one header byte per second, 200 of them at once
    loris = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    payload = b"GET /health HTTP/1.1\r\nX-Slow: " + b"z" * 100
    t0 = time.monotonic(); answers = {}
    for i in range(60):
        alive = 0
        for s in loris:
            if s.fileno() < 0: continue
            try:
                s.send(payload[i:i + 1]); alive += 1
            except OSError:
                s.close()
        if alive == 0: break
        time.sleep(1)
    elapsed = time.monotonic() - t0
    first = read_all(loris[0], 1) if loris[0].fileno() >= 0 else b""
    print(f"slowloris (200 connections, a header byte a second): all closed after {elapsed:.1f} s; answer {status_line(first) or '(closed)'}; RSS {rss_kib(pid)} KiB")
    for s in loris: s.close()

    # 3. oversized heads
    for name, request in [
        ("80 KiB of headers", b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 1000 + b"\r\n" * 1 + (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 80 + b"\r\n"),
        ("1,001 header fields", b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-F%d: v\r\n" % i for i in range(1001)) + b"\r\n"),
        ("a 1 MiB URL", b"GET /health?" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("no Sec-WebSocket-Key", b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"),
        ("Sec-WebSocket-Version: 8", b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n"),
    ]:
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.sendall(request)
        except OSError:
            pass
        answer = read_all(s, 5)
        s.close()
        print(f"{name}: {status_line(answer) or '(no answer)'}")

    # 4. 10,000 room-creation attempts: plain GETs, then WebSocket joins that leave at once
    for i in range(10000):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /chat/flood{i}?name=x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        read_all(s, 5); s.close()
    joined = 0
    for i in range(10000):
        s, status, first = ws_join(port, f"/chat/wsflood{i}?name=x")
        joined += '"type":"welcome"' in first
        s.close()
    s, status, first = ws_join(port, "/chat/mine?name=someone")
    print(f"10,000 plain GETs and {joined} WebSocket joins of new rooms (each left at once): a new room still joins: {'welcome' in first}; RSS {rss_kib(pid)} KiB")
    s.close()

    # 5. SIGTERM with 20 peers that flood /echo and never read
    proc.send_signal(signal.SIGTERM); proc.wait(30)
    proc, port = start(binary, "--shutdown-timeout", "10")
    frame = bytes([0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]) + b"a" * 65536
    peers = []
    def flood(s):
        try:
            for _ in range(64): s.sendall(frame)
        except OSError:
            pass
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        threading.Thread(target=flood, args=(s,), daemon=True).start()
        peers.append(s)
    time.sleep(2)
    print(f"20 non-reading /echo peers: server RSS {rss_kib(proc.pid)} KiB")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    print(f"SIGTERM with 20 non-reading peers: exited {code} after {time.monotonic() - t0:.1f} s (--shutdown-timeout 10)")
    for s in peers: s.close()

main()
