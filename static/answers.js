// Complete model answers, read from the live worker in 32 KiB pages
// (`POST /api/sessions/:id/answer`, seed 002 "Complete answer access and
// large output"), and the plain-text window that shows a large retained
// answer one 32,768-unit section at a time. Only one page or section is in
// the DOM; pages are checked against the request (identity, part, offset,
// byte progress) before they are shown, and the answer's shape must not
// change between pages. Every unavailability is said explicitly.

import { h, clip, copyButton, utf8Length } from './dom.js';
import { api } from './net.js';

/** Largest `raw` of one answer page, in UTF-8 bytes. */
export const PAGE_BYTES = 32 * 1024;
/** UTF-16 units of one section of the plain-text window. */
export const WINDOW_UNITS = 32768;
/** The hub waits 10 s for the worker; this is the panel's own deadline. */
const PAGE_TIMEOUT_MS = 15000;
/** Readers kept across re-renders (their open page survives an update). */
const KEPT_READERS = 16;

const SOURCE_KEYS = ['worker_id', 'turn', 'step', 'commit_sequence', 'fingerprint'];
const isIndex = (v) => Number.isSafeInteger(v) && v >= 0;

/**
 * Whether `v` is an answer source the hub accepts: exactly the five keys,
 * `worker_id` 1–128 bytes, `turn`/`step` integers >= 0, `commit_sequence`
 * an integer >= 0 or its decimal string, `fingerprint` a non-empty string.
 */
export function validSource(v) {
  if (!v || typeof v !== 'object' || Array.isArray(v)) return false;
  const keys = Object.keys(v);
  if (keys.length !== SOURCE_KEYS.length || !SOURCE_KEYS.every((k) => keys.includes(k))) return false;
  if (typeof v.worker_id !== 'string' || v.worker_id === '' || utf8Length(v.worker_id) > 128) return false;
  if (!isIndex(v.turn) || !isIndex(v.step)) return false;
  const cs = v.commit_sequence;
  if (!(isIndex(cs) || (typeof cs === 'string' && /^\d{1,20}$/.test(cs)))) return false;
  return typeof v.fingerprint === 'string' && v.fingerprint !== '' && v.fingerprint.length <= 256;
}

/** Whether two sources name the same answer (commit sequences compared as text). */
export function sameSource(a, b) {
  return (
    validSource(a) &&
    validSource(b) &&
    a.worker_id === b.worker_id &&
    a.turn === b.turn &&
    a.step === b.step &&
    String(a.commit_sequence) === String(b.commit_sequence) &&
    a.fingerprint === b.fingerprint
  );
}

/**
 * Checks a page against its query `{source, part, offset}` and, when given,
 * the page shown before it. Returns null when it may be shown, else why not.
 */
export function checkPage(page, query, before = null) {
  if (!page || typeof page !== 'object' || Array.isArray(page)) return 'the reply is not an answer page';
  if (!sameSource(page.source, query.source)) return 'the page names another answer';
  if (page.part !== query.part || page.offset !== query.offset) return 'the page is not at the requested part and offset';
  if (typeof page.raw !== 'string' || typeof page.done !== 'boolean') return 'the page has no text';
  for (const k of ['bytes', 'next_offset', 'next_part', 'total_parts']) if (!isIndex(page[k])) return `the page has no valid ${k}`;
  if (page.part >= page.total_parts) return 'the part is past the answer’s parts';
  const len = utf8Length(page.raw);
  if (len > PAGE_BYTES) return 'the page is larger than 32 KiB';
  if (page.next_offset > page.bytes) return 'the page ends past the part’s size';
  if (page.next_offset !== page.offset + len) return 'the next offset does not follow this page’s bytes';
  const finished = page.next_offset === page.bytes;
  if (!finished && len === 0) return 'the page makes no progress';
  if (page.next_part !== page.part + (finished ? 1 : 0)) return 'the next part does not follow this page';
  if (page.done !== (finished && page.next_part === page.total_parts)) return 'the page’s end marker does not match its cursor';
  if (before) {
    if (before.total_parts !== page.total_parts) return 'the answer changed between pages (a different number of parts)';
    if (before.part === page.part && (before.bytes !== page.bytes || before.type !== page.type || before.modality !== page.modality)) {
      return 'the answer changed between pages (a different size or kind)';
    }
  }
  return null;
}

/** The explicit sentence for a failed page request. */
export function unavailableText(res) {
  const body = res && res.body && typeof res.body === 'object' ? res.body : {};
  const message = typeof body.message === 'string' ? body.message : '';
  if (res.status === 409 && body.error === 'answer_unavailable') {
    const we = body.worker_error && typeof body.worker_error === 'object' ? body.worker_error : null;
    switch (body.reason) {
      case 'not_connected':
        return 'Complete answer unavailable: no worker is connected to this session. The full text is read from the live worker; start it or wait for it to reconnect, then try again.';
      case 'unsupported':
        return 'Complete answer unavailable: the connected worker does not offer answer pages (no answer-pages capability).';
      case 'worker_error':
        return `Complete answer unavailable: the worker could not serve it (${(we && (we.message || we.code)) || message || 'no reason given'}). It may be gone: another worker, a compaction or a restart replaces what a source names.`;
      case 'disconnected':
        return 'The worker connection changed while this page was read. Try again.';
      case 'timeout':
        return 'The worker did not answer within 10 s. Try again.';
      case 'write_failed':
        return 'The hub could not send the query to the worker. Try again.';
      default:
        return `Complete answer unavailable: ${message || body.reason || 'no reason given'}.`;
    }
  }
  if (res.status === 429) return 'Too many answer reads are pending (two per session, 64 in the hub). Try again in a moment.';
  if (res.status === 400) return `The hub refused this answer source: ${message || body.error || 'invalid arguments'}.`;
  if (res.status === 404) return 'This session no longer exists.';
  if (res.status === 401) return 'Not signed in: the hub refused the token.';
  return `The hub answered ${res.status}${message ? `: ${message}` : ''}.`;
}

const readers = new Map();

/**
 * The complete-answer control of one response: a "Read complete answer"
 * button opening the pager, or, when `source` is not usable and the shown
 * text is `shortened`, the sentence that the full text is unavailable.
 * Null when there is neither. The same element is returned for the same
 * session and source, so a re-render keeps the open page.
 */
export function answerAccess(session, source, { shortened = false } = {}) {
  if (!validSource(source)) {
    if (!shortened) return null;
    return h('p', { class: 'answer-none muted small', text: 'This is a preview; the complete text is unavailable: the worker gave no usable answer source.' });
  }
  const key = `${session}\u0000${JSON.stringify(SOURCE_KEYS.map((k) => source[k]))}`;
  const kept = readers.get(key);
  if (kept) {
    readers.delete(key);
    readers.set(key, kept);
    return kept;
  }
  const el = answerReader(session, source, shortened);
  readers.set(key, el);
  while (readers.size > KEPT_READERS) readers.delete(readers.keys().next().value);
  return el;
}

function answerReader(session, source, shortened) {
  const root = h('section', { class: 'answer-pages', 'aria-label': 'Complete answer' });
  const st = { page: null, trail: [], busy: false, error: '', last: null, ticket: 0 };

  const load = async (part, offset, move) => {
    const ticket = ++st.ticket;
    st.busy = true;
    st.error = '';
    st.last = { part, offset, move };
    draw();
    const query = { source, part, offset };
    let res;
    try {
      res = await api('POST', `/api/sessions/${encodeURIComponent(session)}/answer`, query, { timeoutMs: PAGE_TIMEOUT_MS });
    } catch (err) {
      res = { status: 0, error: err };
    }
    if (ticket !== st.ticket) return;
    st.busy = false;
    if (res.status === 0) st.error = `The hub did not answer (${res.error && res.error.name === 'AbortError' ? 'no reply within 15 s' : 'network error'}). Try again.`;
    else if (res.status !== 200) st.error = unavailableText(res);
    else {
      const before = move === 'first' ? null : st.page;
      const why = checkPage(res.body, query, before);
      if (why) st.error = `The page was not shown: ${why}.${why.startsWith('the answer changed') ? ' Start again from the beginning.' : ''}`;
      else {
        if (move === 'first') st.trail = [];
        else if (move === 'next' && st.page) st.trail.push({ part: st.page.part, offset: st.page.offset });
        else if (move === 'previous') st.trail.pop();
        st.page = res.body;
      }
    }
    draw();
  };

  const close = () => {
    st.ticket++;
    st.page = null;
    st.trail = [];
    st.busy = false;
    st.error = '';
    draw();
  };

  // The control that had focus keeps it across a redraw (buttons are not
  // disabled while a page loads, so focus is never dropped; they say
  // aria-disabled and ignore clicks instead).
  const focusKey = () => {
    const el = document.activeElement;
    return el && root.contains(el) ? (el.dataset.key || (el.tagName === 'PRE' ? 'page' : null)) : null;
  };
  const busy = (fn) => () => {
    if (!st.busy) fn();
  };
  const draw = () => {
    const had = focusKey();
    root.replaceChildren();
    root.setAttribute('aria-busy', st.busy ? 'true' : 'false');
    const p = st.page;
    const bar = h('div', { class: 'answer-bar' });
    if (!p) {
      bar.appendChild(
        h('button', {
          type: 'button',
          class: 'link answer-open',
          dataset: { key: 'open' },
          'aria-disabled': st.busy ? 'true' : null,
          onclick: busy(() => load(0, 0, 'first')),
          text: st.busy ? 'Loading the answer…' : 'Read complete answer',
        }),
      );
      if (shortened) bar.appendChild(h('span', { class: 'muted small', text: ' What is shown above is a preview.' }));
    } else {
      const last = p.next_part === p.part ? p.next_offset : p.bytes;
      bar.appendChild(
        h('span', {
          class: 'answer-where small',
          text: `Complete answer · part ${p.part + 1} of ${p.total_parts} · bytes ${p.offset.toLocaleString()}–${last.toLocaleString()} of ${p.bytes.toLocaleString()} · page ${st.trail.length + 1}`,
        }),
      );
      const previous = st.trail[st.trail.length - 1];
      // At the first page "Previous page" and at the end "Next page" are
      // disabled; while loading, both only say so.
      bar.appendChild(
        h('button', {
          type: 'button',
          class: 'answer-prev',
          dataset: { key: 'prev' },
          disabled: !previous,
          'aria-disabled': st.busy ? 'true' : null,
          onclick: busy(() => previous && load(previous.part, previous.offset, 'previous')),
          text: 'Previous page',
        }),
      );
      bar.appendChild(
        h('button', {
          type: 'button',
          class: 'answer-next',
          dataset: { key: 'next' },
          disabled: p.done,
          'aria-disabled': st.busy ? 'true' : null,
          onclick: busy(() => load(p.next_part, p.next_part === p.part ? p.next_offset : 0, 'next')),
          text: p.done ? 'End of answer' : 'Next page',
        }),
      );
      const copy = copyButton(() => (st.page ? st.page.raw : ''), { label: 'Copy this page', what: '' });
      copy.dataset.key = 'copy';
      bar.appendChild(copy);
      bar.appendChild(h('button', { type: 'button', class: 'link answer-close', dataset: { key: 'close' }, onclick: close, text: 'Close' }));
    }
    root.appendChild(bar);
    if (st.error) {
      root.appendChild(
        h(
          'p',
          { class: 'answer-error error-text', role: 'status' },
          st.error,
          ' ',
          st.last ? h('button', { type: 'button', class: 'link answer-retry', dataset: { key: 'retry' }, onclick: busy(() => load(st.last.part, st.last.offset, st.last.move)), text: 'Try again' }) : null,
        ),
      );
    }
    if (p) {
      if (p.type && p.type !== 'text') root.appendChild(h('p', { class: 'muted small', text: `part type ${p.type}${p.modality ? `, ${p.modality}` : ''}` }));
      root.appendChild(h('pre', { class: 'text answer-page', tabindex: '0', 'aria-label': 'Answer page text', text: p.raw }));
    }
    if (had) {
      // Back to the same control, else (it is gone or disabled now) the
      // page, else the first control.
      const same = had === 'page' ? root.querySelector('pre.answer-page') : root.querySelector(`[data-key="${had}"]`);
      const target = same && !same.disabled ? same : root.querySelector('pre.answer-page') || root.querySelector('button:not([disabled])');
      if (target) target.focus();
    }
  };
  draw();
  return root;
}

/** Section starts of `text` for `units` per section, never splitting a pair. */
export function sectionStarts(text, units = WINDOW_UNITS) {
  const starts = [0];
  let at = 0;
  while (text.length - at > units) {
    let next = at + units;
    const c = text.charCodeAt(next - 1);
    if (c >= 0xd800 && c < 0xdc00) next -= 1;
    starts.push(next);
    at = next;
  }
  return starts;
}

/**
 * A large retained text shown as literal text one section at a time, with
 * previous/next navigation and a copy button for the shown section. The
 * whole text is kept (nothing is discarded); only one section is in the DOM.
 */
export function textWindow(text, { units = WINDOW_UNITS, cls = 'text answer-window-text' } = {}) {
  const starts = sectionStarts(text, units);
  const root = h('div', { class: 'answer-window' });
  let index = 0;
  const draw = () => {
    const from = starts[index];
    const to = index + 1 < starts.length ? starts[index + 1] : text.length;
    const slice = text.slice(from, to);
    root.replaceChildren(
      h(
        'div',
        { class: 'answer-bar' },
        h('span', { class: 'answer-where small', text: `Long answer shown as plain text · section ${index + 1} of ${starts.length} · characters ${(from + 1).toLocaleString()}–${to.toLocaleString()} of ${text.length.toLocaleString()}` }),
        h('button', { type: 'button', class: 'window-prev', disabled: index === 0, onclick: () => move(-1), text: 'Previous section' }),
        h('button', { type: 'button', class: 'window-next', disabled: index + 1 >= starts.length, onclick: () => move(1), text: 'Next section' }),
        copyButton(() => clip(text.slice(starts[index], index + 1 < starts.length ? starts[index + 1] : text.length), units), { label: 'Copy this section' }),
      ),
      h('pre', { class: cls, tabindex: '0', 'aria-label': 'Answer section text', text: slice }),
    );
  };
  const move = (d) => {
    index = Math.max(0, Math.min(starts.length - 1, index + d));
    draw();
    const focus = root.querySelector(d < 0 ? '.window-prev' : '.window-next');
    if (focus && !focus.disabled) focus.focus();
    else root.querySelector('pre').focus();
  };
  draw();
  return root;
}
