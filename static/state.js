// The panel's client state: what the hub reported (sessions and their
// display views) and what the operator chose (selection, tab, drawer); the
// objects the modules share; questions that only read the state; updates
// that keep it in step (description refresh, the bounded set of live
// views); and render(), which every change ends with. Nothing here builds
// DOM.

import { View, Notices, AGGREGATE_BYTES, MAX_VIEWS, emptyHistory } from './views.js';
import { isHeadless } from './inspector.js';

const ACTIVE_EVENTS = new Set(['input_admitted', 'run_started', 'input_committed', 'model_response', 'tool_calls', 'tool_results']);
const LIVE_PROCESS = new Set(['starting', 'running', 'stopping']);

export const state = {
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

/** The panel socket, the approvals tray and the headless view; boot() in app.js creates them. */
export const panel = { socket: null, approvals: null, headlessView: null };

/** What the inspector column shows (see renderInspector); select() forgets it. */
export const inspectorCache = { sig: null };

export function send(msg) {
  return panel.socket ? panel.socket.send(msg) : false;
}

// ---------------------------------------------------------------------------
// Rendering schedule
// ---------------------------------------------------------------------------

let draw = () => {};

/** Sets what a scheduled render draws: renderAll from render.js. */
export function setDraw(fn) {
  draw = fn;
}

let renderQueued = false;
export function render() {
  if (renderQueued) return;
  renderQueued = true;
  const run = () => {
    if (!renderQueued) return;
    renderQueued = false;
    draw();
  };
  requestAnimationFrame(run);
  setTimeout(run, 150); // rAF pauses in hidden tabs
}

// ---------------------------------------------------------------------------
// Questions about a session
// ---------------------------------------------------------------------------

export function processActive(desc) {
  return Boolean(desc && desc.process && LIVE_PROCESS.has(desc.process.state));
}

export function busyReason(desc) {
  if (!desc) return null;
  if (processActive(desc)) return `the worker process is ${desc.process.state}`;
  if (desc.connected) return 'a worker is connected';
  return null;
}

export function runActive(desc) {
  if (isHeadless(desc)) return Boolean(desc.subagent && desc.subagent.active_run);
  const v = state.views.get(desc.session_id);
  if (v && v.ready) return v.runActive();
  return Boolean(desc.connected && ACTIVE_EVENTS.has(desc.last_event));
}

/** Why the composer cannot send to the selected session, or null. */
export function composerBlock() {
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  if (!desc) return 'Select a session first.';
  if (isHeadless(desc)) return 'A headless subagent takes its tasks from its parent worker only.';
  if (!panel.socket || !panel.socket.isOpen()) return 'Not connected to the hub.';
  if (!desc.connected) return 'No worker is connected: start the session’s worker to send it input.';
  return null;
}

/**
 * Takes into the description `d` the fields of a description `fresh` from
 * the JSON API that socket messages do not carry (see refreshDescription in
 * actions.js); request records are merged by id, the newer update winning.
 */
export function mergeDescription(d, fresh) {
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
}

// ---------------------------------------------------------------------------
// Display views: at most MAX_VIEWS live, all within the aggregate budget
// ---------------------------------------------------------------------------

export function ensureView(id) {
  let v = state.views.get(id);
  if (!v) {
    v = new View(id);
    v.logsV = 0;
    v.snapshotV = 0;
    v.grantsV = 0;
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
export function enforceBudget() {
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

export function subscribe(v, { replace = false } = {}) {
  if (!panel.socket || !panel.socket.isOpen()) return;
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
