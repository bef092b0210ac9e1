#!/usr/bin/env python3
"""What a peer that announces large frames and sends little makes duplex-server reserve.

Opens 200 WebSocket connections to /echo, sends on each the header of a 16,000,000-byte masked
binary frame and 100 KB of its payload, waits 2 s, and prints how much the server's virtual size
(VmSize) and resident memory (VmRSS) grew, from /proc/PID/status.

    taskset -c 0 .build-release/release/duplex-server --port 8090 --event-loops 1 &
    python3 Benchmarks/hostile_reservation.py 8090 $!
"""
import base64
import os
import socket
import struct
import sys
import time

CONNECTIONS = 200
CLAIMED = 16_000_000
SENT = 100_000


def memory(pid):
    sizes = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmSize", "VmRSS")):
                key, value = line.split(":")
                sizes[key] = int(value.split()[0])
    return sizes


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    before = memory(pid)
    sockets = []
    for _ in range(CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(
            f"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("the server closed the connection during the upgrade")
            response += chunk
        if not response.startswith(b"HTTP/1.1 101"):
            sys.exit(f"no upgrade: {response[:80]!r}")
        s.sendall(bytes([0x82, 0xFF]) + struct.pack(">Q", CLAIMED) + b"\x01\x02\x03\x04")
        s.sendall(b"\x00" * SENT)
        sockets.append(s)
    time.sleep(2)
    after = memory(pid)
    growth = {key: (after[key] - before[key]) // 1024 for key in before}
    print(f"{CONNECTIONS} connections, {CLAIMED:,} bytes announced and {SENT:,} sent on each: "
          f"VmSize +{growth['VmSize']} MiB, VmRSS +{growth['VmRSS']} MiB")
    for s in sockets:
        s.close()


if __name__ == "__main__":
    main()
