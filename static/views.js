// The per-session display model: the transcript copy (bounded), its
// projection into rounds, request bookkeeping, worker history, notices.
// Pure data: no DOM here except the render cache slot `els`.

import { utf8Length, clip } from './dom.js';

const MiB = 1024 * 1024;

/**
 * What a request record says went wrong, as `{message, code?}`: the
 * worker's rejection when there is one, else the record's `detail` text.
 */
function recordDetail(rec) {
  if (!rec) return null;
  if (rec.rejection && typeof rec.rejection === 'object') return rec.rejection;
  return rec.detail ? { message: String(rec.detail) } : null;
}
/** Transcript JSON kept per view. */
export const VIEW_BYTES = 8 * MiB;
/** Worker history JSON kept per view. */
export const HISTORY_BYTES = 8 * MiB;
/** All views together; inactive views are evicted beyond this. */
export const AGGREGATE_BYTES = 40 * MiB;
/** Views kept subscribed at once (the selected one included). */
export const MAX_VIEWS = 8;
/** After trimming, a view holds at most this much. */
const TRIM_TARGET = 6 * MiB;
const MAX_NOTICES = 8;
const NOTICE_BYTES = 16 * 1024;
const MAX_APPROVALS = 500;
const USER_TEXT_MAX = 8 * 1024;
const USER_TEXTS_MAX = 64;

/** Events that only update state shown elsewhere (inspector, composer). */
const QUIET = new Set(['status', 'options', 'persisted', 'input_committed', 'run_started']);
/** Replies to read-only queries: forwarded live, never retained. */
export const TRANSIENT = new Set(['history', 'history_error', 'answer', 'answer_error']);

/** Notices kept apart from the transcript so replacing it keeps them. */
export class Notices {
  constructor() {
    this.list = [];
    this.seq = 0;
    this.v = 0;
  }

  add(kind, text) {
    const body = clip(String(text), 2048);
    this.list.push({ id: ++this.seq, kind, text: body, at: new Date().toISOString() });
    let bytes = this.list.reduce((n, x) => n + utf8Length(x.text), 0);
    while (this.list.length > MAX_NOTICES || (bytes > NOTICE_BYTES && this.list.length > 1)) {
      bytes -= utf8Length(this.list.shift().text);
    }
    this.v++;
  }

  dismiss(id) {
    this.list = this.list.filter((n) => n.id !== id);
    this.v++;
  }
}

function storageKey(id) {
  return `simplex-hub:texts:${id}`;
}

function loadUserTexts(id) {
  try {
    const raw = sessionStorage.getItem(storageKey(id));
    const arr = raw ? JSON.parse(raw) : [];
    return new Map(Array.isArray(arr) ? arr.filter((x) => Array.isArray(x) && x.length === 2) : []);
  } catch {
    return new Map();
  }
}

export function emptyHistory() {
  return {
    state: 'idle', // idle | loading | done | error
    workerId: null,
    revision: null,
    turns: [],
    bytes: 0,
    pending: null, // request id of the page in flight
    cursor: { start: 0, step: 0 },
    restarts: 0,
    error: null,
    truncated: false,
    total: 0,
  };
}

export class View {
  constructor(id) {
    this.id = id;
    this.notices = new Notices();
    this.outbox = new Map();
    this.userTexts = loadUserTexts(id);
    this.dismissed = new Set();
    this.approvals = new Map();
    this.sub = null;
    this.lastUsed = Date.now();
    this.evicted = false;
    this.logs = null;
    this.plan = null;
    this.snapshot = null;
    this.status = null;
    this.statusAt = null;
    this.options = null;
    this.optionsAt = null;
    this.historyUser = new Map();
    this.history = emptyHistory();
    this.historyStale = false;
    this.els = new Map();
    this.clear();
  }

  /** Drops the transcript copy and everything derived from it. */
  clear() {
    this.entries = [];
    this.sizes = [];
    this.bytes = 0;
    this.cursor = 0;
    this.epoch = null;
    this.ready = false;
    this.trimmed = 0;
    this.gaps = 0;
    this.reset();
  }

  /** Clears the projection (rounds) so it can be rebuilt from `entries`. */
  reset() {
    this.items = [];
    this.rounds = new Map();
    this.admitted = new Map();
    this.rejections = new Map();
    this.activeRun = null;
    this.els = new Map();
    this.itemSeq = 0;
    this.structure = (this.structure || 0) + 1;
  }

  historyBytes() {
    return this.history.bytes;
  }

  totalBytes() {
    return this.bytes + this.history.bytes;
  }

  // -------------------------------------------------------------------------
  // Transcript intake
  // -------------------------------------------------------------------------

  /**
   * Takes one retained entry (replay page or live event). Returns a gap
   * `[from, to]` when the entry starts after the expected sequence, and
   * `'dup'` for an entry already held.
   */
  accept(entry) {
    const seq = entry && typeof entry.hub_sequence === 'number' ? entry.hub_sequence : null;
    let gap = null;
    if (seq !== null) {
      if (seq <= this.cursor) return 'dup';
      if (seq > this.cursor + 1) {
        gap = [this.cursor + 1, seq - 1];
        this.gaps += 1;
      }
      this.cursor = seq;
    }
    this.store(entry);
    return gap;
  }

  store(entry) {
    let size = utf8Length(JSON.stringify(entry));
    let kept = entry;
    if (size > VIEW_BYTES) {
      kept = {
        type: 'event',
        event: entry.event,
        worker_id: entry.worker_id,
        request_id: entry.request_id,
        run_id: entry.run_id,
        sequence: entry.sequence,
        hub_sequence: entry.hub_sequence,
        received_at: entry.received_at,
        display_omitted: true,
        bytes: size,
        panel_omitted: true,
      };
      // The complete answer stays reachable through its source.
      const source = entry.event === 'model_response' && entry.data && typeof entry.data === 'object' ? entry.data.answer_source : undefined;
      if (source && typeof source === 'object' && JSON.stringify(source).length <= 1024) kept.answer_source = source;
      size = utf8Length(JSON.stringify(kept));
    }
    this.entries.push(kept);
    this.sizes.push(size);
    this.bytes += size;
    this.ingest(kept);
    if (this.bytes > VIEW_BYTES) this.trim();
  }

  trim() {
    let drop = 0;
    let freed = 0;
    while (this.bytes - freed > TRIM_TARGET && drop < this.entries.length - 1) {
      freed += this.sizes[drop];
      drop += 1;
    }
    if (drop === 0) return;
    this.entries.splice(0, drop);
    this.sizes.splice(0, drop);
    this.bytes -= freed;
    this.trimmed += drop;
    this.reset();
    for (const e of this.entries) this.ingest(e);
    this.notices.add(
      'trim',
      `${drop} older events were dropped from this browser's copy of the transcript (limit ${VIEW_BYTES / MiB} MiB per session).`,
    );
  }

  nextKey(prefix) {
    this.itemSeq += 1;
    return `${prefix}${this.itemSeq}`;
  }

  round(env) {
    const key = `r:${env.worker_id || ''}/${env.run_id}`;
    let r = this.rounds.get(key);
    if (!r) {
      r = {
        kind: 'round',
        key,
        workerId: env.worker_id || '',
        runId: env.run_id,
        requestId: null,
        operation: null,
        blocks: [],
        tools: new Map(),
        finished: null,
        started: false,
        committed: false,
        persisted: null,
        at: env.received_at,
        v: 0,
      };
      this.rounds.set(key, r);
      this.items.push(r);
      this.structure += 1;
    }
    return r;
  }

  system(level, text, entry) {
    this.items.push({ kind: 'system', key: this.nextKey('s:'), level, text, entry, at: entry?.received_at, v: 0 });
    this.structure += 1;
  }

  generic(entry, round) {
    if (round) {
      round.blocks.push({ type: 'generic', entry });
      round.v++;
    } else {
      this.items.push({ kind: 'generic', key: this.nextKey('g:'), entry, v: 0 });
      this.structure += 1;
    }
  }

  tool(round, call, from) {
    const id = call && typeof call.id === 'string' ? call.id : `#${round.tools.size}`;
    let t = round.tools.get(id);
    if (!t) {
      t = { id, call, result: null, from };
      round.tools.set(id, t);
      round.blocks.push({ type: 'tool', id });
    } else if (call && !t.call) {
      t.call = call;
    }
    return t;
  }

  /** Projects one entry into the round model. */
  ingest(e) {
    const ev = typeof e.event === 'string' ? e.event : '';
    const data = e.data;
    const runId = typeof e.run_id === 'string' ? e.run_id : '';
    const inRun = runId !== '';
    if (e.display_omitted) {
      if (inRun && this.rounds.has(`r:${e.worker_id || ''}/${runId}`)) {
        const r = this.round(e);
        r.blocks.push({ type: 'omitted', entry: e });
        r.v++;
      } else {
        this.items.push({ kind: 'omitted', key: this.nextKey('o:'), entry: e, v: 0 });
        this.structure += 1;
      }
      return;
    }
    switch (ev) {
      case 'ready':
        this.setStatus(data, e.received_at);
        this.system('info', `Worker ready (${e.worker_id ? String(e.worker_id).slice(0, 8) : 'unknown id'})`, e);
        return;
      case 'status':
        this.setStatus(data, e.received_at);
        return;
      case 'options':
        if (data && typeof data === 'object') {
          this.options = data;
          this.optionsAt = e.received_at;
        }
        return;
      case 'input_admitted': {
        if (!inRun) break;
        const r = this.round(e);
        r.requestId = typeof e.request_id === 'string' ? e.request_id : null;
        r.operation = data && typeof data.operation === 'string' ? data.operation : 'message';
        if (r.requestId) this.admitted.set(r.requestId, r);
        r.v++;
        return;
      }
      case 'input_rejected': {
        const id = (data && typeof data.request_id === 'string' && data.request_id) || e.request_id;
        if (id) this.rejections.set(id, data || {});
        return;
      }
      case 'run_started': {
        if (!inRun) break;
        const r = this.round(e);
        r.started = true;
        this.activeRun = { runId, workerId: e.worker_id };
        r.v++;
        return;
      }
      case 'input_committed': {
        if (!inRun) break;
        const r = this.round(e);
        r.committed = true;
        r.v++;
        return;
      }
      case 'model_response': {
        if (!inRun) break;
        const r = this.round(e);
        r.blocks.push({ type: 'response', data: data && typeof data === 'object' ? data : {}, at: e.received_at });
        if (data && Array.isArray(data.invokes)) for (const call of data.invokes) this.tool(r, call, 'invokes');
        r.v++;
        return;
      }
      case 'tool_calls': {
        if (!inRun) break;
        const r = this.round(e);
        if (Array.isArray(data)) {
          for (const call of data) {
            if (call && call.display_omitted) r.blocks.push({ type: 'omitted', entry: { event: 'tool_calls', ...call } });
            else this.tool(r, call, 'tool_calls');
          }
        } else this.generic(e, r);
        r.v++;
        return;
      }
      case 'tool_results': {
        if (!inRun) break;
        const r = this.round(e);
        if (Array.isArray(data)) {
          for (const result of data) {
            if (result && result.display_omitted && !result.query) {
              r.blocks.push({ type: 'omitted', entry: { event: 'tool_results', ...result } });
              continue;
            }
            const q = result && typeof result.query === 'object' ? result.query : null;
            const t = this.tool(r, q, 'tool_results');
            t.result = result;
          }
        } else this.generic(e, r);
        r.v++;
        return;
      }
      case 'persisted': {
        if (!inRun) return;
        const r = this.rounds.get(`r:${e.worker_id || ''}/${runId}`);
        if (r) {
          r.persisted = data && data.boundary;
        }
        return;
      }
      case 'run_finished': {
        if (!inRun) break;
        const r = this.round(e);
        r.finished = data && typeof data === 'object' ? data : {};
        if (this.activeRun && this.activeRun.runId === runId) this.activeRun = null;
        // A status taken before the run settled (a cancel's answer says
        // active: true) no longer describes the worker.
        if (this.status && this.status.active) this.status = { ...this.status, active: false };
        r.v++;
        return;
      }
      case 'compact_finished': {
        const r = inRun ? this.round(e) : null;
        if (r) {
          r.blocks.push({ type: 'compact', data: data || {} });
          r.v++;
        } else this.generic(e, null);
        this.historyStale = true;
        return;
      }
      case 'error':
      case 'export_error': {
        const r = inRun ? this.rounds.get(`r:${e.worker_id || ''}/${runId}`) : null;
        if (r && !r.finished) {
          r.blocks.push({ type: 'error', event: ev, data: data || {} });
          r.v++;
        } else {
          const msg = data && typeof data.message === 'string' ? data.message : JSON.stringify(data);
          this.system('error', `${ev === 'export_error' ? 'Export error' : 'Worker error'}: ${msg}`, e);
        }
        return;
      }
      default:
        break;
    }
    if (QUIET.has(ev)) return;
    // Unknown (or malformed known) events: shown generically.
    const r = inRun ? this.rounds.get(`r:${e.worker_id || ''}/${runId}`) : null;
    this.generic(e, r && !r.finished ? r : null);
  }

  setStatus(data, at) {
    if (!data || typeof data !== 'object') return;
    this.status = data;
    this.statusAt = at;
    if (data.active === false) this.activeRun = null;
  }

  /** Whether a run is active, as far as this view knows. */
  runActive() {
    return Boolean(this.activeRun) || Boolean(this.status && this.status.active);
  }

  // -------------------------------------------------------------------------
  // Inputs
  // -------------------------------------------------------------------------

  rememberText(requestId, text) {
    this.userTexts.set(requestId, clip(text, USER_TEXT_MAX));
    while (this.userTexts.size > USER_TEXTS_MAX) this.userTexts.delete(this.userTexts.keys().next().value);
    try {
      sessionStorage.setItem(storageKey(this.id), JSON.stringify([...this.userTexts]));
    } catch {
      /* storage full or disabled: the text stays in memory */
    }
  }

  /** User content for a round: the text this panel sent, else history. */
  userFor(requestId) {
    if (!requestId) return null;
    if (this.userTexts.has(requestId)) return { text: this.userTexts.get(requestId), source: 'sent' };
    const hist = this.historyUser.get(requestId);
    if (hist) return { parts: hist.user, omitted: hist.omitted, internal: hist.internal, source: 'history' };
    return null;
  }

  /**
   * Inputs not (yet) bound to a run: this panel's outbox plus the hub's
   * request records for other senders that are still open or failed.
   */
  pending(description) {
    const records = new Map();
    for (const r of (description && description.requests) || []) records.set(r.request_id, r);
    const out = [];
    for (const o of this.outbox.values()) {
      if (this.admitted.has(o.requestId) || this.dismissed.has(o.requestId)) continue;
      const rec = records.get(o.requestId);
      const state = rec ? rec.state : o.state;
      if (state === 'admitted' && !rec) continue;
      out.push({
        requestId: o.requestId,
        operation: o.operation,
        text: o.text,
        state,
        detail: recordDetail(rec) || o.detail || this.rejections.get(o.requestId) || null,
        local: true,
        at: o.at,
      });
    }
    for (const rec of records.values()) {
      if (this.outbox.has(rec.request_id) || this.admitted.has(rec.request_id) || this.dismissed.has(rec.request_id)) continue;
      if (rec.state === 'admitted') continue;
      out.push({
        requestId: rec.request_id,
        operation: rec.operation,
        text: this.userTexts.get(rec.request_id) ?? null,
        state: rec.state,
        detail: recordDetail(rec) || this.rejections.get(rec.request_id) || null,
        local: false,
        at: rec.sent_at,
      });
    }
    return out;
  }

  recordApproval(runId, callId, info) {
    const key = `${runId}/${callId}`;
    this.approvals.delete(key);
    this.approvals.set(key, info);
    while (this.approvals.size > MAX_APPROVALS) this.approvals.delete(this.approvals.keys().next().value);
    for (const r of this.rounds.values()) if (r.runId === runId) r.v++;
  }

  // -------------------------------------------------------------------------
  // Worker history (read-only pages)
  // -------------------------------------------------------------------------

  historyBegin(workerId) {
    const restarts = this.history.workerId === workerId ? this.history.restarts : 0;
    this.history = emptyHistory();
    this.history.state = 'loading';
    this.history.workerId = workerId;
    this.history.restarts = restarts;
    this.historyStale = false;
  }

  /**
   * Takes one history page. Returns `{next: {start, step}}` to continue,
   * `{done: true}`, `{restart: true}` when the revision changed, or
   * `{error}` for an invalid page.
   */
  historyPage(data) {
    const hs = this.history;
    if (!data || typeof data !== 'object' || !Array.isArray(data.turns)) return { error: 'malformed history page' };
    if (typeof data.next !== 'number' || typeof data.total !== 'number') return { error: 'history page without a cursor' };
    if (hs.revision === null) hs.revision = data.revision;
    else if (data.revision !== hs.revision) return { restart: true };
    const size = utf8Length(JSON.stringify(data.turns));
    if (hs.bytes + size > HISTORY_BYTES) {
      hs.truncated = true;
      return { done: true };
    }
    hs.bytes += size;
    hs.total = data.total;
    for (const turn of data.turns) {
      if (!turn || typeof turn !== 'object') continue;
      const last = hs.turns[hs.turns.length - 1];
      const steps = Array.isArray(turn.steps) ? turn.steps : [];
      // A continued turn repeats its user projection: keep it once.
      if (last && last.index === turn.index) last.steps.push(...steps);
      else hs.turns.push({ ...turn, steps: [...steps] });
    }
    const progressed = data.next !== hs.cursor.start || (data.next_step || 0) !== hs.cursor.step;
    if (data.next >= data.total || data.turns.length === 0 || !progressed) return { done: true };
    hs.cursor = { start: data.next, step: data.next_step || 0 };
    return { next: hs.cursor };
  }

  historyDone() {
    const hs = this.history;
    hs.state = 'done';
    hs.pending = null;
    this.historyUser = new Map();
    for (const turn of hs.turns) {
      const first = turn.steps.find((s) => s && s.execution && s.execution.request_id);
      if (first) {
        this.historyUser.set(first.execution.request_id, {
          user: turn.user,
          omitted: turn.omitted_user_parts,
          internal: turn.internal_input,
        });
      }
    }
    for (const r of this.rounds.values()) r.v++;
    this.structure += 1;
  }

  /** History turns whose input source is not in the replayed transcript. */
  historyOnlyTurns() {
    if (this.history.state !== 'done') return [];
    return this.history.turns.filter((turn) => {
      const first = turn.steps.find((s) => s && s.execution && s.execution.request_id);
      return !first || !this.admitted.has(first.execution.request_id);
    });
  }
}
