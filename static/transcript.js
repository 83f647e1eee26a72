// Renders a view's rounds into the transcript column. Elements are cached
// per item and rebuilt only when the item's version changes, so live
// events touch one round, not the whole transcript.

import { h, jsonBlock, jsonDetails, textBlock, partsText, fmtTime, fmtBytes, shortId } from './dom.js';
import { markdown } from './markdown.js';
import { answerAccess, textWindow } from './answers.js';
import { toolCard } from './toolcard.js';

/** Items rendered at once; older ones behind "show earlier". */
const RENDER_LIMIT = 300;
/** Above this many characters a response is shown in the plain-text window. */
const MARKDOWN_LIMIT = 65536;

const REQUEST_LABEL = {
  sending: 'sending…',
  sent: 'sent · queued until the worker admits it',
  admitted: 'admitted',
  rejected: 'rejected',
  unknown: 'outcome unknown',
  not_sent: 'not sent',
};

export function requestChip(state) {
  return h('span', { class: `chip req req-${state}`, text: REQUEST_LABEL[state] || state });
}

function time(at) {
  return at ? h('time', { class: 'muted', datetime: at, text: fmtTime(at) }) : null;
}

function contentNodes(parts) {
  if (!Array.isArray(parts)) return [h('p', { class: 'muted', text: '(no content)' })];
  return parts.map((p) => {
    if (!p || typeof p !== 'object') return null;
    if (p.display_omitted || p.display_truncated) return jsonBlock(p);
    if (typeof p.raw === 'string' && (p.modality === 'text' || p.modality === undefined) && p.type !== 'binary') {
      const body = p.raw.length > MARKDOWN_LIMIT ? textWindow(p.raw) : markdown(p.raw);
      if (p.truncated) {
        return h('div', null, body, h('p', null, h('mark', { class: 'trunc', text: `⟨preview: the original part is ${fmtBytes(p.bytes)}⟩` })));
      }
      return body;
    }
    return h('p', { class: 'muted', text: `[${p.modality || 'part'} ${p.type || ''}${p.bytes ? `, ${fmtBytes(p.bytes)}` : ''}]` });
  });
}

/** Whether the parts shown are less than the worker's answer. */
function shortenedParts(parts) {
  if (!Array.isArray(parts)) return true;
  return parts.some((p) => !p || typeof p !== 'object' || p.truncated === true || p.display_truncated === true || p.display_omitted === true);
}

function reasoningNode(data) {
  let text = null;
  const r = data.reasoning;
  if (typeof r === 'string') text = r;
  else if (Array.isArray(r)) text = partsText(r);
  else if (r && typeof r === 'object' && typeof r.raw === 'string') text = r.raw;
  if (!text) return null;
  // Reasoning is literal text, never Markdown.
  return h('details', { class: 'reasoning' }, h('summary', { text: 'Reasoning' }), textBlock(text, { max: 65536, cls: 'text reasoning-text' }));
}

function userBubble(round, view) {
  const op = round.operation;
  if (op === 'continue' || op === 'compact') {
    return h(
      'div',
      { class: 'msg op' },
      h('div', { class: 'msg-head' }, h('span', { class: 'who', text: op === 'continue' ? 'Continue' : 'Compact context' }), requestChip('admitted'), time(round.at)),
      h('p', { class: 'muted', text: op === 'continue' ? 'Resume without a new message.' : 'Ask the worker to summarize and archive the conversation.' }),
    );
  }
  const u = view.userFor(round.requestId);
  let body;
  if (u && u.text !== undefined) body = textBlock(u.text, { cls: 'text user-text' });
  else if (u && u.internal) body = h('p', { class: 'muted', text: `(internal input: ${u.internal})` });
  else if (u && u.parts) {
    body = h('div', null, textBlock(partsText(u.parts), { cls: 'text user-text' }));
    for (const p of u.parts) {
      if (p && p.truncated) body.appendChild(h('mark', { class: 'trunc', text: `⟨history preview: part of ${fmtBytes(p.bytes)}⟩` }));
    }
    if (u.omitted) body.appendChild(h('mark', { class: 'trunc', text: `⟨${u.omitted} more part(s) not shown⟩` }));
  } else {
    body = h('p', {
      class: 'muted',
      text: round.requestId
        ? 'Message text is not in this panel’s copy (sent elsewhere or before a reload); the worker’s history fills it in while it is connected.'
        : 'The admission of this run is no longer in the retained transcript.',
    });
  }
  return h(
    'div',
    { class: 'msg user' },
    h(
      'div',
      { class: 'msg-head' },
      h('span', { class: 'who', text: 'You' }),
      round.requestId ? requestChip('admitted') : null,
      u && u.source === 'history' ? h('span', { class: 'chip', text: 'from history' }) : null,
      time(round.at),
    ),
    body,
  );
}

function responseBlock(block, view) {
  const d = block.data;
  const cost = d.cost && typeof d.cost === 'object' ? d.cost : null;
  return h(
    'div',
    { class: 'msg assistant' },
    h(
      'div',
      { class: 'msg-head' },
      h('span', { class: 'who', text: 'Model' }),
      cost ? h('span', { class: 'muted small', text: `tokens: ${cost.prompt ?? '?'} in · ${cost.generated ?? '?'} out` }) : null,
      time(block.at),
    ),
    reasoningNode(d),
    contentNodes(d.content),
    answerAccess(view.id, d.answer_source, { shortened: shortenedParts(d.content) }),
  );
}

function compactBlock(block) {
  const d = block.data || {};
  const summary = d.summary;
  return h(
    'div',
    { class: 'compact' },
    h(
      'div',
      { class: 'msg-head' },
      h('span', { class: 'who', text: 'Context compacted' }),
      typeof d.removed_turns === 'number' ? h('span', { class: 'muted small', text: `${d.removed_turns} turn(s) archived` }) : null,
      d.revision !== undefined ? h('span', { class: 'muted small', text: `revision ${d.revision}` }) : null,
      d.durable === false ? h('span', { class: 'chip warn', text: 'not saved' }) : null,
    ),
    typeof summary === 'string' ? textBlock(summary, { cls: 'text summary' }) : summary !== undefined ? jsonBlock(summary) : null,
    d.memory_file ? h('p', { class: 'muted small' }, 'Archive: ', h('code', { text: String(d.memory_file) })) : null,
    d.archive_cleanup_error ? h('p', { class: 'error-text', text: `Archive cleanup failed: ${typeof d.archive_cleanup_error === 'string' ? d.archive_cleanup_error : JSON.stringify(d.archive_cleanup_error)}` }) : null,
  );
}

function errorBlock(block) {
  const d = block.data || {};
  return h(
    'div',
    { class: 'err', role: 'note' },
    h('strong', { text: block.event === 'export_error' ? 'Export error: ' : 'Error: ' }),
    typeof d.message === 'string' ? d.message : JSON.stringify(d),
    d.durable === false ? h('span', { class: 'chip warn', text: 'not saved' }) : null,
  );
}

function genericBlock(entry) {
  return h(
    'div',
    { class: 'generic' },
    h('span', { class: 'muted small', text: 'event ' }),
    h('code', { text: String(entry.event ?? '(no name)') }),
    ' ',
    time(entry.received_at),
    entry.issues && entry.issues.length ? h('span', { class: 'chip warn', title: entry.issues.join('; '), text: `${entry.issues.length} issue(s)` }) : null,
    jsonDetails('data', entry.data !== undefined ? entry.data : entry),
  );
}

function omittedBlock(entry, view) {
  const response = entry.event === 'model_response';
  return h(
    'div',
    { class: 'generic omitted' },
    h('mark', {
      class: 'trunc',
      text: `Event ${entry.event || ''} omitted from display${typeof entry.bytes === 'number' ? ` (${fmtBytes(entry.bytes)})` : ''}${entry.panel_omitted ? ' by this panel (over the per-session budget)' : ''}.`,
    }),
    response ? answerAccess(view.id, entry.answer_source, { shortened: true }) : null,
    jsonDetails('metadata', entry),
  );
}

function runFooter(round, view) {
  const f = round.finished;
  if (!f) {
    const active = view.activeRun && view.activeRun.runId === round.runId;
    return active ? h('div', { class: 'run-end running', text: 'Running…' }) : null;
  }
  const status = typeof f.status === 'string' ? f.status : 'finished';
  const bits = [`Run ${status.replace('_', ' ')}`];
  if (typeof f.exchanges === 'number') bits.push(`${f.exchanges} exchange(s)`);
  if (f.durable === true) bits.push('saved');
  if (f.durable === false) bits.push('NOT saved');
  return h(
    'div',
    { class: `run-end status-${status}` },
    bits.join(' · '),
    f.error ? h('span', { class: 'error-text', text: ` — ${f.error}` }) : null,
  );
}

function renderRound(round, view, ctx) {
  const el = h('article', { class: 'round', dataset: { run: round.runId } }, userBubble(round, view));
  for (const b of round.blocks) {
    if (b.type === 'response') el.appendChild(responseBlock(b, view));
    else if (b.type === 'tool') el.appendChild(toolCard(round.tools.get(b.id), round, view, ctx));
    else if (b.type === 'compact') el.appendChild(compactBlock(b));
    else if (b.type === 'error') el.appendChild(errorBlock(b));
    else if (b.type === 'omitted') el.appendChild(omittedBlock(b.entry, view));
    else if (b.type === 'generic') el.appendChild(genericBlock(b.entry));
  }
  const footer = runFooter(round, view);
  if (footer) el.appendChild(footer);
  return el;
}

function renderItem(item, view, ctx) {
  if (item.kind === 'round') return renderRound(item, view, ctx);
  if (item.kind === 'system') {
    return h('div', { class: `system system-${item.level}` }, item.text, ' ', time(item.at));
  }
  if (item.kind === 'omitted') return omittedBlock(item.entry, view);
  return genericBlock(item.entry);
}

function historySection(view, ctx) {
  const hs = view.history;
  if (hs.state === 'idle') return null;
  if (hs.state === 'loading') return h('div', { class: 'system', text: 'Loading the worker’s conversation history…' });
  if (hs.state === 'error') {
    return h('div', { class: 'system system-error' }, `Worker history unavailable: ${hs.error || 'unknown error'} `, h('button', { type: 'button', class: 'link', onclick: ctx.onRetryHistory, text: 'Retry' }));
  }
  const turns = view.historyOnlyTurns();
  if (!turns.length) return null;
  const section = h(
    'section',
    { class: 'history-restored', 'aria-label': 'Earlier conversation from the worker history' },
    h('h3', { text: 'Earlier conversation' }),
    h('p', {
      class: 'muted small',
      text: `Restored from the worker’s history (${turns.length} turn(s) not in the hub’s retained transcript)${hs.truncated ? '; the rest was left out to stay within the display budget' : ''}.`,
    }),
  );
  for (const turn of turns) {
    const art = h('article', { class: 'round hist' });
    if (turn.internal_input) art.appendChild(h('div', { class: 'msg op' }, h('span', { class: 'who', text: 'Internal input' }), ' ', h('span', { class: 'muted', text: String(turn.internal_input) })));
    else {
      art.appendChild(
        h(
          'div',
          { class: 'msg user' },
          h('div', { class: 'msg-head' }, h('span', { class: 'who', text: 'You' }), h('span', { class: 'chip', text: 'from history' })),
          textBlock(partsText(turn.user), { cls: 'text user-text' }),
          turn.omitted_user_parts ? h('mark', { class: 'trunc', text: `⟨${turn.omitted_user_parts} more part(s) not shown⟩` }) : null,
        ),
      );
    }
    for (const step of turn.steps) {
      if (!step) continue;
      art.appendChild(
        h(
          'div',
          { class: 'msg assistant' },
          h('div', { class: 'msg-head' }, h('span', { class: 'who', text: 'Model' }), step.tool_calls ? h('span', { class: 'muted small', text: `${step.tool_calls} tool call(s)` }) : null),
          contentNodes(step.content),
          step.omitted_parts ? h('mark', { class: 'trunc', text: `⟨${step.omitted_parts} part(s) not shown⟩` }) : null,
          answerAccess(view.id, step.answer_source, { shortened: Boolean(step.omitted_parts) || shortenedParts(step.content) }),
        ),
      );
    }
    if (turn.omitted_steps) art.appendChild(h('mark', { class: 'trunc', text: `⟨${turn.omitted_steps} step(s) not shown⟩` }));
    section.appendChild(art);
  }
  return section;
}

function cachedSection(view, key, sig, build) {
  const cached = view.els.get(key);
  if (cached && cached.sig === sig) return cached.el;
  const el = build();
  view.els.set(key, { sig, el });
  return el;
}

function pendingSection(list, ctx) {
  if (!list.length) return null;
  const section = h('section', { class: 'pending', 'aria-label': 'Inputs not yet running' }, h('h3', { class: 'sr-only', text: 'Queued inputs' }));
  for (const p of list) {
    const detail = p.detail && typeof p.detail === 'object' ? p.detail : null;
    let note = null;
    if (p.state === 'rejected') {
      const code = detail && detail.code;
      note = h(
        'p',
        { class: 'error-text' },
        `Rejected by the worker: ${(detail && detail.message) || 'no reason given'}`,
        code === 'payload_queue_full' ? h('span', { class: 'advice', text: ' The worker’s queue is full: wait for the current work to finish, then send again.' }) : null,
      );
    } else if (p.state === 'unknown') {
      note = h('p', { class: 'warn-text', text: 'Outcome unknown: the worker connection closed before it admitted or rejected this input. It was not resent; check the transcript before sending it again.' });
    } else if (p.state === 'not_sent') {
      note = h('p', { class: 'error-text', text: `Not sent: ${p.detail && p.detail.message ? p.detail.message : p.detail || 'the hub refused it'}` });
    }
    const label = p.operation === 'continue' ? 'Continue' : p.operation === 'compact' ? 'Compact context' : 'You';
    const closable = ['rejected', 'unknown', 'not_sent'].includes(p.state);
    section.appendChild(
      h(
        'div',
        { class: `msg user queued state-${p.state}`, dataset: { requestId: p.requestId } },
        h(
          'div',
          { class: 'msg-head' },
          h('span', { class: 'who', text: label }),
          requestChip(p.state),
          p.local ? null : h('span', { class: 'chip', text: 'other panel' }),
          time(p.at),
          closable ? h('button', { type: 'button', class: 'link small', 'aria-label': 'Dismiss this input', onclick: () => ctx.onDismiss(p.requestId), text: 'Dismiss' }) : null,
        ),
        p.text !== null && p.text !== undefined ? textBlock(p.text, { cls: 'text user-text' }) : p.operation === 'message' ? h('p', { class: 'muted', text: '(text not in this panel)' }) : null,
        note,
      ),
    );
  }
  return section;
}

/**
 * Brings `container` in line with the view. Returns true when anything
 * changed (the caller then keeps the reader's scroll anchor or follows).
 */
export function renderTranscript(container, view, ctx) {
  const desired = [];
  const hs = view.history;
  const hist = cachedSection(view, '__hist', `${hs.state}|${hs.turns.length}|${view.admitted.size}|${hs.error}`, () => historySection(view, ctx));
  if (hist) desired.push(hist);
  else if (!view.items.length) {
    desired.push(
      cachedSection(view, '__empty', view.ready ? 'ready' : 'loading', () =>
        h('p', { class: 'muted empty', text: view.ready ? 'No events yet. Start the worker and send a message.' : 'Loading the transcript…' }),
      ),
    );
  }
  const limit = view.renderLimit || RENDER_LIMIT;
  const start = Math.max(0, view.items.length - limit);
  if (start > 0) {
    desired.push(
      cachedSection(view, '__earlier', `${start}|${limit}`, () =>
        h('button', {
          type: 'button',
          class: 'link earlier',
          onclick: () => {
            view.renderLimit = limit + RENDER_LIMIT;
            ctx.onRerender();
          },
          text: `Show ${Math.min(start, RENDER_LIMIT)} earlier item(s) (${start} hidden)`,
        }),
      ),
    );
  }
  for (let i = start; i < view.items.length; i++) {
    const item = view.items[i];
    const sig = `${item.v}|${item.kind === 'round' ? ctx.promptSig(item.runId) : ''}|${view.history.state}`;
    const cached = view.els.get(item.key);
    if (cached && cached.sig === sig) desired.push(cached.el);
    else {
      const el = renderItem(item, view, ctx);
      view.els.set(item.key, { sig, el });
      desired.push(el);
    }
  }
  const pendList = view.pending(ctx.desc);
  const pendSig = JSON.stringify(pendList.map((p) => [p.requestId, p.state, p.detail, p.text === null]));
  const pend = cachedSection(view, '__pend', pendSig, () => pendingSection(pendList, ctx));
  if (pend) desired.push(pend);
  // Reconcile: keep nodes that are already in place.
  let changed = false;
  const current = container.children;
  for (let i = 0; i < desired.length; i++) {
    if (current[i] !== desired[i]) {
      container.insertBefore(desired[i], current[i] || null);
      changed = true;
    }
  }
  while (container.children.length > desired.length) {
    container.lastElementChild.remove();
    changed = true;
  }
  return changed;
}

export { shortId };
