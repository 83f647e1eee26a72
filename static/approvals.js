// Tool approvals from every session, in one tray. A decision is sent once
// and locks its prompt; it is never resent automatically. Without a
// settlement after 8 s the panel asks GET /api/sessions/:id whether the
// prompt is still open, and only then offers an explicit retry.

import { h, jsonBlock, fmtBytes, fmtTime, uuid, setChildren } from './dom.js';
import { childLabel, parentOf } from './inspector.js';

/** Time without settlement before the outcome is checked. */
export const SETTLE_MS = 8000;
/** Deadline of the outcome check itself. */
const CHECK_MS = 8000;

const OPEN_STATES = new Set(['awaiting-identity', 'awaiting-decision', 'decided']);

/**
 * A closing prompt's outcome `{phase, detail}` as one word: the decision
 * (`approved`, `denied`) when it was answered, else why it closed
 * (`deadline`, `disconnected`, `shutdown`, ...).
 */
export function outcomeWord(outcome) {
  if (!outcome || typeof outcome !== 'object') return typeof outcome === 'string' ? outcome : null;
  return outcome.phase === 'decided' && outcome.detail ? String(outcome.detail) : String(outcome.phase || '');
}

export class Approvals {
  constructor({ send, api, onChange, onSelect, toast, describe }) {
    this.send = send;
    this.describe = describe || (() => null);
    this.api = api;
    this.onChange = onChange;
    this.onSelect = onSelect;
    this.toast = toast;
    /** confirmation_id -> {session, prompt, attempt} */
    this.items = new Map();
    this.cards = new Map();
    /**
     * Prompts known to be closed. A session description built before a
     * prompt retired can arrive after its retirement; it must not bring
     * the prompt back. Confirmation ids are never reused.
     */
    this.retired = new Set();
    this.v = 0;
  }

  retire(id) {
    this.retired.add(id);
    if (this.retired.size > 2000) this.retired.delete(this.retired.values().next().value);
    this.drop(id);
  }

  changed(session) {
    this.v++;
    this.onChange(session);
  }

  /** Open prompts of one session (for counts and tool cards). */
  forSession(session) {
    const out = [];
    for (const it of this.items.values()) if (it.session === session) out.push(it.prompt);
    return out;
  }

  count(session) {
    let n = 0;
    for (const it of this.items.values()) if (it.session === session && it.prompt.state !== 'decided' && !this.quiet(it)) n++;
    return n;
  }

  /** Prompts the tray shows (see `quiet`). */
  visibleCount() {
    let n = 0;
    for (const it of this.items.values()) if (!this.quiet(it)) n++;
    return n;
  }

  /**
   * Whether a prompt stays out of the tray: a headless child's prompt
   * that its safety policy (deny or approve) answers by itself, and that
   * no operator has been shown yet. The hub applies the policy when the
   * request becomes decidable, so a held prompt of such a child is shown
   * only if the policy is back to ask by then (it then turns
   * awaiting-decision); a prompt first seen decided was the policy's.
   */
  quiet(it) {
    if (it.shown || !this.subagentOf(it)) return false;
    if (it.prompt.state === 'decided') return true;
    if (it.prompt.state !== 'awaiting-identity') return false;
    const d = this.describe(it.session);
    const policy = d && d.subagent ? d.subagent.policy : 'ask';
    return policy === 'deny' || policy === 'approve';
  }

  /**
   * Takes the open prompts of a session description. Live descriptions
   * can be built before a concurrent open or close and arrive after it,
   * so while connected they only add (never resurrecting a retired
   * prompt); `confirmation` messages open and close prompts. With
   * `authoritative` (the connect-time snapshot) absent prompts are dropped.
   */
  syncSession(session, confirmations, authoritative = false) {
    const seen = new Set();
    let changed = false;
    for (const p of Array.isArray(confirmations) ? confirmations : []) {
      if (!p || typeof p.confirmation_id !== 'string') continue;
      if (!OPEN_STATES.has(p.state)) continue;
      seen.add(p.confirmation_id);
      changed = this.upsert(session, p) || changed;
    }
    for (const [id, it] of this.items) {
      if (authoritative && it.session === session && !seen.has(id)) {
        if (it.attempt) this.toast(`The approval prompt for ${it.prompt.call?.name || 'a tool call'} in ${session} is no longer open. That alone does not mean the tool ran.`, 'info');
        this.retire(id);
        changed = true;
      }
    }
    if (changed) this.changed(session);
  }

  upsert(session, prompt) {
    if (this.retired.has(prompt.confirmation_id)) return false;
    const it = this.items.get(prompt.confirmation_id);
    if (!it) {
      this.items.set(prompt.confirmation_id, { session, prompt, attempt: null, v: 0 });
      return true;
    }
    // Session descriptions may carry a prompt without the subagent label
    // that confirmation messages add: keep the label.
    if (it.prompt.subagent && !prompt.subagent) prompt = { ...prompt, subagent: it.prompt.subagent };
    if (JSON.stringify(it.prompt) === JSON.stringify(prompt)) return false;
    it.prompt = prompt;
    it.v++;
    if (it.attempt && prompt.state === 'decided') this.setAttempt(it, 'decided');
    return true;
  }

  drop(id) {
    const it = this.items.get(id);
    if (it && it.attempt) clearTimeout(it.attempt.timer);
    this.items.delete(id);
  }

  removeSession(session) {
    for (const [id, it] of this.items) if (it.session === session) this.drop(id);
    this.changed(session);
  }

  /**
   * A `confirmation` message. Returns the closed prompt and its outcome
   * when the prompt left, so the caller can record it on the tool card.
   */
  onMessage(msg) {
    const p = msg.confirmation;
    if (!p || typeof p.confirmation_id !== 'string') return null;
    if (msg.open && OPEN_STATES.has(p.state)) {
      if (this.upsert(msg.session, p)) this.changed(msg.session);
      return null;
    }
    const had = this.items.get(p.confirmation_id);
    this.retire(p.confirmation_id);
    this.changed(msg.session);
    const outcome = outcomeWord(msg.outcome) || p.decision || p.state;
    if (had && had.attempt && msg.outcome && outcome !== had.attempt.decision) {
      this.toast(`Approval for ${p.call?.name || 'a tool call'} in ${msg.session} closed as “${outcome}”.`, 'warn');
    }
    return { prompt: p, outcome };
  }

  setAttempt(it, state, note) {
    if (!it.attempt) return;
    it.attempt.state = state;
    it.attempt.note = note || null;
    it.v++;
  }

  decide(id, decision, reason) {
    const it = this.items.get(id);
    if (!it) return;
    if (it.attempt && it.attempt.state !== 'open-retry') return; // locked
    if (it.prompt.state !== 'awaiting-decision') return;
    const requestId = `cf-${uuid()}`;
    const msg = {
      type: 'confirmation',
      session: it.session,
      confirmation_id: id,
      decision,
      request_id: requestId,
    };
    if (reason) msg.reason = reason;
    if (it.attempt) clearTimeout(it.attempt.timer);
    it.attempt = { requestId, decision, reason, state: 'sending', note: null, timer: null, at: Date.now() };
    it.v++;
    if (!this.send(msg)) {
      this.setAttempt(it, 'needs-check', 'Not connected: the decision was not sent. Reconnect, then check the prompt.');
      this.changed(it.session);
      return;
    }
    it.attempt.timer = setTimeout(() => this.check(id), SETTLE_MS);
    this.changed(it.session);
  }

  byRequest(requestId) {
    for (const [id, it] of this.items) if (it.attempt && it.attempt.requestId === requestId) return [id, it];
    return [null, null];
  }

  onAccepted(msg) {
    const [, it] = this.byRequest(msg.request_id);
    if (!it) return;
    if (it.attempt.state === 'sending') this.setAttempt(it, 'delivered');
    this.changed(it.session);
  }

  /** `unknown_confirmation` / `confirmation_rejected` for one of ours. */
  onError(msg) {
    const req = msg.request || {};
    let [id, it] = this.byRequest(req.request_id);
    if (!it && req.confirmation_id) {
      id = req.confirmation_id;
      it = this.items.get(id);
    }
    if (!it || !it.attempt) return false;
    clearTimeout(it.attempt.timer);
    this.setAttempt(it, 'checking', `The hub refused the decision (${msg.error}): checking the prompt…`);
    this.changed(it.session);
    this.check(id);
    return true;
  }

  /** After a disconnect the fate of in-flight decisions is unknown. */
  onDisconnect() {
    for (const it of this.items.values()) {
      if (it.attempt && ['sending', 'delivered', 'checking', 'open-retry'].includes(it.attempt.state)) {
        clearTimeout(it.attempt.timer);
        this.setAttempt(it, 'needs-check', 'The panel connection dropped: the outcome is checked after reconnecting.');
      }
    }
    this.changed(null);
  }

  onReconnect() {
    for (const [id, it] of this.items) if (it.attempt && it.attempt.state === 'needs-check') this.check(id);
  }

  /** Asks the hub whether the prompt is still open. Never resends. */
  async check(id) {
    const it = this.items.get(id);
    if (!it || !it.attempt) return;
    clearTimeout(it.attempt.timer);
    const attempt = it.attempt;
    this.setAttempt(it, 'checking', 'No settlement yet: checking the outcome…');
    this.changed(it.session);
    let res;
    try {
      res = await this.api('GET', `/api/sessions/${encodeURIComponent(it.session)}`, undefined, { timeoutMs: CHECK_MS });
    } catch {
      res = null;
    }
    const now = this.items.get(id);
    if (!now || now.attempt !== attempt) return; // settled or superseded meanwhile
    if (!res || !res.ok || !res.body || !res.body.session) {
      if (res && res.status === 404) {
        this.drop(id);
        this.toast(`Session ${it.session} is gone; its prompt closed.`, 'warn');
        this.changed(it.session);
        return;
      }
      this.setAttempt(now, 'check-failed', 'Could not check the outcome.');
      this.changed(it.session);
      return;
    }
    const list = Array.isArray(res.body.session.confirmations) ? res.body.session.confirmations : [];
    const p = list.find((c) => c && c.confirmation_id === id);
    if (!p || !OPEN_STATES.has(p.state)) {
      this.retire(id);
      this.toast(`The approval prompt for ${it.prompt.call?.name || 'a tool call'} in ${it.session} is no longer open. That alone does not mean the tool ran.`, 'info');
      this.changed(it.session);
      return;
    }
    now.prompt = p;
    if (p.state === 'decided') {
      this.setAttempt(now, 'decided', `The hub recorded “${p.decision}”; waiting for the worker to close the request.`);
    } else {
      this.setAttempt(now, 'open-retry', 'Still open after 8 s: your decision may not have arrived. Decide again explicitly if you want to.');
    }
    this.changed(it.session);
  }

  /**
   * While a prompt waits for the worker identity, its session is re-read
   * every 2 s: the hub re-judges held prompts when the worker names itself
   * but does not always announce the change, and a disabled decision must
   * not stay disabled after the prompt became answerable.
   */
  async pollHeld() {
    const sessions = new Set();
    for (const it of this.items.values()) if (it.prompt.state === 'awaiting-identity') sessions.add(it.session);
    for (const session of sessions) {
      let res;
      try {
        res = await this.api('GET', `/api/sessions/${encodeURIComponent(session)}`, undefined, { timeoutMs: CHECK_MS });
      } catch {
        continue;
      }
      const list = res && res.ok && res.body && res.body.session && Array.isArray(res.body.session.confirmations) ? res.body.session.confirmations : [];
      let changed = false;
      for (const p of list) {
        const it = p && this.items.get(p.confirmation_id);
        if (it && it.prompt.state === 'awaiting-identity' && p.state !== 'awaiting-identity' && OPEN_STATES.has(p.state)) {
          changed = this.upsert(session, p) || changed;
        }
      }
      if (changed) this.changed(session);
    }
  }

  // -------------------------------------------------------------------------
  // Rendering
  // -------------------------------------------------------------------------

  /**
   * `{child, parent}` when the prompt comes from a headless subagent: from
   * the prompt's own label, else from the session's description.
   */
  subagentOf(it) {
    const label = it.prompt.subagent;
    if (label && typeof label === 'object' && typeof label.parent_session_id === 'string') {
      return { child: it.session, parent: label.parent_session_id };
    }
    const parent = parentOf(this.describe(it.session));
    return typeof parent === 'string' ? { child: it.session, parent } : null;
  }

  render(section, list, countEl, selected) {
    const entries = [...this.items.entries()].filter(([, it]) => !this.quiet(it)).sort((a, b) => String(a[1].prompt.received_at).localeCompare(String(b[1].prompt.received_at)));
    for (const [, it] of entries) it.shown = true;
    section.hidden = entries.length === 0;
    countEl.textContent = entries.length ? `(${entries.length})` : '';
    const keep = new Set();
    const desired = [];
    for (const [id, it] of entries) {
      keep.add(id);
      let card = this.cards.get(id);
      if (!card) {
        card = this.buildCard(id);
        this.cards.set(id, card);
      }
      const sig = `${it.v}|${it.attempt ? it.attempt.state : ''}|${JSON.stringify(it.prompt)}|${selected === it.session}|${JSON.stringify(this.subagentOf(it))}`;
      if (card.v !== sig) {
        this.fillCard(card, it, selected);
        card.v = sig;
      }
      desired.push(card.el);
    }
    for (const id of [...this.cards.keys()]) if (!keep.has(id)) this.cards.delete(id);
    const current = list.children;
    for (let i = 0; i < desired.length; i++) if (current[i] !== desired[i]) list.insertBefore(desired[i], current[i] || null);
    while (list.children.length > desired.length) list.lastElementChild.remove();
  }

  buildCard(id) {
    const head = h('div', { class: 'prompt-head' });
    const body = h('div', { class: 'prompt-body' });
    const reasonId = `reason-${id}`;
    const reason = h('input', { id: reasonId, class: 'reason', type: 'text', maxlength: '500', placeholder: 'optional reason', autocomplete: 'off' });
    const approve = h('button', { type: 'button', class: 'approve' });
    const deny = h('button', { type: 'button', class: 'deny' });
    const check = h('button', { type: 'button', class: 'secondary', text: 'Check outcome', hidden: true });
    const status = h('p', { class: 'prompt-status', role: 'status' });
    const lockNow = () => {
      const it = this.items.get(id);
      if (it && it.attempt && it.attempt.state !== 'open-retry') {
        approve.disabled = true;
        deny.disabled = true;
        reason.disabled = true;
      }
    };
    approve.addEventListener('click', () => {
      this.decide(id, 'approved', reason.value.trim());
      lockNow();
    });
    deny.addEventListener('click', () => {
      this.decide(id, 'denied', reason.value.trim());
      lockNow();
    });
    check.addEventListener('click', () => this.check(id));
    const el = h(
      'article',
      { class: 'prompt', dataset: { confirmationId: id }, 'aria-label': 'Approval request' },
      head,
      body,
      h('div', { class: 'prompt-actions' }, h('label', { class: 'sr-only', for: reasonId, text: 'Reason (optional)' }), reason, approve, deny, check),
      status,
    );
    return { el, head, body, reason, approve, deny, check, status, v: null };
  }

  fillCard(card, it, selected) {
    const p = it.prompt;
    const call = p.call || {};
    card.el.classList.toggle('current', selected === it.session);
    const family = this.subagentOf(it);
    setChildren(
      card.head,
      h('button', { type: 'button', class: 'link session-link', title: 'Show this session', onclick: () => this.onSelect(it.session), text: family ? childLabel(it.session) : it.session }),
      family ? h('span', { class: 'chip subagent-chip', title: `Headless subagent ${family.child}, forked by ${family.parent}`, text: `child ${childLabel(family.child)} of parent ${family.parent}` }) : null,
      h('code', { class: 'tool-name', text: call.name || '(unnamed call)' }),
      call.type ? h('span', { class: 'chip', title: 'call type', text: call.type }) : null,
      call.security ? h('span', { class: `chip sec-${call.security}`, title: 'security classification', text: call.security }) : null,
      h('span', { class: `chip state-${p.state}`, text: p.state }),
      p.verified === false ? h('span', { class: 'chip warn', text: 'identity not verified' }) : null,
      h('span', { class: 'muted small', text: `received ${fmtTime(p.received_at)}${p.deadline_at ? ` · deadline ${fmtTime(p.deadline_at)} (advisory)` : ''}` }),
    );
    const notes = [];
    if (p.arguments_truncated) {
      notes.push(
        h('p', {
          class: 'warn-text small',
          text: `Arguments shortened for display: the original is ${typeof p.arguments_bytes === 'number' ? `${fmtBytes(p.arguments_bytes)} (${p.arguments_bytes} bytes)` : 'larger'}. Your decision applies to the full original call.`,
        }),
      );
    }
    setChildren(
      card.body,
      notes,
      call.arguments !== undefined ? jsonBlock(call.arguments, { maxChars: 32768, maxString: 1024, cls: 'json args' }) : h('p', { class: 'muted', text: '(no arguments)' }),
      call.extras !== undefined ? jsonBlock(call.extras, { maxChars: 8192, cls: 'json args' }) : null,
    );
    const a = it.attempt;
    const locked = a && a.state !== 'open-retry';
    const identity = p.state === 'awaiting-identity';
    const decided = p.state === 'decided';
    const retry = a && a.state === 'open-retry';
    card.approve.textContent = retry ? 'Approve again' : 'Approve';
    card.deny.textContent = retry ? 'Deny again' : 'Deny';
    const disabled = Boolean(locked) || identity || decided;
    card.approve.disabled = disabled;
    card.deny.disabled = disabled;
    card.reason.disabled = disabled;
    const why = identity
      ? 'Waiting for the worker identity to be verified: decisions are disabled until the event connection names the same worker.'
      : decided
        ? `Decided: ${p.decision}${p.reason ? ` (${p.reason})` : ''}. Waiting for the worker to close the request.`
        : '';
    for (const b of [card.approve, card.deny]) {
      if (why) {
        b.title = why;
        b.setAttribute('aria-description', why);
      } else {
        b.removeAttribute('title');
        b.removeAttribute('aria-description');
      }
    }
    card.check.hidden = !(a && (a.state === 'check-failed' || a.state === 'needs-check'));
    let text = why;
    if (a) {
      const label = a.decision === 'approved' ? 'Approve' : 'Deny';
      const stateText = {
        sending: `${label} sent; waiting for the hub…`,
        delivered: `${label} delivered to the hub; waiting for the worker to settle…`,
        checking: a.note || 'Checking the outcome…',
        'open-retry': a.note,
        decided: a.note || `Decided: ${p.decision}.`,
        'check-failed': a.note,
        'needs-check': a.note,
      }[a.state];
      text = stateText || text;
    }
    card.status.textContent = text || '';
    card.status.hidden = !text;
  }
}
