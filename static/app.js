// The operator panel: sign-in, the panel socket, session list and
// controls, transcript, composer, approvals tray and inspector.
// Untrusted text is only ever set with textContent (see dom.js).

import { h, setChildren, uuid, fmtTime } from './dom.js';
import { api, takeTokenFromUrl, storeToken, PanelSocket } from './net.js';
import { View, Notices, AGGREGATE_BYTES, MAX_VIEWS, emptyHistory } from './views.js';
import { renderTranscript } from './transcript.js';
import { Approvals } from './approvals.js';
import { renderInspector, TABS, HeadlessView, isHeadless, parentOf, lifecycleBadge, childLabel } from './inspector.js';

const $ = (id) => document.getElementById(id);

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;
const ACTIVE_EVENTS = new Set(['input_admitted', 'run_started', 'input_committed', 'model_response', 'tool_calls', 'tool_results']);
const LIVE_PROCESS = new Set(['starting', 'running', 'stopping']);
const HISTORY_PAGE_MS = 10000;

const state = {
  meta: null,
  epoch: null,
  pages: false,
  sessions: new Map(),
  selected: null,
  views: new Map(),
  notices: new Notices(),
  conn: 'starting',
  connDetail: '',
  busy: new Map(), // session -> worker action in flight
  policyPending: new Map(), // headless session -> {policy, requestId}
  creating: null,
  subSeq: 0,
  histSeq: 0,
  follow: true,
  tab: 'run',
  inspectorOpen: true,
  drawer: null,
  started: false,
};

const inspectorCache = { sig: null };
let socket = null;
let approvals = null;
let headlessView = null;
let policySeq = 0;

// ---------------------------------------------------------------------------
// Rendering schedule
// ---------------------------------------------------------------------------

let renderQueued = false;
function render() {
  if (renderQueued) return;
  renderQueued = true;
  const run = () => {
    if (!renderQueued) return;
    renderQueued = false;
    renderAll();
  };
  requestAnimationFrame(run);
  setTimeout(run, 150); // rAF pauses in hidden tabs
}

function renderAll() {
  renderConn();
  renderNotices();
  renderSessions();
  renderHeader();
  renderViewNotices();
  renderMain();
  renderComposer();
  renderInspectorColumn();
  approvals.render($('tray'), $('tray-list'), $('tray-count'), state.selected);
  followLatest(); // after everything that changes the transcript's size
  const n = approvals.visibleCount();
  document.title = n ? `(${n}) simplex-hub` : 'simplex-hub';
}

// ---------------------------------------------------------------------------
// Toasts and notices
// ---------------------------------------------------------------------------

function toast(text, kind = 'info') {
  const box = $('toasts');
  const el = h('div', { class: `toast toast-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('span', { text }), h('button', { type: 'button', class: 'link small', 'aria-label': 'Dismiss', text: '×', onclick: () => el.remove() }));
  box.appendChild(el);
  while (box.children.length > 5) box.firstElementChild.remove();
  setTimeout(() => el.remove(), kind === 'error' ? 12000 : 6000);
}

function noticeList(container, notices, cache) {
  if (cache.v === notices.v) return;
  cache.v = notices.v;
  setChildren(
    container,
    notices.list.map((n) =>
      h(
        'div',
        { class: `notice notice-${n.kind}`, role: 'note' },
        h('span', { text: n.text }),
        h('span', { class: 'muted small', text: ` ${fmtTime(n.at)} ` }),
        h('button', {
          type: 'button',
          class: 'link small',
          text: 'Dismiss',
          onclick: () => {
            notices.dismiss(n.id);
            render();
          },
        }),
      ),
    ),
  );
}

const globalNoticeCache = { v: -1 };
function renderNotices() {
  noticeList($('notices'), state.notices, globalNoticeCache);
}

const viewNoticeCache = { v: -1, id: null };
function renderViewNotices() {
  const v = state.selected ? state.views.get(state.selected) : null;
  const box = $('view-notices');
  if (!v) {
    box.replaceChildren();
    viewNoticeCache.id = null;
    return;
  }
  if (viewNoticeCache.id !== v.id) {
    viewNoticeCache.id = v.id;
    viewNoticeCache.v = -1;
  }
  noticeList(box, v.notices, viewNoticeCache);
}

// ---------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------

let connTimer = null;
function renderConn() {
  const el = $('conn');
  const s = socket ? socket.state : 'starting';
  let text;
  let cls = s;
  if (state.conn === 'hub-unreachable') {
    text = 'hub unreachable';
    cls = 'waiting';
  } else if (s === 'open') text = 'connected';
  else if (s === 'connecting') text = socket.attempt > 1 ? 'reconnecting…' : 'connecting…';
  else if (s === 'waiting') {
    const secs = Math.max(0, Math.ceil((socket.retryAt - Date.now()) / 1000));
    text = `disconnected · retry in ${secs}s`;
  } else if (s === 'rejected') text = 'sign-in required';
  else text = 'starting…';
  if (el.textContent !== text) el.textContent = text;
  el.className = `conn conn-${cls}`;
  $('reconnect').hidden = s !== 'waiting';
  $('signin-open').hidden = s !== 'rejected';
  clearTimeout(connTimer);
  if (s === 'waiting') connTimer = setTimeout(renderConn, 1000);
}

function onSocketState(s) {
  if (s !== 'open') {
    if (state.started) onDisconnected();
  }
  if (s === 'rejected') showSignIn('The hub refused the panel token.');
  render();
}

function onDisconnected() {
  state.started = false;
  approvals.onDisconnect();
  for (const v of state.views.values()) {
    v.sub = null;
    v.ready = false;
    if (v.history.state === 'loading') {
      v.history.state = 'error';
      v.history.error = 'the panel connection dropped';
      v.history.pending = null;
    }
    for (const o of v.outbox.values()) {
      if (o.state === 'sending') {
        o.state = 'unknown';
      }
    }
  }
  for (const [session, action] of state.busy) {
    toast(`The connection dropped while “${action}” was running for ${session}; check the session state.`, 'warn');
  }
  state.busy.clear();
}

async function checkAuth() {
  const res = await api('GET', '/api/sessions');
  return res.status === 401;
}

function send(msg) {
  return socket ? socket.send(msg) : false;
}

// ---------------------------------------------------------------------------
// Sessions and views
// ---------------------------------------------------------------------------

function upsertSession(desc, authoritative = false) {
  if (!desc || typeof desc.session_id !== 'string') return;
  const prev = state.sessions.get(desc.session_id);
  state.sessions.set(desc.session_id, desc);
  approvals.syncSession(desc.session_id, desc.confirmations, authoritative);
  const v = state.views.get(desc.session_id);
  if (v) {
    if (prev && prev.connected && !desc.connected) v.activeRun = null;
    maybeLoadHistory(v);
  }
}

function processActive(desc) {
  return Boolean(desc && desc.process && LIVE_PROCESS.has(desc.process.state));
}

function busyReason(desc) {
  if (!desc) return null;
  if (processActive(desc)) return `the worker process is ${desc.process.state}`;
  if (desc.connected) return 'a worker is connected';
  return null;
}

function runActive(desc) {
  if (isHeadless(desc)) return Boolean(desc.subagent && desc.subagent.active_run);
  const v = state.views.get(desc.session_id);
  if (v && v.ready) return v.runActive();
  return Boolean(desc.connected && ACTIVE_EVENTS.has(desc.last_event));
}

function processBadge(desc) {
  const p = desc.process;
  if (!p) return { text: 'not started', cls: 'idle' };
  switch (p.state) {
    case 'running':
      return { text: `running · pid ${p.pid}`, cls: 'ok' };
    case 'starting':
      return { text: 'starting…', cls: 'busy' };
    case 'stopping':
      return { text: 'stopping…', cls: 'busy' };
    case 'exited':
      if (p.signal) return { text: `exited (${p.signal})`, cls: 'warn' };
      if (p.exit_code === null || p.exit_code === undefined) return { text: 'exited (status unknown)', cls: 'warn' };
      return { text: `exited (${p.exit_code})`, cls: p.exit_code === 0 ? 'idle' : 'warn' };
    case 'failed':
      return { text: `failed${p.error ? `: ${p.error}` : ''}`, cls: 'bad' };
    default:
      return { text: String(p.state), cls: 'idle' };
  }
}

function badges(desc) {
  const out = [];
  if (isHeadless(desc)) {
    out.push(h('span', { class: 'badge badge-headless', title: 'A subagent forked and driven by its parent worker', text: 'headless' }));
    const sub = desc.subagent || {};
    if (sub.lifecycle !== 'ready') {
      const lb = lifecycleBadge(desc);
      out.push(h('span', { class: `badge badge-${lb.cls}`, title: 'subagent lifecycle', text: lb.text }));
    }
    if (sub.health === 'degraded') out.push(h('span', { class: 'badge badge-warn', text: 'degraded' }));
  }
  const pb = processBadge(desc);
  out.push(h('span', { class: `badge badge-${pb.cls}`, text: pb.text }));
  out.push(h('span', { class: `badge ${desc.connected ? 'badge-ok' : 'badge-idle'}`, text: desc.connected ? 'worker attached' : 'no worker' }));
  if (runActive(desc)) out.push(h('span', { class: 'badge badge-busy', text: 'run active' }));
  const n = approvals.count(desc.session_id);
  if (n) out.push(h('span', { class: 'badge badge-attn', text: `${n} approval${n === 1 ? '' : 's'}` }));
  const busy = state.busy.get(desc.session_id);
  if (busy) out.push(h('span', { class: 'badge badge-busy', text: `${busy}…` }));
  return out;
}

/**
 * List order: sessions by id, each headless child right after its parent
 * (children of children after theirs).
 */
function listKey(id) {
  const parts = [];
  let cur = id;
  for (let depth = 0; depth < 20 && cur; depth++) {
    parts.unshift(cur);
    const d = state.sessions.get(cur);
    cur = isHeadless(d) ? parentOf(d) : null;
  }
  return parts.join('\u0000');
}

const sessionEls = new Map();
function renderSessions() {
  const list = $('session-list');
  const keys = new Map([...state.sessions.keys()].map((id) => [id, listKey(id)]));
  const ids = [...state.sessions.keys()].sort((a, b) => keys.get(a).localeCompare(keys.get(b)));
  $('session-empty').hidden = ids.length > 0 || !state.meta;
  const desired = [];
  for (const id of ids) {
    const desc = state.sessions.get(id);
    let item = sessionEls.get(id);
    if (!item) {
      const button = h('button', { type: 'button', class: 'session-item', dataset: { session: id }, onclick: () => select(id) });
      item = { li: h('li', null, button), button, sig: null };
      sessionEls.set(id, item);
    }
    const sig = JSON.stringify([desc.process, desc.connected, runActive(desc), approvals.count(id), state.busy.get(id), state.selected === id, desc.spec && desc.spec.model, desc.subagent]);
    if (sig !== item.sig) {
      item.sig = sig;
      if (state.selected === id) item.button.setAttribute('aria-current', 'true');
      else item.button.removeAttribute('aria-current');
      if (isHeadless(desc)) {
        item.li.classList.add('child');
        item.button.title = id;
        setChildren(
          item.button,
          h('span', { class: 'session-name', text: childLabel(id) }),
          h('span', { class: 'session-parent muted small', text: `child of ${parentOf(desc) || 'an unknown parent'}` }),
          h('span', { class: 'badges' }, badges(desc)),
        );
      } else {
        setChildren(item.button, h('span', { class: 'session-name', text: id }), h('span', { class: 'badges' }, badges(desc)));
      }
    }
    desired.push(item.li);
  }
  for (const id of [...sessionEls.keys()]) if (!state.sessions.has(id)) sessionEls.delete(id);
  const cur = list.children;
  for (let i = 0; i < desired.length; i++) if (cur[i] !== desired[i]) list.insertBefore(desired[i], cur[i] || null);
  while (list.children.length > desired.length) list.lastElementChild.remove();
}

function ensureView(id) {
  let v = state.views.get(id);
  if (!v) {
    v = new View(id);
    v.logsV = 0;
    v.snapshotV = 0;
    state.views.set(id, v);
    limitViews();
  }
  return v;
}

function limitViews() {
  const live = [...state.views.values()].filter((v) => !v.evicted && v.id !== state.selected);
  live.sort((a, b) => a.lastUsed - b.lastUsed);
  while (live.length + 1 > MAX_VIEWS) evict(live.shift(), 'only the most recent sessions are kept live');
}

function evict(v, why) {
  if (v.sub) send({ type: 'unsubscribe', session: v.id });
  v.clear();
  v.history = emptyHistory();
  v.historyUser = new Map();
  v.evicted = true;
  v.sub = null;
  v.logs = null;
  v.notices.add('evict', `This session’s display copy was evicted (${why}); it is replayed from the hub when you select it again.`);
}

/** Keeps the display copies of all views within the aggregate budget. */
function enforceBudget() {
  let total = 0;
  for (const v of state.views.values()) total += v.totalBytes();
  if (total <= AGGREGATE_BYTES) return;
  const candidates = [...state.views.values()].filter((v) => !v.evicted && v.id !== state.selected).sort((a, b) => a.lastUsed - b.lastUsed);
  for (const v of candidates) {
    if (total <= AGGREGATE_BYTES) break;
    total -= v.totalBytes();
    evict(v, 'all sessions together exceeded the 40 MiB display budget');
  }
}

function subscribe(v, { replace = false } = {}) {
  if (!socket || !socket.isOpen()) return;
  if (replace && !state.pages) v.clear(); // legacy replies carry no reset marker
  const since = replace ? 0 : v.cursor;
  const requestId = `sub-${++state.subSeq}`;
  v.sub = { requestId, since, done: false };
  v.ready = false;
  v.evicted = false;
  const msg = { type: 'subscribe', session: v.id, since, request_id: requestId };
  if (state.pages) msg.paged = true;
  if (replace) msg.replace = true;
  send(msg);
}

function select(id) {
  if (id !== null && !state.sessions.has(id)) id = null;
  const changed = state.selected !== id;
  state.selected = id;
  if (changed) {
    history.replaceState(history.state, '', id ? `#session=${id}` : location.pathname + location.search);
    $('transcript').replaceChildren();
    state.follow = true;
    inspectorCache.sig = null;
    $('message').value = $('message').value; // keep the draft
  }
  if (id) {
    // A headless session has no transcript: nothing to subscribe to.
    if (!isHeadless(state.sessions.get(id))) {
      const v = ensureView(id);
      v.lastUsed = Date.now();
      if (!v.sub || v.evicted) subscribe(v, { replace: v.evicted });
    }
    if (state.drawer === 'sessions') setDrawer(null);
  }
  render();
}

/**
 * The hub rebroadcasts a description when the connection, process or
 * prompts change, not for every event; statistics and request records of
 * the selected session are refreshed from the JSON API. Only fields that
 * socket messages do not carry are taken, so an answer built before a
 * newer socket message cannot roll anything back.
 */
let refreshing = false;
async function refreshDescription() {
  const id = state.selected;
  if (!id || refreshing || !socket || !socket.isOpen() || document.hidden) return;
  refreshing = true;
  try {
    const res = await api('GET', `/api/sessions/${encodeURIComponent(id)}`);
    const fresh = res.ok && res.body && res.body.session;
    const d = state.sessions.get(id);
    if (fresh && d) {
      d.stats = fresh.stats;
      d.last_event = fresh.last_event;
      d.last_event_at = fresh.last_event_at;
      d.last_run_id = fresh.last_run_id;
      const byId = new Map((d.requests || []).map((r) => [r.request_id, r]));
      for (const r of fresh.requests || []) {
        const mine = byId.get(r.request_id);
        if (!mine || String(r.updated_at) > String(mine.updated_at)) byId.set(r.request_id, r);
      }
      d.requests = [...byId.values()].sort((a, b) => String(a.sent_at).localeCompare(String(b.sent_at))).slice(-200);
      render();
    }
  } catch {
    /* the next tick retries */
  } finally {
    refreshing = false;
  }
}

// ---------------------------------------------------------------------------
// Worker history (read-only, live replies never retained by the hub)
// ---------------------------------------------------------------------------

function maybeLoadHistory(v, force = false) {
  const d = state.sessions.get(v.id);
  if (!v.ready || !d || !d.connected || v.evicted) return;
  if (!Array.isArray(d.worker_capabilities) || !d.worker_capabilities.includes('session-history')) return;
  const wid = d.identity && d.identity.worker_id;
  const hs = v.history;
  if (hs.state === 'loading') return;
  if (!force && hs.workerId === wid && !v.historyStale && (hs.state === 'done' || hs.state === 'error')) return;
  v.historyBegin(wid);
  requestHistoryPage(v, 0, 0);
}

function requestHistoryPage(v, start, step) {
  const id = `hist-${++state.histSeq}`;
  v.history.pending = id;
  clearTimeout(v.historyTimer);
  if (!send({ type: 'history', session: v.id, request_id: id, start, step, limit: 10 })) {
    historyFailed(v, 'not connected');
    return;
  }
  v.historyTimer = setTimeout(() => {
    if (v.history.pending === id) historyFailed(v, 'the worker did not answer within 10 s');
  }, HISTORY_PAGE_MS);
}

function historyFailed(v, why) {
  clearTimeout(v.historyTimer);
  v.history.state = 'error';
  v.history.error = why;
  v.history.pending = null;
  render();
}

function onHistoryEvent(v, env) {
  const data = env.data || {};
  if (!v.history.pending || data.request_id !== v.history.pending) return;
  clearTimeout(v.historyTimer);
  if (env.event === 'history_error') {
    historyFailed(v, data.message || 'history_error');
    return;
  }
  const res = v.historyPage(data);
  if (res.error) historyFailed(v, res.error);
  else if (res.restart) {
    if (v.history.restarts >= 3) historyFailed(v, 'the conversation kept changing while it was read');
    else {
      const restarts = v.history.restarts + 1;
      v.historyBegin(v.history.workerId);
      v.history.restarts = restarts;
      requestHistoryPage(v, 0, 0);
    }
  } else if (res.next) requestHistoryPage(v, res.next.start, res.next.step);
  else {
    v.historyDone();
    enforceBudget();
  }
  render();
}

// ---------------------------------------------------------------------------
// Panel messages
// ---------------------------------------------------------------------------

function gapNotice(v, gap) {
  v.notices.add('gap', gap[0] === gap[1] ? `Event ${gap[0]} is no longer retained by the hub: the transcript has a gap before event ${gap[1] + 1}.` : `Events ${gap[0]}–${gap[1]} are no longer retained by the hub: the transcript has a gap there.`);
}

function epochReset(text) {
  state.notices.add('restart', text);
  for (const v of state.views.values()) {
    v.clear();
    v.history = emptyHistory();
    v.historyStale = true;
    if (!v.evicted) v.notices.add('restart', 'The hub restarted: this transcript was reloaded from the start of the new hub’s record.');
  }
}

const handlers = {
  welcome(msg) {
    const hub = msg.hub || {};
    state.meta = { ...(state.meta || {}), ...hub };
    state.pages = Array.isArray(hub.capabilities) && hub.capabilities.includes('transcript-pages');
    const epoch = hub.transcript_epoch || null;
    if (state.epoch !== null && epoch !== state.epoch) {
      epochReset('The hub restarted (its transcript epoch changed): replay cursors were discarded and transcripts reloaded from the beginning.');
    }
    state.epoch = epoch;
    state.started = true;
    const ids = new Set();
    for (const d of Array.isArray(msg.sessions) ? msg.sessions : []) {
      ids.add(d.session_id);
      upsertSession(d, true);
    }
    for (const id of [...state.sessions.keys()]) if (!ids.has(id)) removeSession(id, false);
    renderHubInfo();
    for (const v of state.views.values()) if (!v.evicted && (v.id === state.selected || v.entries.length || v.cursor)) subscribe(v);
    if (state.selected && !state.sessions.has(state.selected)) select(null);
    else if (state.selected) select(state.selected);
    approvals.onReconnect();
  },
  sessions(msg) {
    const ids = new Set();
    for (const d of msg.sessions || []) {
      ids.add(d.session_id);
      upsertSession(d);
    }
    for (const id of [...state.sessions.keys()]) if (!ids.has(id)) removeSession(id, false);
  },
  session(msg) {
    upsertSession(msg.session);
  },
  created(msg) {
    upsertSession(msg.session);
    if (state.creating && msg.session && msg.session.session_id === state.creating) {
      state.creating = null;
      $('dlg-create').close();
      select(msg.session.session_id);
      toast(`Created ${msg.session.session_id}.`);
    }
  },
  session_removed(msg) {
    removeSession(msg.session, true);
  },
  subscribed(msg) {
    const id = msg.session && msg.session.session_id;
    const v = state.views.get(id);
    if (!v || !v.sub || msg.request_id !== v.sub.requestId) return; // stale or unsubscribed
    if (msg.transcript_epoch && v.epoch && msg.transcript_epoch !== v.epoch && !msg.replay_reset) {
      epochReset('The hub restarted (its transcript epoch changed): replay cursors were discarded and transcripts reloaded from the beginning.');
      state.epoch = msg.transcript_epoch;
      for (const other of state.views.values()) if (!other.evicted && other.sub) subscribe(other, { replace: true });
      return;
    }
    if (msg.replay_reset) v.clear();
    if (msg.transcript_epoch) v.epoch = msg.transcript_epoch;
    let gap = null;
    for (const entry of Array.isArray(msg.transcript) ? msg.transcript : []) {
      const g = v.accept(entry);
      if (Array.isArray(g)) gap = gap ? [gap[0], g[1]] : g;
    }
    if (gap) gapNotice(v, gap);
    if (msg.session && msg.session.spec) upsertSession(msg.session);
    if (msg.logs) {
      v.logs = msg.logs;
      v.logsAt = new Date().toISOString();
      v.logsV++;
    }
    if (msg.plan && typeof msg.plan === 'object') v.plan = msg.plan;
    const final = !('replay_more' in msg) || msg.replay_more === false;
    if (final) {
      if (typeof msg.latest === 'number' && msg.latest > v.cursor) v.cursor = msg.latest;
      v.sub.done = true;
      v.ready = true;
      maybeLoadHistory(v, v.history.state === 'idle');
    }
    enforceBudget();
  },
  event(msg) {
    const v = state.views.get(msg.session);
    const env = msg.envelope;
    if (!v || !env || typeof env !== 'object') return;
    if (msg.hub_seq === null || msg.hub_seq === undefined) {
      if (env.event === 'history' || env.event === 'history_error') onHistoryEvent(v, env);
      return;
    }
    const gap = v.accept(env);
    if (Array.isArray(gap)) gapNotice(v, gap);
    if ((env.event === 'status' || env.event === 'ready') && env.data && Array.isArray(env.data.capabilities)) {
      // The hub does not rebroadcast the description for a status event:
      // keep the advertised capabilities of the current worker in step.
      const d = state.sessions.get(v.id);
      if (d && d.connected && (!d.identity || !d.identity.worker_id || d.identity.worker_id === env.worker_id)) {
        d.worker_capabilities = env.data.capabilities;
        if (!d.identity || d.identity.state !== 'live') d.identity = { state: 'live', worker_id: env.worker_id, since: env.received_at };
        maybeLoadHistory(v);
      }
    }
    if (env.event === 'compact_finished') maybeLoadHistory(v, true);
    if (env.event === 'input_rejected' && v.outbox.has(env.request_id)) v.outbox.get(env.request_id).state = 'rejected';
    enforceBudget();
  },
  confirmation(msg) {
    const closed = approvals.onMessage(msg);
    if (closed) {
      const v = state.views.get(msg.session);
      const p = closed.prompt;
      if (v && p.call && typeof p.call.id === 'string') v.recordApproval(p.run_id, p.call.id, { decision: closed.outcome, reason: p.reason });
    }
  },
  process(msg) {
    const d = state.sessions.get(msg.session);
    if (d) d.process = msg.process;
  },
  connection(msg) {
    const d = state.sessions.get(msg.session);
    if (d) {
      d.connected = Boolean(msg.connected);
      if (msg.identity) d.identity = msg.identity;
      if (!d.connected) d.worker_capabilities = null;
    }
  },
  request(msg) {
    const d = state.sessions.get(msg.session);
    const r = msg.request;
    if (!r || typeof r.request_id !== 'string') return;
    if (d) {
      const list = Array.isArray(d.requests) ? d.requests.filter((x) => x.request_id !== r.request_id) : [];
      list.push(r);
      d.requests = list.slice(-200);
    }
    const v = state.views.get(msg.session);
    if (v && v.outbox.has(r.request_id)) {
      const o = v.outbox.get(r.request_id);
      o.state = r.state;
      o.detail = r.detail;
    }
  },
  logs(msg) {
    const v = state.views.get(msg.session);
    if (!v) return;
    v.logs = msg;
    v.logsAt = new Date().toISOString();
    v.logsV++;
  },
  plan(msg) {
    const v = state.views.get(msg.session);
    if (!v || !msg.plan) return;
    if (!v.plan || !(msg.plan.revision < v.plan.revision)) v.plan = msg.plan;
  },
  snapshot() {},
  pong() {},
  accepted(msg) {
    const session = msg.session;
    switch (msg.action) {
      case 'input': {
        const v = state.views.get(session);
        const o = v && v.outbox.get(msg.request_id);
        if (o && o.state === 'sending') o.state = 'sent';
        break;
      }
      case 'confirmation':
        approvals.onAccepted(msg);
        break;
      case 'subagent_policy': {
        const pending = state.policyPending.get(session);
        if (pending && pending.requestId === msg.request_id) state.policyPending.delete(session);
        const d = state.sessions.get(session);
        if (d && d.subagent && typeof msg.policy === 'string') d.subagent.policy = msg.policy;
        toast(`The safety policy of ${childLabel(session)} is now “${msg.policy}”. It applies to new approval requests.`);
        break;
      }
      case 'signal':
        if (msg.operation === 'cancel') toast(`Cancel sent to ${session}.`);
        break;
      case 'start':
      case 'stop':
      case 'restart':
      case 'force-kill': {
        state.busy.delete(session);
        const r = msg.result || {};
        const text = {
          start: `Started ${session}${r.pid ? ` (pid ${r.pid})` : ''}.`,
          stop: `Stopped ${session}${r.how ? ` (${r.how})` : ''}.`,
          restart: `Restarted ${session}${r.pid ? ` (pid ${r.pid})` : ''}.`,
          'force-kill': `Force-killed ${session}${r.how ? ` (${r.how})` : ''}.`,
        }[msg.action];
        toast(text);
        break;
      }
      default:
        break;
    }
  },
  error(msg) {
    const req = msg.request && typeof msg.request === 'object' ? msg.request : {};
    const text = msg.message || msg.error;
    switch (msg.error) {
      case 'confirmation_rejected':
      case 'unknown_confirmation':
        if (!approvals.onError(msg)) toast(`Decision refused: ${text}`, 'error');
        return;
      case 'worker_action_failed':
        if (req.session) state.busy.delete(req.session);
        toast(`${req.action || 'Worker action'} failed for ${req.session || 'the session'}: ${text}`, 'error');
        return;
      case 'session_exists':
      case 'invalid_session':
        if (state.creating) {
          $('create-error').textContent = msg.error === 'session_exists' ? 'A session with this id already exists.' : text;
          $('create-ok').disabled = false;
          state.creating = null;
          return;
        }
        break;
      default:
        break;
    }
    if (req.request_id) {
      for (const [sid, p] of state.policyPending) {
        if (p.requestId === req.request_id) {
          state.policyPending.delete(sid);
          toast(`The safety policy of ${childLabel(sid)} was not changed: ${text}`, 'error');
          return;
        }
      }
      for (const v of state.views.values()) {
        const o = v.outbox.get(req.request_id);
        if (o) {
          o.state = 'not_sent';
          o.detail = { message: text };
          return;
        }
        if (v.history.pending === req.request_id) {
          historyFailed(v, text);
          return;
        }
      }
    }
    if (msg.error === 'display_snapshot_too_large') {
      state.notices.add('error', `The hub could not send a transcript in one frame: ${text}`);
      return;
    }
    toast(`${msg.error}: ${text}`, 'error');
  },
};

function onMessage(msg) {
  const fn = handlers[msg.type];
  if (fn) {
    try {
      fn(msg);
    } catch (err) {
      console.error('panel: failed to handle', msg.type, err);
    }
  }
  render();
}

function removeSession(id, announce) {
  const headless = isHeadless(state.sessions.get(id));
  state.policyPending.delete(id);
  state.sessions.delete(id);
  state.views.delete(id);
  approvals.removeSession(id);
  state.busy.delete(id);
  if (state.selected === id) select(null);
  if (announce) toast(headless ? `Subagent ${childLabel(id)} stopped and was removed.` : `Session ${id} was deleted.`);
}

// ---------------------------------------------------------------------------
// Header and worker actions
// ---------------------------------------------------------------------------

const header = {};
function buildHeader() {
  header.title = h('h2', { id: 'session-title', class: 'session-title' });
  header.badges = h('span', { class: 'badges' });
  header.start = h('button', { type: 'button', text: 'Start', onclick: () => workerAction('start') });
  header.stop = h('button', { type: 'button', class: 'secondary', text: 'Stop', onclick: () => workerAction('stop') });
  header.restart = h('button', { type: 'button', class: 'secondary', text: 'Restart', onclick: () => workerAction('restart') });
  header.kill = h('button', { type: 'button', class: 'danger', text: 'Force kill', onclick: () => workerAction('force-kill') });
  header.del = h('button', { type: 'button', class: 'danger', text: 'Delete', onclick: deleteSession });
  header.refresh = h('button', { type: 'button', class: 'secondary', text: 'Refresh', title: 'Reload the transcript from the hub and the history from the worker', onclick: refreshView });
  header.note = h('p', { class: 'muted small actions-note' });
  header.actions = h('div', { class: 'actions' }, header.start, header.stop, header.restart, header.kill, header.refresh, header.del);
  setChildren($('session-header'), h('div', { class: 'title-row' }, header.title, header.badges), header.actions, header.note);
}

function setReason(button, reason) {
  button.disabled = Boolean(reason);
  if (reason) {
    button.title = reason;
    button.setAttribute('aria-description', reason);
  } else {
    button.removeAttribute('title');
    button.removeAttribute('aria-description');
  }
}

let headerSig = null;
function renderHeader() {
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  const sig = JSON.stringify([state.selected, desc && [desc.process, desc.connected, desc.spec, runActive(desc), desc.subagent], approvals.count(state.selected), state.busy.get(state.selected), socket && socket.state]);
  if (sig === headerSig) return;
  headerSig = sig;
  $('session-header').hidden = !desc;
  if (!desc) return;
  header.title.textContent = desc.session_id;
  // A headless child has no worker controls: its parent drives it.
  header.actions.hidden = isHeadless(desc);
  if (isHeadless(desc)) {
    setChildren(header.badges, badges(desc), h('span', { class: 'badge badge-idle', title: 'parent session', text: `child of ${parentOf(desc) || '?'}` }));
    header.note.textContent = 'Headless subagent: driven by its parent worker. It has no transcript, composer or worker controls.';
    return;
  }
  const model = desc.spec && desc.spec.model ? desc.spec.model : 'default model';
  setChildren(header.badges, badges(desc), h('span', { class: 'badge badge-idle', title: 'provider profile and model', text: `${desc.spec ? desc.spec.provider : '?'} · ${model}` }));
  const online = socket && socket.isOpen();
  const busy = state.busy.get(desc.session_id);
  const active = processActive(desc);
  const off = !online ? 'Not connected to the hub' : busy ? `${busy} in progress` : null;
  setReason(header.start, off || (active ? 'The worker process is already running' : null));
  setReason(header.stop, off || (!active && !desc.connected ? 'No worker process is running' : null));
  setReason(header.restart, off || (!active && !desc.connected ? 'Nothing is running: use Start' : null));
  setReason(header.kill, off || (!active ? 'No worker process is running' : null));
  const busyWhy = busyReason(desc);
  setReason(header.del, off || (busyWhy ? `Cannot delete while ${busyWhy}: stop it first` : null));
  setReason(header.refresh, !online ? 'Not connected to the hub' : null);
  header.start.hidden = active;
  header.stop.hidden = !active && !desc.connected;
  header.note.textContent = busyWhy && online && !busy ? `Delete is unavailable while ${busyWhy}.` : '';
}

function confirmDialog({ title, body, ok, danger }) {
  const dlg = $('dlg-confirm');
  $('confirm-title').textContent = title;
  setChildren($('confirm-body'), body.map((t) => (t instanceof Node ? t : h('p', { text: t }))));
  const okBtn = $('confirm-ok');
  okBtn.textContent = ok;
  okBtn.className = danger ? 'danger' : '';
  return new Promise((resolve) => {
    const form = $('confirm-form');
    const done = (value) => {
      form.removeEventListener('submit', onSubmit);
      $('confirm-cancel').removeEventListener('click', onCancel);
      dlg.removeEventListener('close', onClose);
      if (dlg.open) dlg.close();
      resolve(value);
    };
    const onSubmit = (e) => {
      e.preventDefault();
      done(true);
    };
    const onCancel = () => done(false);
    const onClose = () => done(false);
    form.addEventListener('submit', onSubmit);
    $('confirm-cancel').addEventListener('click', onCancel);
    dlg.addEventListener('close', onClose);
    dlg.showModal();
    $('confirm-cancel').focus();
  });
}

async function workerAction(action) {
  const id = state.selected;
  const desc = state.sessions.get(id);
  if (!desc) return;
  const group = state.meta && state.meta.force_kill_process_group;
  const spec = desc.spec || {};
  const what = `${spec.provider || 'default'} profile${spec.model ? `, model ${spec.model}` : ''}`;
  const stopText = `The hub asks the worker to shut down over the protocol (its current run is cancelled and its state saved); if it has not exited in time the hub sends SIGTERM, then SIGKILL${group ? ' to its whole process group' : ' to the worker process'}.`;
  const texts = {
    start: { title: `Start the worker for ${id}?`, body: [`Starts a new worker process (${what}) in the session directory. It connects back to the hub; tool calls that need approval will appear in the Approvals tray.`], ok: 'Start' },
    stop: { title: `Stop the worker for ${id}?`, body: [stopText], ok: 'Stop' },
    restart: { title: `Restart the worker for ${id}?`, body: [`Stops the worker as for Stop (protocol shutdown, then SIGTERM, then SIGKILL), then starts a new worker process (${what}). The conversation continues from the worker’s saved state.`], ok: 'Restart' },
    'force-kill': {
      title: `Force-kill the worker for ${id}?`,
      body: ['Sends SIGKILL to the worker’s whole process group at once, without asking it to shut down. The current run is interrupted, anything not yet saved is lost, and commands it started are killed too.'],
      ok: 'Force kill',
      danger: true,
    },
  }[action];
  if (!(await confirmDialog(texts))) return;
  if (!send({ type: 'worker', session: id, action })) {
    toast('Not connected to the hub: nothing was sent.', 'error');
    return;
  }
  state.busy.set(id, action === 'force-kill' ? 'force-kill' : action === 'start' ? 'starting' : action === 'stop' ? 'stopping' : 'restarting');
  render();
}

async function deleteSession() {
  const id = state.selected;
  const desc = state.sessions.get(id);
  if (!desc) return;
  const why = busyReason(desc);
  if (why) {
    toast(`Cannot delete ${id} while ${why}.`, 'error');
    return;
  }
  const ok = await confirmDialog({
    title: `Delete session ${id}?`,
    body: ['Removes the session and its whole directory: configuration, worker state, memory archives, logs and any files tools created there. This cannot be undone.'],
    ok: 'Delete',
    danger: true,
  });
  if (ok && !send({ type: 'delete_session', session: id })) toast('Not connected to the hub: nothing was sent.', 'error');
}

/**
 * Asks the hub to change a headless child's safety policy. Approve is
 * confirmed first: it lets the child run tools without anyone looking.
 */
async function setPolicy(session, policy) {
  const desc = state.sessions.get(session);
  const current = desc && desc.subagent ? desc.subagent.policy : null;
  const restore = () => {
    headlessView.sig = null; // the radios show the hub's policy again
    render();
  };
  if (policy === current || state.policyPending.has(session)) return restore();
  if (policy === 'approve') {
    const ok = await confirmDialog({
      title: `Approve new requests of ${childLabel(session)} automatically?`,
      body: [
        'Every new tool call of this subagent that needs approval will be approved by the hub at once, without appearing in the Approvals tray. Its commands run with the worker’s rights on this host.',
        'Prompts that are already open stay open until someone answers them.',
      ],
      ok: 'Approve automatically',
      danger: true,
    });
    if (!ok) return restore();
  }
  const requestId = `pol-${++policySeq}`;
  if (!send({ type: 'subagent_policy', session, policy, request_id: requestId })) {
    toast('Not connected to the hub: the policy was not changed.', 'error');
    return restore();
  }
  state.policyPending.set(session, { policy, requestId });
  setTimeout(() => {
    const p = state.policyPending.get(session);
    if (p && p.requestId === requestId) {
      state.policyPending.delete(session);
      toast(`No answer from the hub about the policy of ${childLabel(session)}; the view shows what the hub reports.`, 'warn');
      restore();
    }
  }, 8000);
  render();
}

function refreshView() {
  const v = state.selected && state.views.get(state.selected);
  if (!v) return;
  v.historyStale = true;
  subscribe(v, { replace: true });
  render();
}

// ---------------------------------------------------------------------------
// Transcript column
// ---------------------------------------------------------------------------

function promptSig(runId) {
  let s = '';
  for (const it of approvals.items.values()) if (it.session === state.selected && it.prompt.run_id === runId) s += `${it.prompt.confirmation_id}:${it.prompt.state};`;
  return s;
}

function promptFor(runId, callId) {
  for (const it of approvals.items.values()) {
    const p = it.prompt;
    if (it.session === state.selected && p.run_id === runId && p.call && p.call.id === callId) return p;
  }
  return null;
}

function renderMain() {
  const t = $('transcript');
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  const headless = isHeadless(desc);
  $('headless-view').hidden = !headless;
  document.querySelector('.transcript-wrap').hidden = headless;
  $('composer').hidden = headless;
  if (headless) {
    const pending = state.policyPending.get(desc.session_id);
    headlessView.render(desc, {
      online: Boolean(socket && socket.isOpen()),
      pending: pending ? pending.policy : null,
      processText: processBadge(desc).text,
      known: (id) => Boolean(id) && state.sessions.has(id),
    });
    $('jump').hidden = true;
    return;
  }
  const v = state.selected ? state.views.get(state.selected) : null;
  if (!v) {
    if (!t.firstChild || !t.firstChild.classList.contains('welcome')) {
      setChildren(
        t,
        h(
          'div',
          { class: 'welcome' },
          h('h2', { text: state.sessions.size ? 'Select a session' : 'No sessions yet' }),
          h('p', { class: 'muted', text: state.sessions.size ? 'Pick a session on the left to see its transcript, or create a new one.' : 'Create a session, start its worker, then send it a message.' }),
        ),
      );
    }
    $('jump').hidden = true;
    return;
  }
  if (t.firstChild && t.firstChild.classList && t.firstChild.classList.contains('welcome')) t.replaceChildren();
  const changed = renderTranscript(t, v, {
    desc: state.sessions.get(v.id),
    promptSig,
    promptFor,
    onDismiss: (rid) => {
      v.dismissed.add(rid);
      v.outbox.delete(rid);
      render();
    },
    onRetryHistory: () => {
      maybeLoadHistory(v, true);
      render();
    },
    onRerender: render,
  });
  if (changed && !state.follow) $('jump').hidden = false;
}

function atBottom(t) {
  return t.scrollHeight - t.scrollTop - t.clientHeight < 48;
}

/** Last scrollTop the panel set itself; its scroll event is not the reader's. */
let programmaticTop = -1;
function followLatest() {
  const t = $('transcript');
  if (!state.follow) return;
  const target = Math.max(0, t.scrollHeight - t.clientHeight);
  if (Math.abs(t.scrollTop - target) < 1) return;
  t.scrollTop = target;
  programmaticTop = t.scrollTop;
}

// ---------------------------------------------------------------------------
// Composer
// ---------------------------------------------------------------------------

function composerBlock() {
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  if (!desc) return 'Select a session first.';
  if (isHeadless(desc)) return 'A headless subagent takes its tasks from its parent worker only.';
  if (!socket || !socket.isOpen()) return 'Not connected to the hub.';
  if (!desc.connected) return 'No worker is connected: start the session’s worker to send it input.';
  return null;
}

let modelSig = null;
function renderComposer() {
  const blocked = composerBlock();
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  const v = state.selected ? state.views.get(state.selected) : null;
  setReason($('send'), blocked);
  setReason($('continue'), blocked);
  $('message').disabled = !desc;
  const caps = desc && Array.isArray(desc.worker_capabilities) ? desc.worker_capabilities : null;
  const compactWhy = blocked || (caps && caps.includes('context-compact') ? null : 'The connected worker does not advertise context-compact.');
  setReason($('compact'), compactWhy);
  setReason($('load-models'), blocked);
  const active = v && v.runActive() && desc && desc.connected;
  $('cancel-run').hidden = !active;
  $('composer-note').textContent = blocked && desc ? blocked : '';
  const opts = v && v.options;
  const sig = JSON.stringify([state.selected, opts]);
  if (sig !== modelSig) {
    modelSig = sig;
    const names = new Set();
    if (opts && opts.model && Array.isArray(opts.model.available)) {
      for (const a of opts.model.available) if (a && a.name === 'model' && Array.isArray(a.options)) a.options.forEach((n) => names.add(String(n)));
    }
    if (opts && Array.isArray(opts.models)) opts.models.forEach((m) => m && m.name && names.add(String(m.name)));
    const select = $('model');
    const keep = select.value;
    const current = opts && opts.model && opts.model.current && opts.model.current.model;
    setChildren(
      select,
      h('option', { value: '', text: current ? `default (${current})` : 'worker default' }),
      [...names].map((n) => h('option', { value: n, text: n })),
    );
    select.value = names.has(keep) ? keep : '';
    select.title = names.size ? 'Sent as options.model.model with the next input' : 'No model list yet: press “Refresh models” to ask the worker';
  }
  // Ask a newly connected worker once which models it offers.
  if (v && v.ready && desc && desc.connected && !blocked && desc.identity && desc.identity.worker_id && v.optionsAskedFor !== desc.identity.worker_id) {
    v.optionsAskedFor = desc.identity.worker_id;
    if (!opts) send({ type: 'signal', session: v.id, operation: 'options' });
  }
}

function sendInput(operation) {
  const id = state.selected;
  const v = id && state.views.get(id);
  if (!v || composerBlock()) return;
  const text = $('message').value;
  if (operation === 'message' && text.trim() === '') {
    $('message').focus();
    return;
  }
  const requestId = uuid();
  const msg = { type: 'input', session: id, operation, request_id: requestId };
  if (operation === 'message') msg.content = [{ type: 'text', modality: 'text', raw: text }];
  const model = $('model').value;
  if (model) msg.options = { model: { model } };
  v.outbox.set(requestId, { requestId, operation, text: operation === 'message' ? text : null, state: 'sending', detail: null, at: new Date().toISOString() });
  if (operation === 'message') v.rememberText(requestId, text);
  if (!send(msg)) {
    const o = v.outbox.get(requestId);
    o.state = 'not_sent';
    o.detail = { message: 'not connected to the hub' };
  } else if (operation === 'message') {
    $('message').value = '';
  }
  state.follow = true;
  render();
}

function wireComposer() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    sendInput('message');
  });
  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      sendInput('message');
    }
  });
  $('continue').addEventListener('click', () => sendInput('continue'));
  $('compact').addEventListener('click', () => sendInput('compact'));
  $('load-models').addEventListener('click', () => {
    if (state.selected) send({ type: 'signal', session: state.selected, operation: 'options' });
  });
  $('cancel-run').addEventListener('click', () => {
    const v = state.selected && state.views.get(state.selected);
    const msg = { type: 'signal', session: state.selected, operation: 'cancel' };
    if (v && v.activeRun) msg.run_id = v.activeRun.runId;
    send(msg);
  });
}

// ---------------------------------------------------------------------------
// Inspector
// ---------------------------------------------------------------------------

function renderInspectorColumn() {
  const v = state.selected ? state.views.get(state.selected) : null;
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  if (isHeadless(desc)) {
    const sig = `headless|${desc.session_id}`;
    if (inspectorCache.sig !== sig) {
      inspectorCache.sig = sig;
      setChildren(
        $('inspector-panel'),
        h('p', { class: 'muted', text: 'This is a headless subagent: its status and safety policy are in the main view. Its transcript, logs, snapshot and plan are not available to operators; its parent worker reads its results.' }),
      );
    }
    return;
  }
  renderInspector(
    $('inspector-panel'),
    state.tab,
    {
      view: v,
      desc,
      onStatus: () => send({ type: 'signal', session: state.selected, operation: 'status' }),
      onRefreshLogs: () => send({ type: 'logs', session: state.selected, limit: 500 }),
      onLoadSnapshot: () => loadSnapshot(v),
    },
    inspectorCache,
  );
}

async function loadSnapshot(v) {
  if (!v) return;
  v.snapshot = { loading: true };
  v.snapshotV++;
  render();
  let snap;
  try {
    const res = await api('GET', `/api/sessions/${encodeURIComponent(v.id)}/snapshot`, undefined, { timeoutMs: 15000 });
    snap = res.ok ? { data: res.body, at: new Date().toISOString() } : { error: `${res.status}: ${(res.body && (res.body.message || res.body.error)) || 'failed'}` };
  } catch (err) {
    snap = { error: `Could not load the snapshot: ${err.name === 'AbortError' ? 'timed out' : err.message}` };
  }
  v.snapshot = snap;
  v.snapshotV++;
  render();
}

function selectTab(tab, focus) {
  state.tab = tab;
  for (const b of document.querySelectorAll('[role="tab"]')) {
    const on = b.dataset.tab === tab;
    b.setAttribute('aria-selected', String(on));
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
    if (on) $('inspector-panel').setAttribute('aria-labelledby', b.id);
  }
  if (tab === 'logs' && state.selected && !isHeadless(state.sessions.get(state.selected))) send({ type: 'logs', session: state.selected, limit: 500 });
  if (tab === 'run') refreshDescription();
  render();
}

function wireTabs() {
  for (const b of document.querySelectorAll('[role="tab"]')) {
    b.addEventListener('click', () => selectTab(b.dataset.tab, false));
    b.addEventListener('keydown', (e) => {
      const i = TABS.indexOf(state.tab);
      if (e.key === 'ArrowRight') selectTab(TABS[(i + 1) % TABS.length], true);
      else if (e.key === 'ArrowLeft') selectTab(TABS[(i + TABS.length - 1) % TABS.length], true);
      else if (e.key === 'Home') selectTab(TABS[0], true);
      else if (e.key === 'End') selectTab(TABS[TABS.length - 1], true);
      else return;
      e.preventDefault();
    });
  }
}

// ---------------------------------------------------------------------------
// Layout: drawers on narrow windows, inspector toggle on wide ones
// ---------------------------------------------------------------------------

const narrow = window.matchMedia('(max-width: 760px)');

function setDrawer(which) {
  state.drawer = which;
  $('sidebar').classList.toggle('open', which === 'sessions');
  $('inspector').classList.toggle('open', which === 'inspector');
  $('backdrop').hidden = !which;
  $('toggle-sessions').setAttribute('aria-expanded', String(which === 'sessions'));
  if (narrow.matches) $('toggle-inspector').setAttribute('aria-expanded', String(which === 'inspector'));
  if (which === 'sessions') $('session-list').querySelector('button')?.focus();
  if (which === 'inspector') $('inspector').querySelector('[aria-selected="true"]')?.focus();
}

function wireLayout() {
  $('toggle-sessions').addEventListener('click', () => setDrawer(state.drawer === 'sessions' ? null : 'sessions'));
  $('toggle-inspector').addEventListener('click', () => {
    if (narrow.matches) {
      setDrawer(state.drawer === 'inspector' ? null : 'inspector');
      return;
    }
    state.inspectorOpen = !state.inspectorOpen;
    $('layout').classList.toggle('no-inspector', !state.inspectorOpen);
    $('toggle-inspector').setAttribute('aria-expanded', String(state.inspectorOpen));
  });
  $('backdrop').addEventListener('click', () => setDrawer(null));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.drawer && !document.querySelector('dialog[open]')) setDrawer(null);
  });
  narrow.addEventListener('change', () => {
    setDrawer(null);
    $('toggle-inspector').setAttribute('aria-expanded', String(narrow.matches ? false : state.inspectorOpen));
  });
  if (narrow.matches) $('toggle-inspector').setAttribute('aria-expanded', 'false');
  const t = $('transcript');
  t.addEventListener('scroll', () => {
    if (programmaticTop >= 0 && Math.abs(t.scrollTop - programmaticTop) < 2) return;
    programmaticTop = -1;
    state.follow = atBottom(t);
    if (state.follow) $('jump').hidden = true;
  });
  // The tray, notices and composer change the transcript's height.
  new ResizeObserver(() => followLatest()).observe(t);
  $('jump').addEventListener('click', () => {
    state.follow = true;
    $('jump').hidden = true;
    followLatest();
    t.focus({ preventScroll: true });
  });
  $('reconnect').addEventListener('click', () => socket && socket.retryNow());
  $('signin-open').addEventListener('click', () => showSignIn());
}

// ---------------------------------------------------------------------------
// Session creation
// ---------------------------------------------------------------------------

function idProblem(id) {
  if (id === '') return 'Enter an id.';
  if (id.length > 128) return 'At most 128 characters.';
  if (!SESSION_ID.test(id)) return 'Only letters, digits, “_” and “-”.';
  if (id.startsWith('subagent-')) return '“subagent-” is reserved for headless subagents.';
  if (state.sessions.has(id)) return 'A session with this id already exists.';
  return null;
}

function wireCreate() {
  const dlg = $('dlg-create');
  const input = $('create-id');
  const note = $('create-id-note');
  const ok = $('create-ok');
  const validate = () => {
    const problem = idProblem(input.value);
    input.setAttribute('aria-invalid', String(Boolean(problem) && input.value !== ''));
    note.textContent = problem && input.value !== '' ? problem : '1–128 letters, digits, “_” or “-”; not starting with “subagent-”.';
    note.className = problem && input.value !== '' ? 'small error-text' : 'small muted';
    ok.disabled = Boolean(problem) || state.creating !== null;
    return !problem;
  };
  input.addEventListener('input', validate);
  $('new-session').addEventListener('click', () => {
    input.value = '';
    $('create-model').value = '';
    $('create-error').textContent = '';
    state.creating = null;
    const providers = (state.meta && state.meta.providers) || [];
    const preferred = state.meta && state.meta.mock && state.meta.mock.enabled && providers.includes('mock') ? 'mock' : providers[0];
    setChildren($('create-provider'), providers.map((p) => h('option', { value: p, text: p, selected: p === preferred ? true : null })));
    validate();
    dlg.showModal();
    input.focus();
  });
  $('create-cancel').addEventListener('click', () => dlg.close());
  dlg.addEventListener('close', () => {
    state.creating = null;
  });
  $('create-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!validate()) return;
    const id = input.value;
    const spec = { provider: $('create-provider').value };
    const model = $('create-model').value.trim();
    if (model) spec.model = model;
    $('create-error').textContent = '';
    if (!send({ type: 'create_session', session: id, spec })) {
      $('create-error').textContent = 'Not connected to the hub.';
      return;
    }
    state.creating = id;
    ok.disabled = true;
  });
}

// ---------------------------------------------------------------------------
// Sign-in
// ---------------------------------------------------------------------------

function showSignIn(message) {
  const dlg = $('dlg-token');
  $('token-error').textContent = message || '';
  if (!dlg.open) dlg.showModal();
  $('token-input').focus();
}

function wireSignIn() {
  const dlg = $('dlg-token');
  $('token-cancel').addEventListener('click', () => dlg.close());
  $('token-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = $('token-input').value;
    if (!token) return;
    storeToken(token);
    $('token-ok').disabled = true;
    let res = null;
    try {
      res = await api('GET', '/api/sessions');
    } catch {
      res = null;
    }
    $('token-ok').disabled = false;
    if (!res) {
      $('token-error').textContent = 'The hub did not answer.';
      return;
    }
    if (res.status === 401) {
      $('token-error').textContent = 'The hub refused this token.';
      $('token-input').select();
      return;
    }
    $('token-input').value = '';
    dlg.close();
    connect();
  });
}

// ---------------------------------------------------------------------------
// Startup
// ---------------------------------------------------------------------------

function renderHubInfo() {
  const m = state.meta;
  if (!m) return;
  const proto = m.protocol ? `${m.protocol.name} v${m.protocol.version}` : '';
  $('hub-info').textContent = `${m.version ? `v${m.version}` : ''} · ${proto}${m.listen ? ` · ${m.listen.host}:${m.listen.port}` : ''}`;
}

function connect() {
  if (!socket) socket = new PanelSocket({ onMessage, onState: onSocketState, checkAuth });
  socket.connect();
}

async function boot() {
  approvals = new Approvals({
    send,
    api,
    onChange: () => render(),
    onSelect: (id) => select(id),
    toast,
    describe: (id) => state.sessions.get(id),
  });
  headlessView = new HeadlessView($('headless-view'), { onPolicy: setPolicy, onSelect: (id) => select(id) });
  buildHeader();
  wireComposer();
  wireTabs();
  wireLayout();
  wireCreate();
  wireSignIn();
  takeTokenFromUrl();
  const m = /^#session=([A-Za-z0-9_-]{1,128})$/.exec(location.hash);
  if (m) state.selected = m[1];
  render();
  let delay = 1000;
  for (;;) {
    try {
      const res = await api('GET', '/api/meta');
      if (res.ok && res.body) {
        state.meta = res.body;
        state.conn = 'ok';
        break;
      }
    } catch {
      /* retried below */
    }
    state.conn = 'hub-unreachable';
    render();
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(30000, delay * 2);
  }
  renderHubInfo();
  let probe = null;
  try {
    probe = await api('GET', '/api/sessions');
  } catch {
    probe = null;
  }
  if (probe && probe.status === 401) {
    socket = new PanelSocket({ onMessage, onState: onSocketState, checkAuth });
    socket.setState('rejected');
    return;
  }
  setInterval(refreshDescription, 5000);
  setInterval(() => {
    if (socket && socket.isOpen()) approvals.pollHeld();
  }, 2000);
  if (probe && probe.ok && probe.body && Array.isArray(probe.body.sessions)) {
    for (const d of probe.body.sessions) upsertSession(d);
  }
  connect();
}

boot();
