// Operator actions: what the panel's buttons, keys and links do. Each one
// changes the state, sends to the hub or asks the JSON API, and ends with
// render(); selection, tabs and drawers, the description refresh, the
// snapshot, worker controls, deletion, a headless child's policy, and input.

import { $, uuid } from './dom.js';
import { api } from './net.js';
import { isHeadless, childLabel } from './inspector.js';
import { state, panel, inspectorCache, render, send, subscribe, ensureView, busyReason, composerBlock, mergeDescription } from './state.js';
import { toast, confirmDialog } from './dialogs.js';
import { chosenSkill, composeMessage, clearSkill } from './skills.js';
import { confirmationOption } from './confirm-mode.js';

let policySeq = 0;

// ---------------------------------------------------------------------------
// Selection, tabs and drawers
// ---------------------------------------------------------------------------

export function select(id) {
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

export function selectTab(tab, focus) {
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

/** Narrow windows show the session list and the inspector as drawers. */
export const narrow = window.matchMedia('(max-width: 760px)');

export function setDrawer(which) {
  state.drawer = which;
  $('sidebar').classList.toggle('open', which === 'sessions');
  $('inspector').classList.toggle('open', which === 'inspector');
  $('backdrop').hidden = !which;
  $('toggle-sessions').setAttribute('aria-expanded', String(which === 'sessions'));
  if (narrow.matches) $('toggle-inspector').setAttribute('aria-expanded', String(which === 'inspector'));
  if (which === 'sessions') $('session-list').querySelector('button')?.focus();
  if (which === 'inspector') $('inspector').querySelector('[aria-selected="true"]')?.focus();
}

// ---------------------------------------------------------------------------
// Data the socket does not push
// ---------------------------------------------------------------------------

/**
 * The hub rebroadcasts a description when the connection, process or
 * prompts change, not for every event; statistics and request records of
 * the selected session are refreshed from the JSON API. Only fields that
 * socket messages do not carry are taken, so an answer built before a
 * newer socket message cannot roll anything back.
 */
let refreshing = false;
export async function refreshDescription() {
  const id = state.selected;
  if (!id || refreshing || !panel.socket || !panel.socket.isOpen() || document.hidden) return;
  refreshing = true;
  try {
    const res = await api('GET', `/api/sessions/${encodeURIComponent(id)}`);
    const fresh = res.ok && res.body && res.body.session;
    const d = state.sessions.get(id);
    if (fresh && d) {
      mergeDescription(d, fresh);
      render();
    }
  } catch {
    /* the next tick retries */
  } finally {
    refreshing = false;
  }
}

export async function loadSnapshot(v) {
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

/** Reads the session's permission grants (`GET …/grants`). */
export async function loadGrants(v) {
  if (!v) return;
  v.grants = { loading: true };
  v.grantsV++;
  render();
  let grants;
  try {
    const res = await api('GET', `/api/sessions/${encodeURIComponent(v.id)}/grants`);
    grants = res.ok ? { list: Array.isArray(res.body.grants) ? res.body.grants : [] } : { error: `${res.status}: ${(res.body && (res.body.message || res.body.error)) || 'failed'}` };
  } catch (err) {
    grants = { error: `Could not load the grants: ${err.name === 'AbortError' ? 'timed out' : err.message}` };
  }
  v.grants = grants;
  v.grantsV++;
  render();
}

/** Revokes one grant after a confirmation, then reloads the list. */
export async function revokeGrant(v, grant) {
  if (!v) return;
  const ok = await confirmDialog({
    title: 'Revoke this grant?',
    body: [`Requests for exactly this ${grant.tool} call will ask again.`],
    ok: 'Revoke',
    danger: true,
  });
  if (!ok) return;
  try {
    const res = await api('DELETE', `/api/sessions/${encodeURIComponent(v.id)}/grants/${encodeURIComponent(grant.grant_id)}`);
    if (!res.ok) toast(`Revoke failed: ${(res.body && (res.body.message || res.body.error)) || res.status}`, 'error');
  } catch (err) {
    toast(`Revoke failed: ${err.message}`, 'error');
  }
  await loadGrants(v);
}

// ---------------------------------------------------------------------------
// Worker controls, deletion and a headless child's policy
// ---------------------------------------------------------------------------

export async function workerAction(action) {
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

export async function deleteSession() {
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
export async function setPolicy(session, policy) {
  const desc = state.sessions.get(session);
  const current = desc && desc.subagent ? desc.subagent.policy : null;
  const restore = () => {
    panel.headlessView.sig = null; // the radios show the hub's policy again
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

export function refreshView() {
  const v = state.selected && state.views.get(state.selected);
  if (!v) return;
  v.historyStale = true;
  subscribe(v, { replace: true });
  render();
}

// ---------------------------------------------------------------------------
// Composer
// ---------------------------------------------------------------------------

export function sendInput(operation) {
  const id = state.selected;
  const v = id && state.views.get(id);
  if (!v || composerBlock()) return;
  const typed = $('message').value;
  // A chosen skill's text becomes the message, with what was typed put in
  // its place (docs/skills.md); the worker sees ordinary content.
  const skill = operation === 'message' ? chosenSkill() : null;
  const text = skill ? composeMessage(skill.text, typed) : typed;
  if (operation === 'message' && text.trim() === '') {
    $('message').focus();
    return;
  }
  const requestId = uuid();
  const msg = { type: 'input', session: id, operation, request_id: requestId };
  if (operation === 'message') msg.content = [{ type: 'text', modality: 'text', raw: text }];
  // Every input carries the session's confirmation mode (confirm-mode.js).
  msg.options = confirmationOption(id);
  const model = $('model').value;
  if (model) msg.options.model = { model };
  v.outbox.set(requestId, { requestId, operation, text: operation === 'message' ? text : null, state: 'sending', detail: null, at: new Date().toISOString() });
  if (operation === 'message') v.rememberText(requestId, text);
  if (!send(msg)) {
    const o = v.outbox.get(requestId);
    o.state = 'not_sent';
    o.detail = { message: 'not connected to the hub' };
  } else if (operation === 'message') {
    $('message').value = '';
    if (skill) clearSkill();
  }
  state.follow = true;
  render();
}
