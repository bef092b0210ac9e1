"""Protocol presets from outside (issue 63): `duplex-server --script` serves each example file of
docs/examples/ and the ecosystem's own clients speak to it.

- graphql-ws.json: gql's WebSocket transport with the graphql-transport-ws subprotocol receives
  {"ticks": 1}, 2, 3 and a completed subscription, and a TransportQueryError mentioning `boom`;
  a message that is not JSON is closed with 4400.
- socketio.json: python-socketio's AsyncClient over the WebSocket transport gets `welcome`,
  "ok" for call("subscribe", ...), and the three quotes; a polling request is refused with 400.
- mqtt.json: paho-mqtt over WebSocket, MQTT 3.1.1 and 5, gets CONNACK, the three ticks, its own
  `echo`, and a PINGRESP for each PINGREQ with a keepalive of one second.
- Both subprotocol handshakes answer their subprotocol (Python websockets checks it).

Usage: python3 presets_check.py PATH/TO/duplex-server DOCS/EXAMPLES
"""
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import paho.mqtt.client as mqtt
import socketio
from gql import Client, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import connect

server_bin, examples = sys.argv[1], sys.argv[2]


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def start_duplex(name):
    process = subprocess.Popen([server_bin, "--port", "0", "--log-level", "warning", "--script", os.path.join(examples, name)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.match(r"duplex-server listening on http://127\.0\.0\.1:(\d+)", line)
    if not match:
        process.kill()
        fail(f"duplex-server --script {name} did not listen: {line!r} {process.stderr.read()}")
    return process, int(match.group(1))


def journal(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_journal", timeout=10) as response:
        return json.load(response)


async def graphql_checks(port):
    url = f"ws://127.0.0.1:{port}/graphql"
    async with connect(url, subprotocols=["graphql-transport-ws"]) as raw:
        if raw.subprotocol != "graphql-transport-ws":
            fail(f"the GraphQL handshake chose {raw.subprotocol!r}")
        await raw.send("not json")
        try:
            await asyncio.wait_for(raw.recv(), 10)
            fail("a message that is not JSON was answered")
        except Exception:
            pass
        if raw.close_code != 4400:
            fail(f"a message that is not JSON closed with {raw.close_code}, not 4400")
    transport = WebsocketsTransport(url=url, subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL])
    async with Client(transport=transport) as session:
        results = []
        async for result in session.subscribe(gql("subscription Ticks { ticks }")):
            results.append(result)
        if results != [{"ticks": 1}, {"ticks": 2}, {"ticks": 3}]:
            fail(f"gql's subscription got {results}")
        try:
            async for result in session.subscribe(gql("subscription Fail { fail }")):
                fail(f"the failing subscription got {result}")
            fail("the failing subscription completed without an error")
        except TransportQueryError as error:
            if "boom" not in str(error):
                fail(f"the TransportQueryError says {error}")
    print("graphql-transport-ws: gql got ticks 1, 2, 3 and completion, TransportQueryError 'boom'; not JSON closed 4400")


async def socketio_checks(port):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/socket.io/?EIO=4&transport=polling", timeout=10)
        fail("a polling request was served")
    except urllib.error.HTTPError as error:
        body = error.read().decode()
        if error.code != 400 or "Transport unknown" not in body:
            fail(f"a polling request got {error.code} {body}")
    client = socketio.AsyncClient()
    welcome = asyncio.get_running_loop().create_future()
    quotes = []
    three = asyncio.Event()

    @client.on("welcome")
    async def on_welcome(data):
        welcome.set_result(data)

    @client.on("quote")
    async def on_quote(data):
        quotes.append(data)
        if len(quotes) == 3:
            three.set()

    await client.connect(f"http://127.0.0.1:{port}", transports=["websocket"], wait_timeout=10)
    if await asyncio.wait_for(welcome, 10) != {"server": "duplex"}:
        fail(f"welcome was {welcome.result()}")
    ack = await client.call("subscribe", {"symbol": "DPLX"}, timeout=10)
    if ack != "ok":
        fail(f"subscribe was acknowledged with {ack!r}")
    await asyncio.wait_for(three.wait(), 10)
    if quotes != [{"n": 1}, {"n": 2}, {"n": 3}]:
        fail(f"the quotes were {quotes}")
    await client.disconnect()
    print("socket.io: python-socketio over the WebSocket transport got welcome, 'ok' and three quotes; polling refused 400")


def mqtt_checks(port, protocol, name):
    connected, ticks, echoed = threading.Event(), [], threading.Event()
    log = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"check-{name}", transport="websockets", protocol=protocol)
    client.ws_set_options(path="/mqtt")
    client.on_log = lambda client, userdata, level, text: log.append(text)

    def on_connect(client, userdata, flags, reason_code, properties):
        if reason_code == 0:
            connected.set()
        client.subscribe("ticks", qos=1)
        client.subscribe("echo", qos=1)

    def on_message(client, userdata, message):
        if message.topic == "ticks":
            ticks.append(message.payload.decode())
        elif message.topic == "echo" and message.payload == b"hello":
            echoed.set()

    client.on_connect = on_connect
    client.on_message = on_message
    client.connect("127.0.0.1", port, keepalive=1)
    client.loop_start()
    try:
        if not connected.wait(10):
            fail(f"paho-mqtt ({name}) got no CONNACK: {log}")
        deadline = time.time() + 10
        while len(ticks) < 3 and time.time() < deadline:
            time.sleep(0.05)
        if ticks != ["tick 1", "tick 2", "tick 3"]:
            fail(f"paho-mqtt ({name}) got ticks {ticks}")
        client.publish("echo", "hello", qos=1)
        if not echoed.wait(10):
            fail(f"paho-mqtt ({name}) did not get its own echo")
        time.sleep(3.5)  # three keepalive periods of one second, in which paho sends PINGREQ
        # A PINGREQ sent just now may still wait for its PINGRESP: give it time to arrive.
        count = lambda text: sum(1 for line in list(log) if text in line)
        deadline = time.time() + 5
        while count("Received PINGRESP") < count("Sending PINGREQ") and time.time() < deadline:
            time.sleep(0.05)
        # Counted before the disconnect, requests first: a PINGREQ sent after is not counted.
        requests = count("Sending PINGREQ")
        responses = count("Received PINGRESP")
    finally:
        client.disconnect()
        client.loop_stop()
    if requests < 2 or responses < requests:
        fail(f"paho-mqtt ({name}) sent {requests} PINGREQ and got {responses} PINGRESP")
    print(f"mqtt ({name}): paho-mqtt got CONNACK, three ticks, its echo, {responses} PINGRESP for {requests} PINGREQ")


async def mqtt_handshake(port):
    async with connect(f"ws://127.0.0.1:{port}/mqtt", subprotocols=["mqtt"]) as raw:
        if raw.subprotocol != "mqtt":
            fail(f"the MQTT handshake chose {raw.subprotocol!r}")
        await raw.send("not binary")
        try:
            await asyncio.wait_for(raw.recv(), 10)
        except Exception:
            pass
        if raw.close_code != 1003:
            fail(f"a text message to the MQTT route closed with {raw.close_code}, not 1003")


def main():
    processes = []
    try:
        graphql, graphql_port = start_duplex("graphql-ws.json")
        processes.append(graphql)
        asyncio.run(asyncio.wait_for(graphql_checks(graphql_port), 60))
        socket_io, socket_io_port = start_duplex("socketio.json")
        processes.append(socket_io)
        asyncio.run(asyncio.wait_for(socketio_checks(socket_io_port), 60))
        broker, broker_port = start_duplex("mqtt.json")
        processes.append(broker)
        asyncio.run(mqtt_handshake(broker_port))
        mqtt_checks(broker_port, mqtt.MQTTv311, "3.1.1")
        mqtt_checks(broker_port, mqtt.MQTTv5, "5")
        packets = [entry.get("data", "") for entry in journal(broker_port) if entry["kind"] == "packet"]
        if not any(packet.startswith("PINGREQ") for packet in packets):
            fail(f"the MQTT journal has no PINGREQ: {packets[:20]}")
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
    print("presets: all checks passed")


main()
