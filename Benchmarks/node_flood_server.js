// A flood server on Node `ws` for the slow-consumer benchmark (Benchmarks/slow_consumer.sh):
// each connection to /?bytes=N gets N bytes in 64 KiB binary messages, each starting with its
// sequence number (4 bytes, big-endian), sent as fast as TCP takes them (ws's bufferedAmount is
// kept under 1 MiB, so the server itself stays bounded). Prints its URL.
const { WebSocketServer } = require('/usr/share/nodejs/ws');
const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
const size = 64 * 1024;
server.on('connection', (socket, request) => {
  const total = Number(new URL(request.url, 'http://x').searchParams.get('bytes') || 1 << 30);
  const count = Math.ceil(total / size);
  let seq = 0;
  const pump = () => {
    while (seq < count && socket.bufferedAmount < 1 << 20) {
      const message = Buffer.alloc(size);
      message.writeUInt32BE(seq++, 0);
      socket.send(message, { binary: true });
    }
    if (seq < count) socket._socket.once('drain', pump);
  };
  pump();
});
server.on('listening', () => console.log(`ws://127.0.0.1:${server.address().port}/`));
