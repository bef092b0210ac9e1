// Chat load through duplex-server nodes, with Node `ws` (Debian node-ws): delivery latency and
// throughput, checking every delivery (each member must get each message exactly once). Node
// handles each delivery in a few microseconds, so the generator is not what is measured.
//
//   node chat_load.js latency    NODES MEMBERS SENDERS RATE SECONDS
//   node chat_load.js throughput NODES ROOMS MEMBERS_PER_ROOM SENDERS_PER_ROOM WINDOW SECONDS
//
// NODES is a comma-separated list of ws://HOST:PORT; members are spread over them round-robin.
// latency: SENDERS members each say RATE messages a second; every member records, per message,
// the time from the send to its arrival (one clock: one process). Reports p50 and p99 over
// deliveries to members on another node than the sender, and over all.
// throughput: SENDERS_PER_ROOM members of each room keep WINDOW says in flight (a new one on each
// ack); reports acknowledged messages a second per room and in total.
// Prints one JSON object, with the generator's own CPU time in the steady phase. With SERVER_PIDS (comma-separated pids of the servers), it also reports
// the servers' CPU time (user + system, from /proc) in the joins and in the steady phase after.
const WebSocket = require('/usr/share/nodejs/ws');
const [mode, nodesArg, ...rest] = process.argv.slice(2);
const nodes = nodesArg.split(',');
const now = () => Number(process.hrtime.bigint()) / 1e6; // milliseconds
const room = `bench${process.pid}`;
const fs = require('fs');
const serverPids = (process.env.SERVER_PIDS || '').split(',').filter(Boolean);
const ticksPerSecond = 100; // USER_HZ on Linux
// The servers' CPU seconds so far (user + system); 0 without SERVER_PIDS.
const serverCPU = () => serverPids.reduce((sum, pid) => {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return sum + (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
}, 0);

function join(url) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { perMessageDeflate: false });
    socket.once('message', (data) => {
      if (!data.toString().includes('"type":"welcome"')) reject(new Error(`not welcomed: ${data}`));
      else resolve(socket);
    });
    socket.once('error', reject);
  });
}

async function joinAll(specs) {
  const sockets = [];
  for (let i = 0; i < specs.length; i += 100) {
    sockets.push(...(await Promise.all(specs.slice(i, i + 100).map(join))));
  }
  return sockets;
}

function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = Float64Array.from(values).sort();
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] * 100) / 100;
}

const say = (id, text) => JSON.stringify({ type: 'say', v: 1, clientMessageId: id, text });

async function latency([members, senders, rate, seconds]) {
  [members, senders, rate, seconds] = [Number(members), Number(senders), Number(rate), Number(seconds)];
  senders = Math.min(senders, members);
  const cpuStart = serverCPU();
  const sockets = await joinAll(Array.from({ length: members }, (_, i) => `${nodes[i % nodes.length]}/chat/${room}?name=m${i}`));
  const perSender = Math.floor(rate * seconds);
  const expected = senders * perSender;
  const cross = [];
  const every = [];
  let duplicates = 0;
  let complete = 0;
  const seen = sockets.map(() => new Set());
  // Presence frames for the last joins may still be on their way: let them settle.
  await new Promise((resolve) => setTimeout(resolve, 500));
  const cpuJoined = serverCPU();
  const loadJoined = process.cpuUsage();
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  sockets.forEach((socket, i) => {
    socket.on('message', (data) => {
      const text = data.toString();
      if (!text.includes('"type":"message"')) return;
      const arrived = now();
      const start = text.indexOf('"text":"') + 8;
      const [sentAt, senderNode, id] = text.slice(start, text.indexOf('"', start)).split(' ');
      if (seen[i].has(id)) { duplicates++; return; }
      seen[i].add(id);
      const ms = arrived - Number(sentAt);
      every.push(ms);
      if (Number(senderNode) !== i % nodes.length) cross.push(ms);
      if (seen[i].size === expected && ++complete === members) finish();
    });
  });
  const begin = now() + 1000;
  for (let s = 0; s < senders; s++) {
    for (let k = 0; k < perSender; k++) {
      const at = begin + ((k + s / senders) * 1000) / rate;
      setTimeout(() => sockets[s].send(say(`s${s}-${k}`, `${now()} ${s % nodes.length} s${s}-${k}`)), at - now());
    }
  }
  const limit = setTimeout(finish, seconds * 1000 + 20000);
  await done;
  clearTimeout(limit);
  const cpuEnd = serverCPU();
  const load = process.cpuUsage(loadJoined);
  sockets.forEach((socket) => socket.terminate());
  return {
    server_cpu_join_s: cpuJoined - cpuStart, server_cpu_steady_s: cpuEnd - cpuJoined,
    // The generator's own CPU in the steady phase (user + system), to show it is not the bottleneck.
    load_cpu_steady_s: (load.user + load.system) / 1e6,
    mode: 'latency', nodes: nodes.length, members, messages: expected, deliveries: every.length,
    expected_deliveries: expected * members, members_short: seen.filter((s) => s.size < expected).length,
    duplicates, cross_node_p50_ms: percentile(cross, 50), cross_node_p99_ms: percentile(cross, 99),
    all_p50_ms: percentile(every, 50), all_p99_ms: percentile(every, 99),
  };
}

async function throughput([rooms, perRoom, senders, window, seconds]) {
  [rooms, perRoom, senders, window, seconds] = [Number(rooms), Number(perRoom), Number(senders), Number(window), Number(seconds)];
  const specs = [];
  for (let r = 0; r < rooms; r++) {
    for (let m = 0; m < perRoom; m++) specs.push({ room: `${room}-${r}`, url: `${nodes[m % nodes.length]}/chat/${room}-${r}?name=m${m}`, sender: m < senders });
  }
  const sockets = await joinAll(specs.map((s) => s.url));
  const acked = {};
  // Members the server closed during the run (a slow consumer past its queue, or 1013 when the
  // store failed), by close code: a closed sender's messages in flight are never acknowledged.
  const closed = {};
  let received = 0;
  let end = Infinity;
  let ended = false;
  let running = 0;
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  sockets.forEach((socket, i) => {
    const spec = specs[i];
    let inflight = 0;
    let sent = 0;
    let dead = false;
    let finished = false;
    const pump = () => {
      while (!dead && inflight < window && now() < end) { socket.send(say(`${i}-${sent++}`, 'x'.repeat(32))); inflight++; }
      if ((inflight === 0 || dead) && !finished) { finished = true; if (--running === 0) finish(); }
    };
    socket.on('message', (data) => {
      const text = data.toString();
      if (text.includes('"type":"ack"')) {
        inflight--;
        if (now() < end) acked[spec.room] = (acked[spec.room] || 0) + 1;
        pump();
      } else if (text.includes('"type":"message"')) {
        received++;
      }
    });
    socket.on('close', (code) => {
      if (ended) return;
      closed[code] = (closed[code] || 0) + 1;
      if (spec.sender) { dead = true; pump(); }
    });
    if (spec.sender) running++;
    spec.pump = pump;
  });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  end = now() + seconds * 1000;
  specs.forEach((spec) => { if (spec.sender) spec.pump(); });
  await done;
  ended = true;
  sockets.forEach((socket) => socket.terminate());
  const perRoomRates = {};
  for (const [name, count] of Object.entries(acked)) perRoomRates[name] = Math.round(count / seconds);
  return {
    mode: 'throughput', nodes: nodes.length, members: sockets.length, rooms, senders_per_room: senders, window,
    messages_per_second_per_room: perRoomRates,
    messages_per_second_total: Math.round(Object.values(acked).reduce((a, b) => a + b, 0) / seconds),
    deliveries: received,
    closed_by_server: closed,
  };
}

(mode === 'latency' ? latency(rest) : throughput(rest))
  .then((result) => { console.log(JSON.stringify(result)); process.exit(0); })
  .catch((error) => { console.error(error); process.exit(1); });
