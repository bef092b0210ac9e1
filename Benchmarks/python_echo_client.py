"""The Python websockets side of Benchmarks/ClientEchoBenchmark: the same measures against the
same server. Usage: python_echo_client.py URL MESSAGES ROUNDTRIPS

With --throughput, one run for Benchmarks/client_peers.sh, printing
`python-websockets CONNECTIONS MESSAGES/S`: python_echo_client.py --throughput URL MESSAGES CONNECTIONS"""
import asyncio
import sys
import time

import websockets

PAYLOAD = "x" * 64


async def pump(url, count):
    async with websockets.connect(url, max_size=None) as ws:
        async def reader():
            for _ in range(count):
                await ws.recv()
        task = asyncio.create_task(reader())
        for _ in range(count):
            await ws.send(PAYLOAD)
        await task


async def throughput(url, total, connections):
    per = total // connections
    start = time.perf_counter()
    await asyncio.gather(*(pump(url, per) for _ in range(connections)))
    return per * connections / (time.perf_counter() - start)


async def latency(url, count):
    samples = []
    async with websockets.connect(url) as ws:
        for _ in range(count):
            start = time.perf_counter()
            await ws.send(PAYLOAD)
            await ws.recv()
            samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 99 // 100]


async def main(url, total, trips):
    await throughput(url, total // 10, 1)  # warm up
    one = await throughput(url, total, 1)
    hundred = await throughput(url, total, 100)
    p50, p99 = await latency(url, trips)
    print(f"  throughput, 1 connection:    {one:9.0f} messages/s")
    print(f"  throughput, 100 connections: {hundred:9.0f} messages/s")
    print(f"  round trip ({trips} sequential):  p50 {p50:.1f} µs, p99 {p99:.1f} µs")


async def one_run(url, total, connections):
    rate = await throughput(url, total, connections)
    print("python-websockets", connections, round(rate))


if sys.argv[1] == "--throughput":
    asyncio.run(one_run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
else:
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
