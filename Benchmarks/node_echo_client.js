// The Node `ws` client side of Benchmarks/client_peers.sh: node node_echo_client.js URL MESSAGES CONNECTIONS
const WebSocket = require('/usr/share/nodejs/ws');
const [url, total, connections] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const per = Math.floor(total / connections);
const payload = 'x'.repeat(64);
function pump() {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { perMessageDeflate: false });
    let seen = 0;
    socket.on('open', () => { for (let i = 0; i < per; i++) socket.send(payload); });
    socket.on('message', () => { if (++seen === per) { socket.close(); resolve(); } });
    socket.on('error', reject);
  });
}
const start = process.hrtime.bigint();
Promise.all(Array.from({ length: connections }, pump)).then(() => {
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log('node-ws', connections, Math.round((per * connections) / seconds));
});
