// Turning the state into DOM: the connection badge, notices, the session
// list, the session header, the main column (transcript, welcome or a
// headless child's status view), the composer's controls, the inspector
// column and the approvals tray. renderAll draws everything; each part
// skips its work when its signature did not change. Text is only ever set
// with textContent (see dom.js).

import { refreshConfigurations } from './configs.js';
import { $, h, setChildren, fmtTime } from './dom.js';
import { renderTranscript } from './transcript.js';
import { renderInspector, isHeadless, parentOf, lifecycleBadge, childLabel } from './inspector.js';
import { state, panel, inspectorCache, render, send, processActive, busyReason, runActive, composerBlock } from './state.js';
import { maybeLoadHistory } from './history.js';
import { select, workerAction, deleteSession, refreshView, loadSnapshot, loadGrants, revokeGrant } from './actions.js';

export function renderAll() {
  renderConn();
  renderNotices();
  renderSessions();
  renderHeader();
  renderViewNotices();
  renderMain();
  renderComposer();
  renderInspectorColumn();
  refreshConfigurations();
  panel.approvals.render($('tray'), $('tray-list'), $('tray-count'), state.selected);
  followLatest(); // after everything that changes the transcript's size
  const n = panel.approvals.visibleCount();
  document.title = n ? `(${n}) simplex-hub` : 'simplex-hub';
}

// ---------------------------------------------------------------------------
// Notices
// ---------------------------------------------------------------------------

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
// Connection and hub
// ---------------------------------------------------------------------------

let connTimer = null;
function renderConn() {
  const el = $('conn');
  const s = panel.socket ? panel.socket.state : 'starting';
  let text;
  let cls = s;
  if (state.conn === 'hub-unreachable') {
    text = 'hub unreachable';
    cls = 'waiting';
  } else if (s === 'open') text = 'connected';
  else if (s === 'connecting') text = panel.socket.attempt > 1 ? 'reconnecting…' : 'connecting…';
  else if (s === 'waiting') {
    const secs = Math.max(0, Math.ceil((panel.socket.retryAt - Date.now()) / 1000));
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

export function renderHubInfo() {
  const m = state.meta;
  if (!m) return;
  const proto = m.protocol ? `${m.protocol.name} v${m.protocol.version}` : '';
  $('hub-info').textContent = `${m.version ? `v${m.version}` : ''} · ${proto}${m.listen ? ` · ${m.listen.host}:${m.listen.port}` : ''}`;
}

// ---------------------------------------------------------------------------
// Session list
// ---------------------------------------------------------------------------

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
  const n = panel.approvals.count(desc.session_id);
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
    const sig = JSON.stringify([desc.process, desc.connected, runActive(desc), panel.approvals.count(id), state.busy.get(id), state.selected === id, desc.spec && desc.spec.model, desc.subagent]);
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

// ---------------------------------------------------------------------------
// Session header and worker controls
// ---------------------------------------------------------------------------

const header = {};
export function buildHeader() {
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
  const sig = JSON.stringify([state.selected, desc && [desc.process, desc.connected, desc.spec, runActive(desc), desc.subagent], panel.approvals.count(state.selected), state.busy.get(state.selected), panel.socket && panel.socket.state]);
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
  const online = panel.socket && panel.socket.isOpen();
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

// ---------------------------------------------------------------------------
// Transcript column
// ---------------------------------------------------------------------------

function promptSig(runId) {
  let s = '';
  for (const it of panel.approvals.items.values()) if (it.session === state.selected && it.prompt.run_id === runId) s += `${it.prompt.confirmation_id}:${it.prompt.state};`;
  return s;
}

function promptFor(runId, callId) {
  for (const it of panel.approvals.items.values()) {
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
    panel.headlessView.render(desc, {
      online: Boolean(panel.socket && panel.socket.isOpen()),
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
export function followLatest() {
  const t = $('transcript');
  if (!state.follow) return;
  const target = Math.max(0, t.scrollHeight - t.clientHeight);
  if (Math.abs(t.scrollTop - target) < 1) return;
  t.scrollTop = target;
  programmaticTop = t.scrollTop;
}

/** The transcript `t` scrolled: the reader's scroll decides whether to follow. */
export function onTranscriptScroll(t) {
  if (programmaticTop >= 0 && Math.abs(t.scrollTop - programmaticTop) < 2) return;
  programmaticTop = -1;
  state.follow = atBottom(t);
  if (state.follow) $('jump').hidden = true;
}

// ---------------------------------------------------------------------------
// Composer
// ---------------------------------------------------------------------------

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
      onLoadGrants: () => loadGrants(v),
      onRevokeGrant: (grant) => revokeGrant(v, grant),
    },
    inspectorCache,
  );
}
