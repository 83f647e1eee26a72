// The status bar at the foot of the page: the panel socket's latency,
// measured with the panel protocol's `ping` / `pong` (one ping in flight;
// `pong` carries no correlation id, so the round trip is the time from the
// ping to the next pong), and the "technical details" switch, which adds
// protocol identifiers (transcript epoch, replay cursor, worker identity,
// the mode the worker reports) here and exact figures elsewhere. The
// switch is kept in localStorage.

import { $, h, setChildren, shortId, fmtTime } from './dom.js';
import { state, panel, send, render } from './state.js';

const DETAILS_KEY = 'simplex-hub:details';
/** Automatic pings while the socket is open and the page visible. */
const PING_EVERY_MS = 15000;
/** A ping without a pong after this long is reported as unanswered. */
const PING_TIMEOUT_MS = 10000;

const latency = {
  /** performance.now() of the ping in flight, or null. */
  sentAt: null,
  /** The last measured round trip in ms, or null. */
  rtt: null,
  /** When it was measured (ISO). */
  at: null,
  /** The last ping went unanswered. */
  lost: false,
  timer: null,
};

let details = false;

export function detailsShown() {
  return details;
}

export function setDetails(on) {
  details = Boolean(on);
  try {
    if (details) localStorage.setItem(DETAILS_KEY, '1');
    else localStorage.removeItem(DETAILS_KEY);
  } catch {
    /* storage unavailable */
  }
  document.body.classList.toggle('details', details);
  $('details-toggle').checked = details;
  render();
}

export function toggleDetails() {
  setDetails(!details);
}

/** The last round trip, for the palette's hint: "3 ms", or null. */
export function latencyText() {
  return latency.rtt === null ? null : `${latency.rtt} ms`;
}

/** Sends one `ping` unless one is in flight. Returns whether it was sent. */
export function ping() {
  if (latency.sentAt !== null) return false;
  if (!send({ type: 'ping' })) return false;
  latency.sentAt = performance.now();
  clearTimeout(latency.timer);
  latency.timer = setTimeout(() => {
    if (latency.sentAt === null) return;
    latency.sentAt = null;
    latency.lost = true;
    render();
  }, PING_TIMEOUT_MS);
  render();
  return true;
}

/** The hub's `pong`. */
export function onPong() {
  if (latency.sentAt === null) return; // an unanswered ping's late pong, or one not ours
  latency.rtt = Math.max(0, Math.round(performance.now() - latency.sentAt));
  latency.at = new Date().toISOString();
  latency.sentAt = null;
  latency.lost = false;
  clearTimeout(latency.timer);
}

/** The socket changed state: a new connection is measured at once; a closed one voids the ping. */
export function onSocketStateForLatency(s) {
  if (s === 'open') {
    latency.sentAt = null;
    latency.lost = false;
    ping();
  } else {
    latency.sentAt = null;
    clearTimeout(latency.timer);
  }
}

function latencyLine() {
  const open = panel.socket && panel.socket.isOpen();
  if (!open) return { text: 'Socket latency: not connected', cls: 'muted' };
  if (latency.lost) return { text: `Socket latency: no pong within ${PING_TIMEOUT_MS / 1000} s`, cls: 'warn-text' };
  if (latency.rtt === null) return { text: 'Socket latency: measuring…', cls: 'muted' };
  const cls = latency.rtt > 1000 ? 'warn-text' : '';
  return { text: `Socket latency: ${latency.rtt} ms`, cls, title: `Round trip of the last ping, at ${fmtTime(latency.at)}` };
}

function technical() {
  const rows = [];
  const m = state.meta || {};
  if (m.protocol) rows.push(['protocol', `${m.protocol.name || '?'} v${m.protocol.version ?? '?'}`]);
  rows.push(['transcript epoch', state.epoch ? shortId(state.epoch) : 'unknown']);
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  const v = state.selected ? state.views.get(state.selected) : null;
  if (v) {
    rows.push(['cursor', String(v.cursor)]);
    rows.push(['subscription', v.sub ? (v.sub.done ? 'live' : 'replaying') : 'none']);
  }
  if (desc && desc.identity) rows.push(['worker', `${desc.identity.worker_id ? shortId(desc.identity.worker_id) : 'none'} (${desc.identity.state || '?'})`]);
  const reported = v && v.options && v.options.confirmation && v.options.confirmation.current && v.options.confirmation.current.mode;
  if (reported) rows.push(['worker reports mode', String(reported)]);
  return rows;
}

let sig = null;

export function renderStatusBar() {
  const line = latencyLine();
  const rows = details ? technical() : [];
  const now = JSON.stringify([line, rows]);
  if (now === sig) return;
  sig = now;
  const el = $('sb-latency');
  el.textContent = line.text;
  el.className = `small ${line.cls || ''}`;
  if (line.title) el.title = line.title;
  else el.removeAttribute('title');
  $('ping-now').disabled = !(panel.socket && panel.socket.isOpen());
  const box = $('sb-details');
  box.hidden = !details;
  setChildren(
    box,
    rows.map(([k, val]) => h('span', { class: 'sb-item' }, h('span', { class: 'muted', text: `${k} ` }), h('code', { text: val }))),
  );
}

export function wireStatusBar() {
  try {
    details = localStorage.getItem(DETAILS_KEY) === '1';
  } catch {
    details = false;
  }
  document.body.classList.toggle('details', details);
  $('details-toggle').checked = details;
  $('details-toggle').addEventListener('change', (e) => setDetails(e.target.checked));
  $('ping-now').addEventListener('click', () => ping());
  setInterval(() => {
    if (!document.hidden && panel.socket && panel.socket.isOpen()) ping();
  }, PING_EVERY_MS);
}
