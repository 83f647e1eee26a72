// The inspector column: worker status, identity and stats, the process
// record, the log tail, the read-only snapshot, the session plan and the
// session's permission grants.
// Also the status/security view of a headless subagent session, shown
// instead of the transcript and composer (see HeadlessView below).

import { h, jsonBlock, jsonDetails, textBlock, fmtBytes, fmtDateTime, fmtTime, setChildren } from './dom.js';
import { markdown } from './markdown.js';
import { requestChip } from './transcript.js';

export const TABS = ['run', 'process', 'logs', 'snapshot', 'plan', 'grants'];

function dl(rows) {
  const list = h('dl', { class: 'kv' });
  for (const [k, v, cls] of rows) {
    if (v === undefined) continue;
    list.appendChild(h('dt', { text: k }));
    const dd = h('dd', cls ? { class: cls } : null);
    if (v instanceof Node) dd.appendChild(v);
    else dd.textContent = v === null || v === '' ? '—' : String(v);
    list.appendChild(dd);
  }
  return list;
}

function yesNo(v) {
  if (v === undefined || v === null) return '—';
  return v ? 'yes' : 'no';
}

function runTab(ctx) {
  const { view, desc } = ctx;
  const st = view ? view.status : null;
  const loop = st && st.loop && typeof st.loop === 'object' ? st.loop : {};
  const parts = [];
  parts.push(
    h(
      'div',
      { class: 'section-head' },
      h('h3', { text: 'Worker status' }),
      h('button', { type: 'button', class: 'secondary small', onclick: ctx.onStatus, disabled: !(desc && desc.connected), title: desc && desc.connected ? 'Ask the worker for a fresh status' : 'No worker connected', text: 'Request status' }),
    ),
  );
  if (!st) {
    parts.push(h('p', { class: 'muted', text: 'No status event in this panel’s copy yet.' }));
  } else {
    parts.push(
      dl([
        ['as of', fmtTime(view.statusAt)],
        ['run active', yesNo(st.active)],
        ['stopping', yesNo(st.stopping)],
        ['loop status', loop.status ?? '—'],
        ['phase', loop.phase ?? '—'],
        ['completed exchanges', loop.completed_exchanges ?? '—'],
        ['pending results', Array.isArray(loop.pending_results) ? loop.pending_results.length : '—'],
        ['loop error', loop.error || '—', loop.error ? 'error-text' : null],
        ['storage failed', yesNo(st.storage_failed), st.storage_failed ? 'error-text strong' : null],
        ['rejected payloads', st.rejected_payloads ?? '—', st.rejected_payloads ? 'warn-text' : null],
        ['dropped events', st.dropped_events ?? undefined],
        ['capabilities', Array.isArray(st.capabilities) ? st.capabilities.join(', ') || '—' : '—'],
        ['archives kept', st.memory_retention && st.memory_retention.max_archives !== undefined ? st.memory_retention.max_archives : undefined],
      ]),
      jsonDetails('Raw status', st),
    );
  }
  const id = (desc && desc.identity) || {};
  parts.push(
    h('h3', { text: 'Worker identity' }),
    dl([
      ['event connection', desc ? (desc.connected ? 'connected' : 'not connected') : '—'],
      ['identity', id.state ?? '—'],
      ['worker id', id.worker_id ? h('code', { text: id.worker_id }) : '—'],
      ['since', fmtDateTime(id.since)],
      ['advertised', Array.isArray(desc && desc.worker_capabilities) ? desc.worker_capabilities.join(', ') : 'unknown (no worker connected)'],
    ]),
  );
  const stats = (desc && desc.stats) || {};
  parts.push(
    h('h3', { text: 'Hub statistics' }),
    dl([
      ['events', stats.events ?? '—'],
      ['sequence gaps', stats.gaps ?? '—', stats.gaps ? 'warn-text' : null],
      ['duplicates', stats.duplicates ?? '—', stats.duplicates ? 'warn-text' : null],
      ['protocol errors', stats.protocolErrors ?? '—', stats.protocolErrors ? 'error-text' : null],
      ['incarnations', stats.incarnations ?? '—'],
      ['last event', desc && desc.last_event ? `${desc.last_event} at ${fmtTime(desc.last_event_at)}` : '—'],
    ]),
  );
  if (view) {
    parts.push(
      h('h3', { text: 'This panel’s copy' }),
      dl([
        ['transcript events', view.entries.length],
        ['transcript bytes', `${fmtBytes(view.bytes)} of ${fmtBytes(8 * 1024 * 1024)}`],
        ['replay cursor', view.cursor],
        ['replay gaps seen', view.gaps, view.gaps ? 'warn-text' : null],
        ['trimmed events', view.trimmed || 0],
        ['history', `${view.history.state}${view.history.turns.length ? `, ${view.history.turns.length} turn(s), ${fmtBytes(view.history.bytes)}` : ''}`],
      ]),
    );
  }
  const reqs = (desc && Array.isArray(desc.requests) ? desc.requests : []).slice(-10).reverse();
  parts.push(h('h3', { text: 'Recent requests' }));
  if (!reqs.length) parts.push(h('p', { class: 'muted', text: 'None.' }));
  else {
    const ul = h('ul', { class: 'requests' });
    for (const r of reqs) {
      ul.appendChild(
        h(
          'li',
          null,
          requestChip(r.state),
          ' ',
          h('span', { text: r.operation || 'message' }),
          ' ',
          h('code', { class: 'small', text: String(r.request_id).slice(0, 8) }),
          ' ',
          h('span', { class: 'muted small', text: fmtTime(r.updated_at || r.settled_at || r.sent_at) }),
          r.state === 'rejected' && r.detail ? h('div', { class: 'small error-text', text: String(r.detail) }) : null,
        ),
      );
    }
    parts.push(ul);
  }
  return parts;
}

function processTab(ctx) {
  const p = ctx.desc && ctx.desc.process;
  if (!p) return [h('p', { class: 'muted', text: 'No worker process recorded for this session.' })];
  const cmd = [p.command, ...(Array.isArray(p.args) ? p.args : [])].filter((x) => x !== undefined && x !== null).join(' ');
  return [
    dl([
      ['state', p.state],
      ['pid', p.pid ?? '—'],
      ['started', fmtDateTime(p.started_at)],
      ['exited', fmtDateTime(p.exited_at)],
      ['exit code', p.exit_code ?? '—'],
      ['signal', p.signal ?? '—'],
      ['error', p.error ?? '—', p.error ? 'error-text' : null],
      ['stop requested', yesNo(p.stop_requested)],
      ['group killed', yesNo(p.process_group_killed)],
      ['adopted', p.adopted === undefined ? undefined : yesNo(p.adopted)],
      ['command', h('code', { class: 'wrap', text: cmd || '—' })],
      ['cwd', p.cwd ? h('code', { class: 'wrap', text: p.cwd }) : '—'],
      ['log file', p.log_path ? h('code', { class: 'wrap', text: p.log_path }) : '—'],
      ['log lines', p.log_lines ?? '—'],
      ['lines dropped', p.log_dropped ?? '—'],
      ['bytes truncated', p.log_truncated_bytes ?? '—'],
      ['file records dropped', p.file_log_dropped ?? '—'],
      ['file log failed', yesNo(p.file_log_failed), p.file_log_failed ? 'error-text' : null],
    ]),
    jsonDetails('Raw process record', p),
  ];
}

function logsTab(ctx) {
  const logs = ctx.view && ctx.view.logs;
  const head = h(
    'div',
    { class: 'section-head' },
    h('h3', { text: 'Worker log tail' }),
    h('button', { type: 'button', class: 'secondary small', onclick: ctx.onRefreshLogs, text: 'Refresh' }),
  );
  if (!logs) return [head, h('p', { class: 'muted', text: 'Not loaded yet.' })];
  const lines = Array.isArray(logs.lines) ? logs.lines : [];
  const box = h('div', { class: 'logs', role: 'log', 'aria-label': 'Worker log lines', tabindex: '0' });
  for (const line of lines) {
    box.appendChild(
      h(
        'div',
        { class: `log-line stream-${line.stream === 'stderr' ? 'stderr' : 'stdout'}` },
        h('span', { class: 'log-time', text: fmtTime(line.at) }),
        h('span', { class: 'log-stream', text: line.stream === 'stderr' ? 'err' : 'out' }),
        h('span', { class: 'log-text', text: String(line.text ?? '') }),
      ),
    );
  }
  return [
    head,
    h('p', {
      class: 'muted small',
      text: `${lines.length} line(s)${logs.omitted ? `, ${logs.omitted} older retained line(s) not shown` : ''}${logs.dropped ? `, ${logs.dropped} evicted from the hub’s ring` : ''}${ctx.view.logsAt ? ` · fetched ${fmtTime(ctx.view.logsAt)}` : ''}`,
    }),
    lines.length ? box : h('p', { class: 'muted', text: 'No captured lines.' }),
  ];
}

function snapshotTab(ctx) {
  const snap = ctx.view && ctx.view.snapshot;
  const head = h(
    'div',
    { class: 'section-head' },
    h('h3', { text: 'Persisted snapshot (read-only)' }),
    h('button', { type: 'button', class: 'secondary small', onclick: ctx.onLoadSnapshot, disabled: Boolean(snap && snap.loading), text: snap && snap.data ? 'Reload' : 'Load' }),
  );
  if (!snap) return [head, h('p', { class: 'muted', text: 'The worker’s saved state.json and readable.md, as files on disk. Nothing here can change them.' })];
  if (snap.loading) return [head, h('p', { class: 'muted', text: 'Loading…' })];
  if (snap.error) return [head, h('p', { class: 'error-text', text: snap.error })];
  const d = snap.data || {};
  // `files` maps each file read to its path (the Node hub's shape);
  // `file_status` says what happened to every file looked at.
  const files = Array.isArray(d.file_status) ? d.file_status : [];
  const parts = [
    head,
    h('p', { class: 'muted small', text: `Loaded ${fmtTime(snap.at)}` }),
    h(
      'ul',
      { class: 'files' },
      files.map((f) => h('li', null, h('code', { text: String(f.name) }), ' ', h('span', { class: `chip file-${f.status}`, text: String(f.status) }), f.bytes !== null && f.bytes !== undefined ? h('span', { class: 'muted small', text: ` ${fmtBytes(f.bytes)}` }) : null)),
    ),
  ];
  if (d.state !== null && d.state !== undefined) parts.push(h('h4', { text: 'state.json' }), jsonBlock(d.state, { maxChars: 262144, cls: 'json snapshot' }));
  if (typeof d.readable === 'string') parts.push(h('h4', { text: 'readable.md (as text)' }), textBlock(d.readable, { max: 262144 }));
  return parts;
}

function planTab(ctx) {
  const plan = ctx.view && ctx.view.plan;
  if (!plan || typeof plan.markdown !== 'string' || plan.markdown.trim() === '') {
    return [h('p', { class: 'muted', text: 'No plan. The worker sets one through the plan tool; the panel only reads it.' })];
  }
  return [
    h('p', { class: 'muted small', text: `Revision ${plan.revision}${plan.updated_at ? ` · updated ${fmtDateTime(plan.updated_at)}` : ''} · read-only` }),
    markdown(plan.markdown),
  ];
}

function grantsTab(ctx) {
  const grants = ctx.view && ctx.view.grants;
  const head = h(
    'div',
    { class: 'section-head' },
    h('h3', { text: 'Permission grants' }),
    h('button', { type: 'button', class: 'secondary small', onclick: ctx.onLoadGrants, disabled: Boolean(grants && grants.loading), text: grants && grants.list ? 'Reload' : 'Load' }),
  );
  const about = h('p', { class: 'muted small', text: 'Exact calls this session’s requests are allowed for without asking, made when a Shard client answered “allow always”. Revoking one makes the call ask again.' });
  if (!grants) return [head, about];
  if (grants.loading) return [head, h('p', { class: 'muted', text: 'Loading…' })];
  if (grants.error) return [head, h('p', { class: 'error-text', text: grants.error })];
  const list = grants.list || [];
  if (!list.length) return [head, about, h('p', { class: 'muted', text: 'No grants.' })];
  return [
    head,
    about,
    h(
      'ul',
      { class: 'grants' },
      list.map((g) =>
        h(
          'li',
          { class: 'grant', 'data-grant': String(g.grant_id) },
          h(
            'div',
            { class: 'section-head' },
            h('code', { class: 'grant-tool', text: String(g.tool) }),
            h('span', { class: 'muted small', text: ` granted ${fmtDateTime(g.created_at)}` }),
            h('button', { type: 'button', class: 'danger small', onclick: () => ctx.onRevokeGrant(g), text: 'Revoke' }),
          ),
          jsonBlock(g.arguments, { maxChars: 16384, cls: 'json grant-arguments' }),
        ),
      ),
    ),
  ];
}

function signature(tab, ctx) {
  const { view, desc } = ctx;
  switch (tab) {
    case 'run':
      return JSON.stringify([view && view.status, view && [view.entries.length, view.cursor, view.gaps, view.trimmed, view.history.state, view.history.turns.length], desc && [desc.connected, desc.identity, desc.stats, desc.worker_capabilities, desc.last_event_at, (desc.requests || []).slice(-10)]]);
    case 'process':
      return JSON.stringify(desc && desc.process);
    case 'logs':
      return `${view && view.logsV}`;
    case 'snapshot':
      return `${view && view.snapshotV}`;
    case 'plan':
      return JSON.stringify(view && view.plan);
    case 'grants':
      return `${view && view.grantsV}`;
    default:
      return '';
  }
}

/** Renders the selected tab's panel when its data changed. */
export function renderInspector(panel, tab, ctx, cache) {
  const sig = `${ctx.desc ? ctx.desc.session_id : ''}|${tab}|${signature(tab, ctx)}`;
  if (cache.sig === sig) return;
  cache.sig = sig;
  if (!ctx.desc) {
    setChildren(panel, h('p', { class: 'muted', text: 'Select a session.' }));
    return;
  }
  const build = { run: runTab, process: processTab, logs: logsTab, snapshot: snapshotTab, plan: planTab, grants: grantsTab }[tab];
  setChildren(panel, build(ctx));
  // A log tail opens at its newest line.
  const box = panel.querySelector('.logs');
  if (box) box.scrollTop = box.scrollHeight;
}

// ---------------------------------------------------------------------------
// Headless subagent sessions: a child worker forked and driven by its
// parent worker. The panel shows its status and its operator safety
// policy instead of a transcript and composer; the hub refuses direct
// conversation and control of it (headless_restricted) anyway.
// ---------------------------------------------------------------------------

/** The operator policies, in the order the selector shows them. */
export const POLICIES = [
  { value: 'ask', label: 'Ask', help: 'Each tool call that needs approval waits in the Approvals tray for an operator.' },
  { value: 'deny', label: 'Deny', help: 'New approval requests are denied automatically.' },
  { value: 'approve', label: 'Approve', help: 'New approval requests are approved automatically: the child runs such tools without asking anyone.' },
];

export function isHeadless(desc) {
  return Boolean(desc && (desc.kind === 'headless' || (desc.subagent && typeof desc.subagent === 'object')));
}

/** The parent session id of a headless description, or null. */
export function parentOf(desc) {
  const p = desc && desc.subagent && desc.subagent.parent;
  if (typeof p === 'string') return p;
  return p && typeof p.session_id === 'string' ? p.session_id : null;
}

/** A readable short form of a generated `subagent-<uuid>` id. */
export function childLabel(id) {
  if (typeof id !== 'string') return '';
  return id.startsWith('subagent-') && id.length > 17 ? `${id.slice(0, 17)}…` : id;
}

const LIFECYCLE_TEXT = {
  preparing: 'preparing',
  starting: 'starting',
  ready: 'ready',
  stopping: 'stopping',
  stopped: 'stopped',
  'cleanup-pending': 'cleanup pending',
};

/** `{text, cls}` of the lifecycle badge. */
export function lifecycleBadge(desc) {
  const l = desc && desc.subagent ? desc.subagent.lifecycle : null;
  const text = LIFECYCLE_TEXT[l] || String(l || 'unknown');
  const cls = l === 'ready' ? 'ok' : l === 'cleanup-pending' ? 'bad' : l === 'stopping' || l === 'stopped' ? 'warn' : 'busy';
  return { text, cls };
}

const HEALTH_CLS = { healthy: 'ok', degraded: 'warn', unknown: 'idle' };

/**
 * The status/security view of one headless session. Built once and
 * updated in place, so the policy selector keeps focus across updates.
 * `onPolicy(session, policy)` asks for a change (and may confirm it);
 * `onSelect(id)` shows another session.
 */
export class HeadlessView {
  constructor(root, { onPolicy, onSelect }) {
    this.root = root;
    this.onPolicy = onPolicy;
    this.onSelect = onSelect;
    this.session = null;
    this.sig = null;
    this.title = h('h2', { id: 'headless-title', text: 'Headless subagent' });
    this.intro = h('p', { class: 'muted small' });
    this.facts = h('dl', { class: 'kv headless-facts', 'aria-labelledby': 'headless-title' });
    this.radios = new Map();
    const options = POLICIES.map((p) => {
      const id = `policy-${p.value}`;
      const input = h('input', { type: 'radio', name: 'subagent-policy', id, value: p.value, 'aria-describedby': `${id}-help` });
      input.addEventListener('change', () => {
        if (input.checked && this.session) this.onPolicy(this.session, p.value);
      });
      this.radios.set(p.value, input);
      return h('div', { class: `policy-option policy-${p.value}` }, input, h('label', { for: id, text: p.label }), h('p', { id: `${id}-help`, class: 'muted small', text: p.help }));
    });
    this.policyStatus = h('p', { class: 'small policy-status', role: 'status' });
    this.policy = h(
      'fieldset',
      { class: 'policy', 'aria-describedby': 'policy-note' },
      h('legend', { text: 'Safety policy for this child’s tool approvals' }),
      options,
      h('p', { id: 'policy-note', class: 'muted small', text: 'A change applies to new approval requests only; prompts already open stay in the Approvals tray until someone answers them. Nothing is ever approved because a worker disconnected, a request expired or the child is stopping.' }),
      this.policyStatus,
    );
    setChildren(
      root,
      this.title,
      this.intro,
      h('h3', { text: 'Status' }),
      this.facts,
      h('h3', { text: 'Approvals' }),
      this.policy,
    );
  }

  /**
   * `ctx`: `online` (the panel socket is open), `pending` (a policy the
   * operator asked for, not yet confirmed), `processText` (the process
   * badge text), `known(id)` (whether a session is listed).
   */
  render(desc, ctx) {
    const sub = (desc && desc.subagent) || {};
    const sig = JSON.stringify([desc && desc.session_id, sub, desc && [desc.process, desc.connected, desc.identity], ctx.online, ctx.pending, ctx.processText, ctx.known(parentOf(desc))]);
    if (sig === this.sig) return;
    this.sig = sig;
    const changedSession = this.session !== desc.session_id;
    this.session = desc.session_id;
    const parent = parentOf(desc);
    this.intro.textContent = 'This worker was forked by its parent worker, which sends it tasks and reads its results. It has no transcript, composer or worker controls here; stopping its parent stops it, and it disappears from the list once it has stopped and its data is cleaned up.';
    const parentCell = parent
      ? ctx.known(parent)
        ? h('button', { type: 'button', class: 'link', title: 'Show the parent session', onclick: () => this.onSelect(parent), text: parent })
        : h('span', { text: `${parent} (not listed)` })
      : '—';
    const health = typeof sub.health === 'string' ? sub.health : 'unknown';
    const approvals = typeof sub.pending_approvals === 'number' ? sub.pending_approvals : 0;
    const rows = [
      ['parent', parentCell],
      ['depth', sub.depth ?? '—'],
      ['lifecycle', LIFECYCLE_TEXT[sub.lifecycle] || sub.lifecycle || '—', sub.lifecycle === 'cleanup-pending' ? 'error-text' : null],
      ['process', ctx.processText],
      ['event connection', desc.connected ? 'connected' : 'not connected'],
      ['identity', desc.identity && desc.identity.state ? desc.identity.state : '—'],
      ['run', sub.active_run ? 'active' : 'idle'],
      ['health', h('span', { class: `badge badge-${HEALTH_CLS[health] || 'idle'}`, text: health })],
      ['reason', sub.reason || '—', sub.reason ? 'warn-text' : null],
      ['last worker event', sub.observed_at ? `${fmtDateTime(sub.observed_at)}` : '—'],
      ['pending approvals', approvals, approvals ? 'strong' : null],
    ];
    if (sub.cleanup_attempts) rows.push(['cleanup attempts', sub.cleanup_attempts, 'warn-text']);
    this.facts.replaceChildren();
    for (const [k, v, cls] of rows) {
      this.facts.appendChild(h('dt', { text: k }));
      const dd = h('dd', cls ? { class: cls } : null);
      if (v instanceof Node) dd.appendChild(v);
      else dd.textContent = v === null || v === '' ? '—' : String(v);
      this.facts.appendChild(dd);
    }
    const current = typeof sub.policy === 'string' ? sub.policy : null;
    const shown = ctx.pending || current;
    for (const [value, input] of this.radios) {
      input.checked = value === shown;
      input.disabled = !ctx.online || Boolean(ctx.pending);
    }
    this.policy.dataset.policy = current || '';
    let status;
    if (!ctx.online) status = 'Not connected to the hub: the policy cannot be changed now.';
    else if (ctx.pending) status = `Setting “${ctx.pending}”…`;
    else status = `Current policy: ${current || 'unknown'}.`;
    this.policyStatus.textContent = status;
    if (changedSession) this.root.scrollTop = 0;
  }
}
