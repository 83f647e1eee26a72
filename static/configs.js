// The Configurations dialog: the configuration library's launch (JSONC)
// and worker (YAML) files. List, new from a template, edit, validate,
// save (revision-checked), reload, rename, delete, preview the worker
// endpoints of a launch file, and apply a saved pair to the selected
// session while it is stopped. Unsaved edits are never dropped without a
// prompt. Every text shown comes through textContent (dom.js).

import { $, h, setChildren } from './dom.js';
import { api } from './net.js';
import { state, busyReason } from './state.js';
import { isHeadless } from './inspector.js';
import { createEditor } from './editor.js';
import { confirmDialog, toast } from './dialogs.js';

const ID = /^[A-Za-z0-9_-]{1,128}$/;
const SOURCES = {
  launch: [
    ['default', 'Local launch (default)'],
    ['deployment', 'Current hub deployment'],
    ['docker', 'Docker container'],
  ],
  worker: [
    ['default', 'Provider-neutral worker (default)'],
    ['deployment', 'Current hub deployment'],
  ],
};

const cfg = {
  kind: 'launch',
  lists: { launch: [], worker: [] },
  /** The file in the editor: `{id, revision, text}` as saved, or null for a new draft. */
  current: null,
  /** The text the editor started from (a file or a template). */
  base: '',
  editor: null,
  /** Requests in flight that replace the editor's text or the current file. */
  busy: 0,
};

/**
 * Runs `fn` with the form held read-only: a template, open, reload, save,
 * rename or delete answers into the editor, and an edit typed meanwhile
 * would be overwritten by it (or saved under the wrong base).
 */
async function holding(fn) {
  cfg.busy += 1;
  renderState();
  try {
    return await fn();
  } finally {
    cfg.busy -= 1;
    renderState();
  }
}

function message(res, fallback) {
  return (res && res.body && res.body.message) || fallback;
}

function setStatus(text, kind = 'info') {
  const el = $('cfg-status');
  el.textContent = text;
  el.className = `cfg-status small status-${kind}`;
}

function dirty() {
  if (!cfg.editor) return false;
  return cfg.editor.value !== cfg.base;
}

/** Asks before unsaved edits are thrown away; true when they may be. */
async function mayDiscard() {
  if (!dirty()) return true;
  return confirmDialog({
    title: 'Discard unsaved changes?',
    body: ['The editor has changes that are not saved. They will be lost.'],
    ok: 'Discard changes',
    danger: true,
  });
}

async function loadLists() {
  const res = await api('GET', '/api/configurations');
  if (!res.ok || !res.body) {
    setStatus(message(res, 'The configuration list could not be read.'), 'error');
    return;
  }
  cfg.lists = { launch: res.body.launch || [], worker: res.body.worker || [] };
}

function renderList() {
  const ids = cfg.lists[cfg.kind];
  setChildren(
    $('cfg-list'),
    ids.length
      ? ids.map((id) => {
          const active = cfg.current && cfg.current.id === id;
          return h('li', null, h('button', { type: 'button', class: `cfg-item${active ? ' active' : ''}`, 'aria-current': active ? 'true' : null, dataset: { id }, text: id, onclick: () => holding(() => openFile(id)) }));
        })
      : h('li', { class: 'muted small', text: 'No saved files.' }),
  );
  $('cfg-kind-launch').setAttribute('aria-pressed', String(cfg.kind === 'launch'));
  $('cfg-kind-worker').setAttribute('aria-pressed', String(cfg.kind === 'worker'));
  setChildren($('cfg-source'), SOURCES[cfg.kind].map(([value, text]) => h('option', { value, text })));
  renderApply();
}

function renderState() {
  const name = $('cfg-name').value;
  const parts = [];
  if (!cfg.current) parts.push('new file, not saved');
  else parts.push(`saved as ${cfg.current.id}`);
  if (dirty()) parts.push('unsaved changes');
  $('cfg-state').textContent = parts.join(' · ');
  const validName = ID.test(name);
  const busy = cfg.busy > 0;
  cfg.editor.textarea.readOnly = busy;
  $('cfg-name').readOnly = busy;
  $('cfg-new').disabled = busy;
  $('cfg-save').disabled = busy || !validName;
  $('cfg-rename').disabled = busy || !cfg.current || !validName || name === cfg.current.id || dirty();
  $('cfg-rename').title = cfg.current && dirty() ? 'Save or reload first: a rename keeps the saved text' : '';
  $('cfg-delete').disabled = busy || !cfg.current;
  $('cfg-reload').disabled = busy || !cfg.current;
  $('cfg-preview').hidden = cfg.kind !== 'launch';
  $('cfg-name').setAttribute('aria-invalid', String(name !== '' && !validName));
}

function renderApply() {
  const id = state.selected;
  const desc = id ? state.sessions.get(id) : null;
  const legend = $('cfg-apply-legend');
  const note = $('cfg-apply-note');
  const fill = (select, ids, chosen) => {
    const keep = select.value || chosen;
    setChildren(select, ids.map((i) => h('option', { value: i, text: i })));
    if (ids.includes(keep)) select.value = keep;
  };
  const spec = (desc && desc.spec) || {};
  fill($('cfg-apply-launch'), cfg.lists.launch, spec.launchConfig);
  fill($('cfg-apply-worker'), cfg.lists.worker, spec.workerConfig);
  let why = null;
  if (!desc) why = 'Select a session in the list first.';
  else if (isHeadless(desc)) why = 'A headless subagent has no configuration of its own.';
  else {
    const busy = busyReason(desc);
    if (busy) why = `Stop the worker first (${busy}).`;
  }
  if (!cfg.lists.launch.length || !cfg.lists.worker.length) why = why || 'Save a launch and a worker file first.';
  legend.textContent = desc ? `Apply to session ${id}` : 'Apply to the selected session';
  $('cfg-apply').textContent = desc ? `Apply to ${id}` : 'Apply';
  $('cfg-apply').disabled = Boolean(why);
  note.textContent = why || 'Replaces the session’s saved snapshot with copies of these two saved files (unsaved edits are not applied); its conversation state is kept.';
}

function showFile(file) {
  cfg.current = file ? { id: file.id, revision: file.revision } : null;
  cfg.base = file ? file.text : cfg.base;
  cfg.editor.setLanguage(cfg.kind === 'launch' ? 'json' : 'yaml');
  cfg.editor.value = cfg.base;
  $('cfg-name').value = file ? file.id : '';
  setChildren($('cfg-result'));
  renderList();
  renderState();
}

async function openFile(id) {
  if (cfg.current && cfg.current.id === id && !dirty()) return;
  if (!(await mayDiscard())) return;
  const res = await api('GET', `/api/configurations/${cfg.kind}/${encodeURIComponent(id)}`);
  if (!res.ok || !res.body) {
    setStatus(message(res, `${id} could not be read.`), 'error');
    return;
  }
  showFile(res.body);
  setStatus(`Opened ${id}.`);
}

async function newFromTemplate() {
  if (!(await mayDiscard())) return;
  const source = $('cfg-source').value;
  const res = await api('GET', `/api/configurations/${cfg.kind}/template?source=${encodeURIComponent(source)}`);
  if (!res.ok || !res.body) {
    setStatus(message(res, 'The template could not be read.'), 'error');
    return;
  }
  cfg.base = res.body.text;
  showFile(null);
  setStatus('A new file from the template: enter a name and save it.');
  $('cfg-name').focus();
}

async function save() {
  const id = $('cfg-name').value;
  if (!ID.test(id)) return;
  const sameFile = cfg.current && cfg.current.id === id;
  const revision = sameFile ? cfg.current.revision : null;
  const text = cfg.editor.value;
  const res = await api('PUT', `/api/configurations/${cfg.kind}/${encodeURIComponent(id)}`, { text, revision });
  if (res.status === 409) {
    setStatus(sameFile ? `${message(res, 'The file changed.')} Your text is kept in the editor: reload to see the saved one, then merge.` : `${message(res, 'The name is taken.')} Choose another name.`, 'error');
    return;
  }
  if (!res.ok || !res.body) {
    setStatus(message(res, 'Not saved.'), 'error');
    return;
  }
  cfg.current = { id: res.body.id, revision: res.body.revision };
  cfg.base = res.body.text;
  await loadLists();
  renderList();
  renderState();
  setStatus(`Saved ${res.body.id}.`, 'ok');
}

async function validate() {
  const res = await api('POST', `/api/configurations/${cfg.kind}/validate`, { text: cfg.editor.value });
  if (res.ok) setStatus('Valid.', 'ok');
  else setStatus(message(res, 'Not valid.'), 'error');
}

async function reload() {
  if (!cfg.current) return;
  if (!(await mayDiscard())) return;
  const id = cfg.current.id;
  const res = await api('GET', `/api/configurations/${cfg.kind}/${encodeURIComponent(id)}`);
  if (!res.ok || !res.body) {
    setStatus(message(res, `${id} could not be read.`), 'error');
    return;
  }
  showFile(res.body);
  setStatus(`Reloaded ${id}.`);
}

async function rename() {
  const to = $('cfg-name').value;
  if (!cfg.current || !ID.test(to) || dirty()) return;
  const from = cfg.current.id;
  const res = await api('POST', `/api/configurations/${cfg.kind}/${encodeURIComponent(from)}/rename`, { id: to, revision: cfg.current.revision });
  if (!res.ok || !res.body) {
    setStatus(message(res, 'Not renamed.'), 'error');
    return;
  }
  cfg.current = { id: res.body.id, revision: res.body.revision };
  await loadLists();
  renderList();
  renderState();
  setStatus(`Renamed ${from} to ${to}. Sessions keep their own copies.`, 'ok');
}

async function remove() {
  if (!cfg.current) return;
  const id = cfg.current.id;
  const sure = await confirmDialog({ title: `Delete ${id}?`, body: ['The saved file is removed from the library. Sessions created from it keep their own copies.'], ok: 'Delete', danger: true });
  if (!sure) return;
  const res = await api('DELETE', `/api/configurations/${cfg.kind}/${encodeURIComponent(id)}`, { revision: cfg.current.revision });
  if (!res.ok) {
    setStatus(message(res, 'Not deleted.'), 'error');
    return;
  }
  cfg.current = null;
  cfg.base = cfg.editor.value;
  await loadLists();
  renderList();
  renderState();
  setStatus(`Deleted ${id}; its text stays in the editor until you leave it.`, 'ok');
}

async function preview() {
  const res = await api('POST', '/api/configurations/preview', { launch: cfg.editor.value });
  if (!res.ok || !res.body || !res.body.endpoints) {
    setStatus(message(res, 'No preview.'), 'error');
    return;
  }
  const e = res.body.endpoints;
  setChildren(
    $('cfg-result'),
    h('p', { class: 'muted', text: 'The addresses a worker launched from this file would use (SESSION_ID and SESSION_TOKEN stand for a session’s own):' }),
    h('dl', { class: 'cfg-endpoints' }, [
      ['Events', e.events],
      ['Confirmations', e.confirm],
      ['Remote tools', e.tools],
    ].map(([k, v]) => [h('dt', { text: k }), h('dd', null, h('code', { text: v }))])),
  );
  setStatus('Endpoints previewed from the live listeners.', 'ok');
}

async function apply() {
  const id = state.selected;
  if (!id) return;
  const body = { launchConfig: $('cfg-apply-launch').value, workerConfig: $('cfg-apply-worker').value };
  const res = await api('POST', `/api/sessions/${encodeURIComponent(id)}/configurations`, body);
  if (!res.ok) {
    setStatus(message(res, 'Not applied.'), 'error');
    return;
  }
  setStatus(`Applied ${body.launchConfig} and ${body.workerConfig} to ${id}; the next start uses them.`, 'ok');
  toast(`Session ${id} now launches from ${body.launchConfig} and ${body.workerConfig}.`);
}

async function switchKind(kind) {
  if (kind === cfg.kind) return;
  if (!(await mayDiscard())) return;
  cfg.kind = kind;
  cfg.current = null;
  cfg.base = '';
  showFile(null);
  setStatus('');
}

async function close() {
  if (!(await mayDiscard())) return;
  cfg.base = cfg.editor.value;
  $('dlg-configs').close();
}

/** Opens the dialog (fetching the lists). */
export async function openConfigurations() {
  const dlg = $('dlg-configs');
  if (!dlg.open) dlg.showModal();
  await loadLists();
  renderList();
  renderState();
  if (!cfg.current && cfg.editor.value === '') setStatus('Choose a saved file, or start a new one from a template.');
}

/** Re-draws what depends on the sessions (the apply section) while open. */
export function refreshConfigurations() {
  if ($('dlg-configs').open) renderApply();
}

export function wireConfigurations() {
  cfg.editor = createEditor($('cfg-editor'), { label: 'Configuration source' });
  cfg.editor.onInput(renderState);
  $('cfg-name').addEventListener('input', renderState);
  $('configs-open').addEventListener('click', openConfigurations);
  $('cfg-close').addEventListener('click', close);
  $('dlg-configs').addEventListener('cancel', (e) => {
    e.preventDefault();
    close();
  });
  $('cfg-kind-launch').addEventListener('click', () => switchKind('launch'));
  $('cfg-kind-worker').addEventListener('click', () => switchKind('worker'));
  $('cfg-new').addEventListener('click', () => holding(newFromTemplate));
  $('cfg-save').addEventListener('click', () => holding(save));
  $('cfg-validate').addEventListener('click', validate);
  $('cfg-reload').addEventListener('click', () => holding(reload));
  $('cfg-rename').addEventListener('click', () => holding(rename));
  $('cfg-delete').addEventListener('click', () => holding(remove));
  $('cfg-preview').addEventListener('click', preview);
  $('cfg-apply').addEventListener('click', apply);
}
