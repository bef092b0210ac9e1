// An echo server on Node `ws` (Debian node-ws), for Benchmarks/client_peers.sh and
// server_echo.sh: prints its URL. With DUPLEX_TLS_CERT and DUPLEX_TLS_KEY (PEM files) it serves
// wss:// through Node's https module.
const { WebSocketServer } = require('/usr/share/nodejs/ws');
const fs = require('fs');
const options = { perMessageDeflate: false, maxPayload: 1 << 20 };
let server;
if (process.env.DUPLEX_TLS_CERT) {
  const https = require('https').createServer({ cert: fs.readFileSync(process.env.DUPLEX_TLS_CERT), key: fs.readFileSync(process.env.DUPLEX_TLS_KEY) });
  server = new WebSocketServer({ server: https, ...options });
  https.listen(0, '127.0.0.1', () => console.log(`wss://127.0.0.1:${https.address().port}/`));
} else {
  server = new WebSocketServer({ host: '127.0.0.1', port: 0, ...options });
  server.on('listening', () => console.log(`ws://127.0.0.1:${server.address().port}/`));
}
server.on('connection', (socket) => {
  socket.on('message', (data, isBinary) => socket.send(data, { binary: isBinary }));
});
