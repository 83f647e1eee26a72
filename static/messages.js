// Messages from the hub on the panel socket: one handler per message type
// applies it to the state (session descriptions, display views, request
// records, approvals) and its consequences (subscriptions, worker history,
// toasts, the create dialog); onMessage dispatches and schedules a render,
// and onDisconnected voids what was in flight when the socket closed.

import { $ } from './dom.js';
import { emptyHistory } from './views.js';
import { isHeadless, childLabel } from './inspector.js';
import { state, panel, render, subscribe, enforceBudget } from './state.js';
import { maybeLoadHistory, historyFailed, onHistoryEvent } from './history.js';
import { toast } from './dialogs.js';
import { select } from './actions.js';
import { renderHubInfo } from './render.js';
import { onPong } from './statusbar.js';

export function upsertSession(desc, authoritative = false) {
  if (!desc || typeof desc.session_id !== 'string') return;
  const prev = state.sessions.get(desc.session_id);
  state.sessions.set(desc.session_id, desc);
  panel.approvals.syncSession(desc.session_id, desc.confirmations, authoritative);
  const v = state.views.get(desc.session_id);
  if (v) {
    if (prev && prev.connected && !desc.connected) v.activeRun = null;
    maybeLoadHistory(v);
  }
}

function removeSession(id, announce) {
  const headless = isHeadless(state.sessions.get(id));
  state.policyPending.delete(id);
  state.sessions.delete(id);
  state.views.delete(id);
  panel.approvals.removeSession(id);
  state.busy.delete(id);
  if (state.selected === id) select(null);
  if (announce) toast(headless ? `Subagent ${childLabel(id)} stopped and was removed.` : `Session ${id} was deleted.`);
}

/** The panel socket closed: subscriptions, loads and sends in flight are void. */
export function onDisconnected() {
  state.started = false;
  panel.approvals.onDisconnect();
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

/** Worker replies the hub forwards live but never retains. */
const TRANSIENT = new Set(['history', 'history_error', 'answer', 'answer_error']);

/**
 * A log tail as the inspector shows it, `{lines: [{stream, text, at}],
 * dropped, omitted}`, from the hub's line texts and their `{stream, at}`.
 */
function logTail(lines, meta, dropped, omitted) {
  const texts = Array.isArray(lines) ? lines : [];
  const info = Array.isArray(meta) ? meta : [];
  return {
    lines: texts.map((text, i) => ({ stream: info[i] && info[i].stream, at: info[i] && info[i].at, text: String(text) })),
    dropped: typeof dropped === 'number' ? dropped : 0,
    omitted: typeof omitted === 'number' ? omitted : 0,
  };
}

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
    panel.approvals.onReconnect();
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
    // Data pages of a paged replay carry no log lines; the final frame does.
    if (Array.isArray(msg.logs) && (msg.logs.length || !('replay_more' in msg) || msg.replay_more === false)) {
      v.logs = logTail(msg.logs, msg.log_meta, msg.logs_dropped, msg.logs_omitted);
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
    // Transient replies carry the current sequence without consuming one:
    // they are not transcript entries.
    if (TRANSIENT.has(env.event)) {
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
    const closed = panel.approvals.onMessage(msg);
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
      // the worker's rejection (message, code) when there is one
      o.detail = r.rejection || (r.detail ? { message: r.detail } : null);
    }
  },
  logs(msg) {
    const v = state.views.get(msg.session);
    if (!v) return;
    v.logs = logTail(msg.lines, msg.line_meta, msg.dropped, msg.omitted);
    v.logsAt = new Date().toISOString();
    v.logsV++;
  },
  plan(msg) {
    const v = state.views.get(msg.session);
    if (!v || !msg.plan) return;
    if (!v.plan || !(msg.plan.revision < v.plan.revision)) v.plan = msg.plan;
  },
  snapshot() {},
  pong() {
    onPong();
  },
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
        panel.approvals.onAccepted(msg);
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
        if (!panel.approvals.onError(msg)) toast(`Decision refused: ${text}`, 'error');
        return;
      case 'worker_action_failed': {
        const session = msg.session || req.session;
        if (session) state.busy.delete(session);
        toast(`${msg.action || req.action || 'Worker action'} failed for ${session || 'the session'}: ${text}`, 'error');
        return;
      }
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

export function onMessage(msg) {
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

