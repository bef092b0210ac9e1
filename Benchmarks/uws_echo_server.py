"""uWebSockets (through socketify, PyPI; needs Debian's libuv1) echo server for
Benchmarks/server_echo.sh: one thread, one event loop, every message sent back as it came.
Prints `ws://127.0.0.1:PORT` once listening. Usage: python3 uws_echo_server.py"""
import socket
import sys

from socketify import App, CompressOptions, OpCode  # noqa: F401  (OpCode: the echo keeps it)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


port = free_port()
app = App()
app.ws(
    "/*",
    {
        "compression": CompressOptions.DISABLED,
        "max_payload_length": 16 * 1024 * 1024,
        "idle_timeout": 0,
        "message": lambda ws, message, opcode: ws.send(message, opcode),
    },
)
app.listen(port, lambda config: print(f"ws://127.0.0.1:{port}", flush=True))
app.run()
sys.exit(0)
