// One tool call and its result as a card: the call (a `command` argument as
// a highlighted shell line with a copy button, other arguments as JSON), what
// happened to its approval, and the result: exit status, the fields the tool
// reported, stdout and stderr as separate labelled blocks, any other text,
// and the raw output on request. All text goes in through text nodes.

import { h, jsonBlock, jsonDetails, textBlock, copyButton, clip, fmtBytes } from './dom.js';
import { highlight } from './highlight.js';
import { parseToolOutput, exitStatus } from './toolout.js';

/** Characters of one output block shown at once. */
const BLOCK_MAX = 65536;

/** What the operator should know about a call's approval. */
function approvalInfo(tool, round, view, ctx) {
  const call = tool.call || {};
  const res = tool.result;
  const err = res && res.extras && typeof res.extras === 'object' ? res.extras.error : null;
  const recorded = view.approvals.get(`${round.runId}/${tool.id}`);
  const prompt = ctx.promptFor(round.runId, tool.id);
  if (res && (res.loop_skipped || (res.extras && res.extras.loop_skipped))) {
    return { cls: 'skipped', text: 'Skipped by the loop: not executed.' };
  }
  if (err && err.stage === 'security_check') {
    return { cls: 'denied', text: `Denied: ${err.message || 'security check'}` };
  }
  if (prompt && prompt.state !== 'retired') {
    if (prompt.state === 'awaiting-identity') return { cls: 'pending', text: 'Approval requested: waiting for the worker identity to be verified (see Approvals).' };
    if (prompt.state === 'decided') return { cls: prompt.decision === 'approved' ? 'approved' : 'denied', text: `Decided: ${prompt.decision}${prompt.reason ? ` (${prompt.reason})` : ''}; waiting for the worker.` };
    return { cls: 'pending', text: 'Approval requested: waiting for your decision (see Approvals).' };
  }
  if (recorded) {
    const who = recorded.decision === 'approved' ? 'Approved' : recorded.decision === 'denied' ? 'Denied' : `Closed (${recorded.decision})`;
    return { cls: recorded.decision === 'approved' ? 'approved' : 'denied', text: `${who}${recorded.reason ? `: ${recorded.reason}` : ''}` };
  }
  if (res) {
    if (call.security === 'require_confirm') return { cls: 'approved', text: 'Executed after approval.' };
    return { cls: 'none', text: `No approval needed (security: ${call.security || 'unspecified'}).` };
  }
  if (call.security === 'require_confirm') {
    return { cls: 'pending', text: round.finished ? 'No approval outcome recorded.' : 'Needs approval: waiting for the request.' };
  }
  return { cls: 'none', text: round.finished ? 'No result recorded.' : 'Running…' };
}

/** A `command` string argument and the other arguments, or null. */
export function splitCommand(args) {
  if (!args || typeof args !== 'object' || Array.isArray(args)) return null;
  if (typeof args.command !== 'string' || args.command === '') return null;
  const rest = {};
  for (const [k, v] of Object.entries(args)) if (k !== 'command') rest[k] = v;
  return { command: args.command, rest: Object.keys(rest).length ? rest : null };
}

function argumentsNode(args) {
  if (args === undefined) return null;
  const split = splitCommand(args);
  if (!split) return jsonBlock(args, { maxChars: 16384, cls: 'json args' });
  const shown = clip(split.command, 16384);
  return h(
    'div',
    { class: 'tool-command' },
    h(
      'div',
      { class: 'tool-block-head' },
      h('span', { class: 'tool-label', text: 'command' }),
      split.command.length > 16384 ? h('mark', { class: 'trunc', text: `first 16384 of ${split.command.length} characters` }) : null,
      copyButton(() => split.command, { what: 'command' }),
    ),
    h('pre', { class: 'cmd' }, h('code', null, highlight(shown, 'shell'))),
    split.rest ? jsonDetails('Other arguments', split.rest, { maxChars: 16384 }) : null,
  );
}

function statusChips(st) {
  const chips = [];
  if (st.code !== null) chips.push(h('span', { class: `chip exit ${st.code === 0 ? 'exit-ok' : 'exit-bad'}`, text: `exit ${st.code}` }));
  if (st.signal) chips.push(h('span', { class: 'chip exit exit-bad', text: `signal ${st.signal}` }));
  if (st.timedOut) chips.push(h('span', { class: 'chip exit exit-bad', text: 'timed out' }));
  if (st.truncated) chips.push(h('span', { class: 'chip warn', text: 'output truncated by the worker' }));
  return chips;
}

function outputBlock(block) {
  const stream = /^stderr/i.test(block.name) ? 'stderr' : /^stdout/i.test(block.name) ? 'stdout' : 'other';
  const size = block.empty ? 'empty' : `${fmtBytes(block.bytes)}${block.truncated ? ', truncated by the tool' : ''}`;
  return h(
    'div',
    { class: `tool-stream stream-${stream}`, dataset: { stream: block.name } },
    h(
      'div',
      { class: 'tool-block-head' },
      h('span', { class: 'tool-label', text: block.name }),
      h('span', { class: 'muted small', text: size }),
      block.empty ? null : copyButton(() => block.text, { what: block.name }),
    ),
    block.empty ? null : textBlock(block.text, { max: BLOCK_MAX, cls: 'text output' }),
  );
}

function resultNode(res) {
  const out = res.output;
  const raw = out && typeof out === 'object' && typeof out.raw === 'string' ? out.raw : null;
  const doc = raw !== null ? parseToolOutput(raw) : null;
  const status = exitStatus(res, doc);
  const err = res.extras && typeof res.extras === 'object' ? res.extras.error : null;
  const result = h(
    'div',
    { class: 'tool-result' },
    h('div', { class: 'tool-result-head' }, h('span', { class: 'who', text: 'Result' }), statusChips(status)),
  );
  if (raw === '') result.appendChild(h('p', { class: 'muted', text: '(no output)' }));
  else if (doc && doc.kind === 'document') {
    const fields = doc.fields.filter((f) => !['exit_code', 'signal', 'timed_out'].includes(f.name));
    if (fields.length) {
      result.appendChild(h('dl', { class: 'tool-fields' }, fields.map((f) => h('div', null, h('dt', { text: f.name }), h('dd', { text: f.value })))));
    }
    for (const block of doc.blocks) result.appendChild(outputBlock(block));
    if (doc.rest) result.appendChild(textBlock(doc.rest, { max: BLOCK_MAX, cls: 'text output' }));
    const details = h('details', { class: 'tool-raw' }, h('summary', { text: 'Raw output' }));
    let built = false;
    details.addEventListener('toggle', () => {
      if (details.open && !built) {
        built = true;
        details.appendChild(textBlock(raw, { max: BLOCK_MAX, cls: 'text output' }));
      }
    });
    result.appendChild(details);
  } else if (raw !== null) {
    result.appendChild(textBlock(raw, { max: BLOCK_MAX, cls: 'text output' }));
  } else if (out !== undefined) {
    result.appendChild(jsonBlock(out, { cls: 'json output' }));
  }
  if (err && err.stage !== 'security_check') {
    result.appendChild(h('p', { class: 'error-text', text: `Error${err.stage ? ` (${err.stage})` : ''}: ${err.message || err.code || JSON.stringify(err)}` }));
  }
  return { node: result, status };
}

/** The card of `tool` (`{id, call, result}`) in `round`. */
export function toolCard(tool, round, view, ctx) {
  const call = tool.call || {};
  const info = approvalInfo(tool, round, view, ctx);
  const res = tool.result;
  const result = res ? resultNode(res) : null;
  const outcome = !result ? 'open' : result.status.code === 0 ? 'ok' : result.status.code !== null || result.status.signal || result.status.timedOut ? 'failed' : 'done';
  return h(
    'div',
    { class: `tool tool-${outcome}`, dataset: { callId: tool.id, outcome } },
    h(
      'div',
      { class: 'tool-head' },
      h('span', { class: 'who', text: 'Tool' }),
      h('code', { class: 'tool-name', text: call.name || '(unnamed call)' }),
      call.type ? h('span', { class: 'chip', title: 'call type', text: call.type }) : null,
      call.security ? h('span', { class: `chip sec-${call.security}`, title: 'security classification', text: call.security }) : null,
      h('span', { class: 'muted small', text: tool.id }),
    ),
    argumentsNode(call.arguments),
    h('div', { class: `approval approval-${info.cls}` }, info.text),
    result ? result.node : null,
  );
}
