// An echo server on Node `ws` (Debian node-ws), for Benchmarks/client_peers.sh: prints its URL.
const { WebSocketServer } = require('/usr/share/nodejs/ws');
const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false, maxPayload: 1 << 20 });
server.on('connection', (socket) => {
  socket.on('message', (data, isBinary) => socket.send(data, { binary: isBinary }));
});
server.on('listening', () => console.log(`ws://127.0.0.1:${server.address().port}/`));
