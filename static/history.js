// Worker history: the conversation as the connected worker keeps it, read
// page by page over the panel socket (read-only; the hub never retains the
// live replies) into the selected view's restored history.

import { state, render, send, enforceBudget } from './state.js';

const HISTORY_PAGE_MS = 10000;

export function maybeLoadHistory(v, force = false) {
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

export function historyFailed(v, why) {
  clearTimeout(v.historyTimer);
  v.history.state = 'error';
  v.history.error = why;
  v.history.pending = null;
  render();
}

/** A `history` or `history_error` event (transient: its hub_seq is the current sequence, not its own). */
export function onHistoryEvent(v, env) {
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
