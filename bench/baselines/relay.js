// Baseline for docs/benchmarks.md: the minimal work of a Node.js hub per
// worker event, with the `ws` library (as the Node Simplex Hub uses).
//
// Per event: JSON.parse the envelope, assign a per-session sequence, keep a
// ring bounded by count and bytes (5000 entries / 32 MiB, the hub's
// defaults), serialize the entry and the `event` frame once, and send that
// one buffer to every live subscriber, after charging a 4 MiB per-panel
// budget (`bufferedAmount`): a panel that would exceed it is terminated.
//
// It speaks just enough of the hub's wire shapes that the same load tools
// drive both servers:
//   POST /api/sessions {session}            -> 201 (any worker token works)
//   GET  /api/sessions/:id                  -> {session}
//   WS   /agent/<id>/events?token=...       -> the worker's event socket
//   WS   /panel/ws                          -> welcome; subscribe -> subscribed;
//                                              then event {session, hub_seq, envelope}
// and prints `panel: http://ADDR` on stderr when it listens.
//
// Usage: node relay.js [--listen 127.0.0.1:0]

'use strict';

const http = require('http');
const { WebSocketServer } = require('ws');

const BUDGET = 4 * 1024 * 1024;
const RING_EVENTS = 5000;
const RING_BYTES = 32 * 1024 * 1024;

let listen = '127.0.0.1:0';
for (let i = 2; i < process.argv.length; i++) {
  if (process.argv[i] === '--listen') listen = process.argv[++i];
}
const colon = listen.lastIndexOf(':');
const host = listen.slice(0, colon);
const port = Number(listen.slice(colon + 1));

/** @type {Map<string, {seq: number, ring: string[], ringBytes: number, panels: Set<any>}>} */
const sessions = new Map();

function session(id) {
  let s = sessions.get(id);
  if (!s) {
    s = { seq: 0, ring: [], ringBytes: 0, panels: new Set() };
    sessions.set(id, s);
  }
  return s;
}

function wireCost(len) {
  return len + (len < 126 ? 2 : len < 65536 ? 4 : 10);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'POST' && url.pathname === '/api/sessions') {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      let id;
      try { id = JSON.parse(body).session; } catch (_) { id = undefined; }
      if (typeof id !== 'string') {
        res.writeHead(400, { 'content-type': 'application/json' });
        return res.end('{"error":"invalid_session"}');
      }
      session(id);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ session: { session_id: id } }));
    });
    return;
  }
  const m = /^\/api\/sessions\/([^/]+)$/.exec(url.pathname);
  if (req.method === 'GET' && m && sessions.has(m[1])) {
    const s = sessions.get(m[1]);
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ session: { session_id: m[1], latest: s.seq } }));
  }
  res.writeHead(404, { 'content-type': 'application/json' });
  res.end('{"error":"not_found"}');
});

const wss = new WebSocketServer({ noServer: true, maxPayload: 32 * 1024 * 1024 });

server.on('upgrade', (req, socket, head) => {
  const url = new URL(req.url, 'http://x');
  const agent = /^\/agent\/([^/]+)\/events$/.exec(url.pathname);
  if (agent) {
    wss.handleUpgrade(req, socket, head, (ws) => onWorker(ws, agent[1]));
  } else if (url.pathname === '/panel/ws') {
    wss.handleUpgrade(req, socket, head, (ws) => onPanel(ws));
  } else {
    socket.destroy();
  }
});

function onWorker(ws, id) {
  const s = session(id);
  const sessionJson = JSON.stringify(id);
  ws.on('error', () => {});
  ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    let env;
    try { env = JSON.parse(data); } catch (_) { return; }
    if (env === null || typeof env !== 'object' || env.type !== 'event') return;
    const seq = ++s.seq;
    env.hub_sequence = seq;
    env.received_at = new Date().toISOString();
    const entry = JSON.stringify(env);
    s.ring.push(entry);
    s.ringBytes += entry.length;
    while (s.ring.length > RING_EVENTS || s.ringBytes > RING_BYTES) {
      s.ringBytes -= s.ring.shift().length;
    }
    const frame = Buffer.from(
      '{"v":1,"type":"event","session":' + sessionJson + ',"hub_seq":' + seq + ',"envelope":' + entry + '}');
    const cost = wireCost(frame.length);
    for (const panel of s.panels) {
      if (panel.bufferedAmount + cost > BUDGET) {
        console.error(`panel: outbound budget exceeded (${panel.bufferedAmount} bytes pending + ${cost} > ${BUDGET}); terminating`);
        s.panels.delete(panel);
        panel.terminate();
        continue;
      }
      panel.send(frame, { binary: false });
    }
  });
}

function onPanel(ws) {
  const subscribed = new Set();
  ws.on('error', () => {});
  ws.send(JSON.stringify({ v: 1, type: 'welcome', hub: { name: 'node-relay' }, sessions: [] }));
  ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    let msg;
    try { msg = JSON.parse(data); } catch (_) { return; }
    if (msg && msg.type === 'subscribe' && typeof msg.session === 'string') {
      const s = session(msg.session);
      s.panels.add(ws);
      subscribed.add(msg.session);
      ws.send(JSON.stringify({
        v: 1, type: 'subscribed', session: { session_id: msg.session },
        transcript: [], latest: s.seq,
      }));
    }
  });
  ws.on('close', () => {
    for (const id of subscribed) session(id).panels.delete(ws);
  });
}

server.listen(port, host, () => {
  const a = server.address();
  console.error(`panel: http://${a.address}:${a.port}`);
});

function stop() {
  for (const c of wss.clients) c.terminate();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
