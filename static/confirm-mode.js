// The per-session confirmation mode: Confirm (the worker asks the hub, and
// the operator answers in the Approvals tray), Approve all or Deny all (the
// worker decides every call that needs approval itself, without asking).
// It travels as `options.confirmation.mode` (ask | approve | deny) with
// every input the panel sends, so a choice takes effect at the next run.
//
// The choice is remembered per session in localStorage together with the
// worker incarnation (its worker_id) it was made for. A worker starts in
// `ask` and keeps a mode it was sent for its later runs only while it
// lives, so when another worker connects the remembered choice is cleared
// rather than silently re-applied to a process nobody chose it for.

import { $, h } from './dom.js';
import { state, render } from './state.js';
import { confirmDialog, toast } from './dialogs.js';

export const MODES = {
  ask: { label: 'Confirm', detail: 'every tool call that needs approval waits for a decision in the Approvals tray' },
  approve: { label: 'Approve all', detail: 'every tool call that needs approval is approved by the worker without asking' },
  deny: { label: 'Deny all', detail: 'every tool call that needs approval is denied by the worker without asking' },
};

const KEY = 'simplex-hub:confirm-mode';
const MAX_ENTRIES = 256;

function load() {
  try {
    const raw = JSON.parse(localStorage.getItem(KEY) || '{}');
    const out = new Map();
    if (raw && typeof raw === 'object') {
      for (const [id, rec] of Object.entries(raw)) {
        if (rec && (rec.mode === 'approve' || rec.mode === 'deny')) out.set(id, { mode: rec.mode, worker: typeof rec.worker === 'string' ? rec.worker : null });
      }
    }
    return out;
  } catch {
    return new Map();
  }
}

let records = load();

function save() {
  while (records.size > MAX_ENTRIES) records.delete(records.keys().next().value);
  try {
    if (records.size === 0) localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, JSON.stringify(Object.fromEntries(records)));
  } catch {
    /* storage unavailable: the choice lasts for this page */
  }
}

/** The worker_id of the session's connected, verified worker, or null. */
function liveWorker(desc) {
  if (!desc || !desc.connected || !desc.identity || desc.identity.state !== 'live') return null;
  return typeof desc.identity.worker_id === 'string' && desc.identity.worker_id ? desc.identity.worker_id : null;
}

/**
 * Keeps the remembered choices in step with the sessions: a choice made
 * while no worker was verified binds to the next live one; a choice for
 * an earlier worker is cleared (with a notice) when another one is live;
 * a deleted session's choice is dropped. Cheap: one map lookup per entry.
 */
export function reconcileModes() {
  let changed = false;
  let noticed = false;
  for (const [id, rec] of [...records]) {
    const desc = state.sessions.get(id);
    if (!desc) {
      if (state.started) {
        records.delete(id);
        changed = true;
      }
      continue;
    }
    const worker = liveWorker(desc);
    if (!worker) continue;
    if (rec.worker === null) {
      rec.worker = worker;
      changed = true;
    } else if (rec.worker !== worker) {
      records.delete(id);
      changed = true;
      const text = `The confirmation mode of ${id} is back to Confirm: a new worker (${worker.slice(0, 8)}) connected, and a new worker asks for every approval until told otherwise. “${MODES[rec.mode].label}” applied to the previous worker only.`;
      const v = state.views.get(id);
      if (v) v.notices.add('mode', text);
      else state.notices.add('mode', text);
      noticed = true;
    }
  }
  if (changed) save();
  if (noticed) render(); // the notices were drawn before this ran
}

/** The mode the next input of `session` carries: `ask`, `approve` or `deny`. */
export function confirmMode(session) {
  const rec = records.get(session);
  return rec ? rec.mode : 'ask';
}

/** `{confirmation: {mode}}` for an input's options. */
export function confirmationOption(session) {
  return { confirmation: { mode: confirmMode(session) } };
}

/**
 * Changes the mode of `session`. Approve all is confirmed first. Resolves
 * true when the mode changed.
 */
export async function chooseMode(session, mode) {
  if (!MODES[mode] || !state.sessions.has(session)) return false;
  if (mode === confirmMode(session)) return false;
  if (mode === 'approve') {
    const ok = await confirmDialog({
      title: `Approve every tool call of ${session} automatically?`,
      body: [
        'From the next input on, the worker approves every tool call that needs approval by itself: nothing appears in the Approvals tray and its commands run with the worker’s rights on this host.',
        'The mode stays until you change it here or another worker process starts (a new worker always starts in Confirm).',
      ],
      ok: 'Approve all',
      danger: true,
    });
    if (!ok) {
      render();
      return false;
    }
  }
  if (mode === 'ask') records.delete(session);
  else {
    records.delete(session); // re-inserted last: the newest is kept longest
    records.set(session, { mode, worker: liveWorker(state.sessions.get(session)) });
  }
  save();
  toast(`Confirmation mode of ${session}: ${MODES[mode].label}. It is sent with the next input.`, mode === 'approve' ? 'warn' : 'info');
  render();
  return true;
}

// ---------------------------------------------------------------------------
// The composer's control
// ---------------------------------------------------------------------------

let sig = null;

/** Shows the selected session's mode in the composer. */
export function renderModeControl() {
  reconcileModes();
  const select = $('confirm-mode');
  const id = state.selected;
  const mode = id ? confirmMode(id) : 'ask';
  select.disabled = !id || !state.sessions.has(id);
  const now = `${id}|${mode}`;
  if (now === sig) return;
  sig = now;
  select.value = mode;
  select.className = `confirm-mode mode-${mode}`;
  select.title = `Approvals: ${MODES[mode].detail}. Sent as options.confirmation.mode with each input.`;
  $('confirm-mode-group').classList.toggle('mode-risk', mode !== 'ask');
}

export function wireModeControl() {
  const select = $('confirm-mode');
  for (const [value, m] of Object.entries(MODES)) select.appendChild(h('option', { value, text: m.label }));
  select.addEventListener('change', async () => {
    const id = state.selected;
    const wanted = select.value;
    sig = null;
    if (!id) return;
    await chooseMode(id, wanted);
    sig = null;
    renderModeControl();
  });
  window.addEventListener('storage', (e) => {
    if (e.key === KEY || e.key === null) {
      records = load();
      sig = null;
      render();
    }
  });
}
