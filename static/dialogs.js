// Toasts and the modal dialogs: the confirmation asked before a risky
// action, session creation (with id validation) and sign-in.

import { $, h, setChildren } from './dom.js';
import { api, storeToken } from './net.js';
import { state, send } from './state.js';

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;

export function toast(text, kind = 'info') {
  const box = $('toasts');
  const el = h('div', { class: `toast toast-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('span', { text }), h('button', { type: 'button', class: 'link small', 'aria-label': 'Dismiss', text: '×', onclick: () => el.remove() }));
  box.appendChild(el);
  while (box.children.length > 5) box.firstElementChild.remove();
  setTimeout(() => el.remove(), kind === 'error' ? 12000 : 6000);
}

export function confirmDialog({ title, body, ok, danger }) {
  const dlg = $('dlg-confirm');
  $('confirm-title').textContent = title;
  setChildren($('confirm-body'), body.map((t) => (t instanceof Node ? t : h('p', { text: t }))));
  const okBtn = $('confirm-ok');
  okBtn.textContent = ok;
  okBtn.className = danger ? 'danger' : '';
  return new Promise((resolve) => {
    const form = $('confirm-form');
    const done = (value) => {
      form.removeEventListener('submit', onSubmit);
      $('confirm-cancel').removeEventListener('click', onCancel);
      dlg.removeEventListener('close', onClose);
      if (dlg.open) dlg.close();
      resolve(value);
    };
    const onSubmit = (e) => {
      e.preventDefault();
      done(true);
    };
    const onCancel = () => done(false);
    const onClose = () => done(false);
    form.addEventListener('submit', onSubmit);
    $('confirm-cancel').addEventListener('click', onCancel);
    dlg.addEventListener('close', onClose);
    dlg.showModal();
    $('confirm-cancel').focus();
  });
}

// ---------------------------------------------------------------------------
// Session creation
// ---------------------------------------------------------------------------

function idProblem(id) {
  if (id === '') return 'Enter an id.';
  if (id.length > 128) return 'At most 128 characters.';
  if (!SESSION_ID.test(id)) return 'Only letters, digits, “_” and “-”.';
  if (id.startsWith('subagent-')) return '“subagent-” is reserved for headless subagents.';
  if (state.sessions.has(id)) return 'A session with this id already exists.';
  return null;
}

export function wireCreate() {
  const dlg = $('dlg-create');
  const input = $('create-id');
  const note = $('create-id-note');
  const ok = $('create-ok');
  const validate = () => {
    const problem = idProblem(input.value);
    input.setAttribute('aria-invalid', String(Boolean(problem) && input.value !== ''));
    note.textContent = problem && input.value !== '' ? problem : '1–128 letters, digits, “_” or “-”; not starting with “subagent-”.';
    note.className = problem && input.value !== '' ? 'small error-text' : 'small muted';
    ok.disabled = Boolean(problem) || state.creating !== null;
    return !problem;
  };
  input.addEventListener('input', validate);
  $('new-session').addEventListener('click', () => {
    input.value = '';
    $('create-model').value = '';
    $('create-error').textContent = '';
    state.creating = null;
    const providers = (state.meta && (state.meta.provider_profiles || state.meta.providers)) || [];
    const builtIn = state.meta && state.meta.launcher && state.meta.launcher.kind === 'built-in';
    const preferred = builtIn && providers.includes('mock') ? 'mock' : providers[0];
    setChildren($('create-provider'), providers.map((p) => h('option', { value: p, text: p, selected: p === preferred ? true : null })));
    validate();
    dlg.showModal();
    input.focus();
    fillLibrary();
  });
  $('create-launch').addEventListener('change', libraryChanged);
  $('create-worker').addEventListener('change', libraryChanged);
  $('create-cancel').addEventListener('click', () => dlg.close());
  dlg.addEventListener('close', () => {
    state.creating = null;
  });
  $('create-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!validate()) return;
    const id = input.value;
    const launchConfig = $('create-launch').value;
    const workerConfig = $('create-worker').value;
    if (Boolean(launchConfig) !== Boolean(workerConfig)) {
      $('create-error').textContent = 'Choose both a launch and a worker configuration, or neither.';
      return;
    }
    let spec;
    if (launchConfig) {
      spec = { launchConfig, workerConfig };
    } else {
      spec = { provider: $('create-provider').value };
      const model = $('create-model').value.trim();
      if (model) spec.model = model;
    }
    $('create-error').textContent = '';
    if (!send({ type: 'create_session', session: id, spec })) {
      $('create-error').textContent = 'Not connected to the hub.';
      return;
    }
    state.creating = id;
    ok.disabled = true;
  });
}

/** The saved-configuration pickers of the new-session form. */
async function fillLibrary() {
  const box = $('create-library');
  const caps = (state.meta && Array.isArray(state.meta.capabilities) && state.meta.capabilities) || [];
  box.hidden = !caps.includes('configuration-library');
  const none = (what) => h('option', { value: '', text: `none (${what})` });
  setChildren($('create-launch'), none('the hub-wide launcher'));
  setChildren($('create-worker'), none('a generated worker file'));
  libraryChanged();
  if (box.hidden) return;
  let res = null;
  try {
    res = await api('GET', '/api/configurations');
  } catch {
    res = null;
  }
  if (!res || !res.ok || !res.body) return;
  const fill = (select, ids, what) => setChildren(select, none(what), (ids || []).map((i) => h('option', { value: i, text: i })));
  fill($('create-launch'), res.body.launch, 'the hub-wide launcher');
  fill($('create-worker'), res.body.worker, 'a generated worker file');
  libraryChanged();
}

function libraryChanged() {
  const chosen = Boolean($('create-launch').value || $('create-worker').value);
  $('create-provider').disabled = chosen;
  $('create-model').disabled = chosen;
}

// ---------------------------------------------------------------------------
// Sign-in
// ---------------------------------------------------------------------------

export function showSignIn(message) {
  const dlg = $('dlg-token');
  $('token-error').textContent = message || '';
  if (!dlg.open) dlg.showModal();
  $('token-input').focus();
}

/** Wires the sign-in dialog; `onSignedIn` runs once the hub accepts the typed token. */
export function wireSignIn(onSignedIn) {
  const dlg = $('dlg-token');
  $('token-cancel').addEventListener('click', () => dlg.close());
  $('token-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = $('token-input').value;
    if (!token) return;
    storeToken(token);
    $('token-ok').disabled = true;
    let res = null;
    try {
      res = await api('GET', '/api/sessions');
    } catch {
      res = null;
    }
    $('token-ok').disabled = false;
    if (!res) {
      $('token-error').textContent = 'The hub did not answer.';
      return;
    }
    if (res.status === 401) {
      $('token-error').textContent = 'The hub refused this token.';
      $('token-input').select();
      return;
    }
    $('token-input').value = '';
    dlg.close();
    onSignedIn();
  });
}
