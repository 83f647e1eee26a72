// The hub health view: `GET /api/hub/health` (a simplex-hub extension,
// docs/protocol-panel.md "Hub health") shown in a dialog: the hub's
// memory, threads and descriptors, each panel and Shard connection's
// pending outbound bytes against its budget, and each session's worker
// event rate and retained transcript against its ring.
//
// It costs nothing while closed: the figures are asked for only while the
// dialog is open and the page is visible, one request at a time, the next
// REFRESH_MS after the previous answer. Everything is built with h() and
// textContent (see dom.js).

import { $, h, setChildren, fmtBytes } from './dom.js';
import { api } from './net.js';

/** Time between the end of one refresh and the next request. */
export const REFRESH_MS = 2000;

/** Share of a budget from which a gauge counts as high (and low). */
const HIGH = 0.85;
const LOW = 0.5;

const view = {
  dialog: null,
  status: null,
  body: null,
  timer: null,
  inflight: false,
  samples: 0,
  last: null,
};

/** Shows the header button when the hub has the route, and wires the view. */
export function wireHealth(capabilities) {
  const button = $('health-open');
  if (!Array.isArray(capabilities) || !capabilities.includes('hub-health')) {
    button.hidden = true;
    return;
  }
  if (!view.dialog) build();
  button.hidden = false;
  button.addEventListener('click', openHealth);
  document.addEventListener('visibilitychange', () => {
    if (!view.dialog.open) return;
    if (document.hidden) stop();
    else schedule(0);
  });
}

function build() {
  view.status = h('span', { id: 'health-status', class: 'small muted health-status' });
  view.body = h('div', { id: 'health-body', class: 'health-body' }, h('p', { class: 'muted', text: 'Loading…' }));
  const close = h('button', { type: 'button', id: 'health-close', class: 'secondary small', text: 'Close', onclick: () => view.dialog.close() });
  view.dialog = h(
    'dialog',
    { id: 'dlg-health', class: 'wide health', 'aria-labelledby': 'health-title', dataset: { polling: 'off', samples: '0' } },
    h('div', { class: 'dialog-form' }, h('div', { class: 'health-head' }, h('h2', { id: 'health-title', text: 'Hub health' }), view.status, h('span', { class: 'spacer' }), close), view.body),
  );
  // (The dialog's `open` is what counts: it is false as soon as the
  // dialog closes, before this event is delivered.)
  view.dialog.addEventListener('close', stop);
  document.body.appendChild(view.dialog);
}

export function openHealth() {
  if (!view.dialog || view.dialog.open) return;
  view.dialog.showModal();
  $('health-close').focus();
  schedule(0);
}

function stop() {
  clearTimeout(view.timer);
  view.timer = null;
  view.dialog.dataset.polling = 'off';
}

function schedule(delay) {
  clearTimeout(view.timer);
  view.timer = null;
  if (!view.dialog.open || document.hidden) {
    view.dialog.dataset.polling = 'off';
    return;
  }
  view.dialog.dataset.polling = 'on';
  view.timer = setTimeout(refresh, delay);
}

async function refresh() {
  view.timer = null;
  if (view.inflight || !view.dialog.open) return;
  view.inflight = true;
  let problem = null;
  try {
    const res = await api('GET', '/api/hub/health', undefined, { timeoutMs: 5000 });
    if (res.ok && res.body && typeof res.body === 'object') {
      view.last = res.body;
      view.samples += 1;
      view.dialog.dataset.samples = String(view.samples);
      if (view.dialog.open) render(res.body);
    } else {
      const code = res.body && typeof res.body.error === 'string' ? res.body.error : `HTTP ${res.status}`;
      problem = res.status === 401 ? `${code}: sign in again to see the figures` : code;
    }
  } catch {
    problem = 'the hub did not answer';
  } finally {
    view.inflight = false;
  }
  if (problem) showProblem(problem);
  schedule(REFRESH_MS);
}

function showProblem(text) {
  view.status.textContent = `Could not refresh (${text})${view.last ? '; the figures below are from the last reading' : ''}.`;
  view.status.classList.add('status-error');
  view.body.classList.toggle('stale', Boolean(view.last));
}

// ---------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------

function num(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function count(v) {
  const n = num(v);
  return n === null ? '—' : n.toLocaleString('en-US');
}

function bytes(v) {
  const n = num(v);
  return n === null ? '—' : fmtBytes(n);
}

function percent(ratio) {
  if (ratio === 0) return '0 %';
  if (ratio < 0.001) return '<0.1 %';
  return `${(ratio * 100).toFixed(ratio < 0.1 ? 1 : 0)} %`;
}

function duration(ms) {
  const s = Math.floor((num(ms) ?? 0) / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

function rate(v) {
  const n = num(v);
  if (n === null) return '—';
  return n >= 100 ? n.toFixed(0) : n.toFixed(n >= 10 ? 1 : 2);
}

/** A meter of `value` against `max`, its figures beside it. */
function gauge(value, max, label, format = fmtBytes) {
  const v = num(value) ?? 0;
  const m = num(max) ?? 0;
  const ratio = m > 0 ? Math.min(1, v / m) : 0;
  const level = ratio >= HIGH ? 'high' : ratio >= LOW ? 'mid' : 'low';
  const meter = h('meter', { min: 0, max: m || 1, low: (m || 1) * LOW, high: (m || 1) * HIGH, optimum: 0, 'aria-label': label, value: v });
  return h('span', { class: `gauge gauge-${level}` }, meter, h('span', { class: 'gauge-text', text: `${format(v)} / ${format(m)} · ${percent(ratio)}` }));
}

function card(label, value, detail) {
  return h('div', { class: 'health-card' }, h('dt', { text: label }), h('dd', {}, h('span', { class: 'health-figure', text: value }), detail ? h('span', { class: 'small muted', text: detail }) : null));
}

/** A table; a header ending in '#' heads a column of numbers. */
function table(caption, headers, rows, empty) {
  const head = h('tr', {}, headers.map((t) => (t.endsWith('#') ? h('th', { scope: 'col', class: 'num', text: t.slice(0, -1) }) : h('th', { scope: 'col', text: t }))));
  const body = rows.length ? rows : [h('tr', {}, h('td', { colspan: headers.length, class: 'muted', text: empty }))];
  return h('div', { class: 'health-table-wrap' }, h('table', { class: 'health-table' }, h('caption', { class: 'sr-only', text: caption }), h('thead', {}, head), h('tbody', {}, body)));
}

function omitted(part, what) {
  const n = num(part && part.omitted) ?? 0;
  if (n === 0) return null;
  return h('p', { class: 'small muted', text: `…and ${count(n)} more not listed (${what}).` });
}

function pressure(value, max) {
  const v = num(value) ?? 0;
  const m = num(max) ?? 0;
  return m > 0 && v / m >= HIGH ? 'health-hot' : null;
}

function connectionRows(part, shard) {
  const list = Array.isArray(part && part.connections) ? part.connections : [];
  return list.map((c) => {
    const cells = [h('td', { class: 'mono', text: `#${c.id}` })];
    if (shard) {
      cells.push(h('td', { text: c.transport === 'unix' ? 'unix socket' : c.transport === 'websocket' ? 'WebSocket' : String(c.transport ?? '—') }));
      cells.push(h('td', { class: 'mono', text: typeof c.direct === 'string' ? c.direct : '—' }));
    } else {
      cells.push(h('td', { class: 'num', text: count(c.subscriptions) }));
    }
    cells.push(h('td', { class: 'num', text: count(c.queued_items) }));
    cells.push(h('td', {}, gauge(c.pending_bytes, c.budget_bytes, `Pending bytes of connection ${c.id}`)));
    return h('tr', { class: pressure(c.pending_bytes, c.budget_bytes), dataset: { connection: String(c.id) } }, cells);
  });
}

function workerRows(workers) {
  const list = Array.isArray(workers && workers.sessions) ? workers.sessions : [];
  return list.map((w) => {
    const proc = typeof w.process === 'string' ? w.process : 'not started';
    return h(
      'tr',
      { class: pressure(w.retained_bytes, w.retained_bytes_budget), dataset: { session: String(w.session) } },
      h('th', { scope: 'row', class: 'mono' }, String(w.session), w.kind === 'headless' ? h('span', { class: 'badge', text: 'headless' }) : null),
      h('td', { text: proc }),
      h('td', { text: w.connected ? 'connected' : '—' }),
      h('td', { class: 'num health-rate', text: rate(w.events_per_second) }),
      h('td', { class: 'num health-events', text: count(w.events_total) }),
      h('td', {}, gauge(w.retained_bytes, w.retained_bytes_budget, `Retained transcript bytes of ${w.session}`)),
      h('td', { class: 'num', text: `${count(w.retained_events)} / ${count(w.retained_events_budget)}` }),
      h('td', { class: 'num', text: count(w.evicted_events) }),
    );
  });
}

function render(data) {
  const p = data.process && typeof data.process === 'object' ? data.process : null;
  const hub = data.hub || {};
  const panels = data.panels || {};
  const shard = data.shard || {};
  const workers = data.workers || {};
  const at = new Date(hub.sampled_at);
  view.status.textContent = `Updated ${Number.isNaN(at.getTime()) ? '' : at.toLocaleTimeString()} · every ${REFRESH_MS / 1000} s while open`;
  view.status.classList.remove('status-error');
  view.body.classList.remove('stale');

  const errors = (Array.isArray(data.errors) ? data.errors : []).map((e) =>
    h('p', { class: 'health-error small', role: 'note' }, h('span', { class: 'mono', text: String(e.error ?? 'error') }), ` ${e.part ?? ''}: ${e.message ?? ''}`),
  );
  const fdDetail = p && num(p.fd_limit) !== null ? `of ${count(p.fd_limit)}` : null;
  const cards = h(
    'dl',
    { id: 'health-process', class: 'health-cards' },
    card('Memory (RSS)', p ? bytes(p.rss_bytes) : '—', p && num(p.peak_rss_bytes) !== null ? `peak ${bytes(p.peak_rss_bytes)}` : null),
    card('Threads', p ? count(p.threads) : '—'),
    card('Open descriptors', p ? count(p.open_fds) : '—', fdDetail),
    card('Uptime', duration(hub.uptime_ms), hub.pid ? `pid ${hub.pid}` : null),
    card('Worker events', `${rate(workers.events_per_second)}/s`, workers.count === 1 ? '1 session' : `${count(workers.count)} sessions`),
    card('Retained transcripts', bytes(workers.retained_bytes)),
  );
  setChildren(
    view.body,
    errors,
    cards,
    h('h3', { text: `Panel connections (${count(panels.count)})` }),
    h('p', { class: 'small muted', text: `Pending: bytes queued for a connection and not yet written. A panel whose pending bytes would pass its budget is disconnected. Together: ${bytes(panels.pending_bytes)}.` }),
    h('section', { id: 'health-panels' }, table('Panel connections', ['Connection', 'Subscriptions#', 'Queued#', 'Pending / budget'], connectionRows(panels, false), 'No panel connections.'), omitted(panels, 'the ones with the most pending bytes are shown')),
    h('h3', { text: `Shard connections (${count(shard.count)})` }),
    h('section', { id: 'health-shard' }, table('Shard connections', ['Connection', 'Transport', 'Direct agent', 'Queued#', 'Pending / budget'], connectionRows(shard, true), 'No Shard connections.'), omitted(shard, 'the ones with the most pending bytes are shown')),
    h('h3', { text: `Workers (${count(workers.count)})` }),
    h('p', { class: 'small muted', text: `Events per second over the last ${Math.round((num(workers.window_ms) ?? 10000) / 1000)} s; retained: the transcript the hub keeps for replay, against its ring's bounds.` }),
    h('section', { id: 'health-workers' }, table('Workers', ['Session', 'Process', 'Worker', 'Events/s#', 'Events#', 'Retained / budget', 'Entries#', 'Evicted#'], workerRows(workers), 'No sessions.'), omitted(workers, 'the busiest are shown')),
  );
}
