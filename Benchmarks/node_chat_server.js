// A Node `ws` broadcast server speaking the part of the Duplex chat protocol that
// Benchmarks/chat_load.js uses, as a peer for chat fan-out: welcome on join (with the members
// present), a `joined` broadcast to the room (the new member too) and a `left` one on close, as
// duplex-server announces presence; then each `say` is numbered, broadcast to the room as a
// `message` (to the sender too) and acknowledged. Kept as lean as a hand-written Node server
// would be: no history, no resume, no limits.
//
//   node node_chat_server.js PORT      # prints "listening on PORT" when ready
const WebSocket = require('/usr/share/nodejs/ws');
const { randomUUID } = require('crypto');
const port = Number(process.argv[2] || 0);
const rooms = new Map(); // name -> { seq, members: Set<socket> }
const server = new WebSocket.Server({ host: '127.0.0.1', port, perMessageDeflate: false }, () => {
  console.log(`listening on ${server.address().port}`);
});
server.on('connection', (socket, request) => {
  const url = new URL(request.url, 'http://localhost');
  const match = url.pathname.match(/^\/chat\/([A-Za-z0-9._-]{1,64})$/);
  const name = url.searchParams.get('name');
  if (!match || !name) { socket.close(1008, 'bad join'); return; }
  const roomName = match[1];
  if (!rooms.has(roomName)) rooms.set(roomName, { seq: 0, members: new Set() });
  const room = rooms.get(roomName);
  room.members.add(socket);
  socket.memberName = name;
  const session = randomUUID();
  const members = [...room.members].map((member) => member.memberName).sort();
  socket.send(JSON.stringify({ type: 'welcome', v: 1, room: roomName, name, latestSeq: room.seq, members }));
  const presence = (type) => {
    const frame = JSON.stringify({ at: new Date().toISOString(), name, room: roomName, seq: ++room.seq, session, type, v: 1 });
    for (const member of room.members) member.send(frame);
  };
  presence('joined');
  socket.on('message', (data) => {
    let frame;
    try { frame = JSON.parse(data.toString()); } catch { return; }
    if (frame.type !== 'say') return;
    const seq = ++room.seq;
    const message = JSON.stringify({
      clientMessageId: frame.clientMessageId, from: name, room: roomName, sentAt: new Date().toISOString(),
      seq, text: frame.text, type: 'message', v: 1,
    });
    for (const member of room.members) member.send(message);
    socket.send(JSON.stringify({ clientMessageId: frame.clientMessageId, duplicate: false, seq, type: 'ack', v: 1 }));
  });
  socket.on('close', () => { room.members.delete(socket); presence('left'); });
});
