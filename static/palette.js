// The command palette (Ctrl+K, or Cmd+K on a Mac): every action that is
// available right now, filtered as you type by subsequence ("rsb" finds
// "Restart the worker of beta"), run with Enter. ArrowUp/ArrowDown move,
// Home/End jump when the query is empty, Escape closes; focus goes back to
// where it was. An action that would be refused is not offered at all,
// mirroring the rules the buttons use (worker controls, delete, signals,
// compact, cancel). While the palette is open every redraw of the page
// rebuilds the list (refreshPalette), so an action that stops being
// available (the run ended, the worker went away) leaves it at once and
// one that becomes available appears; the highlighted entry is kept.

import { $, h, setChildren } from './dom.js';
import { state, panel, send, processActive, busyReason, composerBlock, runActive } from './state.js';
import { isHeadless, TABS } from './inspector.js';
import { select, selectTab, setDrawer, narrow, workerAction, deleteSession, refreshView, sendInput } from './actions.js';
import { MODES, confirmMode, chooseMode } from './confirm-mode.js';
import { THEMES, theme, themeLabel, setTheme } from './theme.js';
import { ping, latencyText, detailsShown, toggleDetails } from './statusbar.js';
import { commandMode, toggleMode } from './composer.js';

/** Most entries drawn at once (the filter narrows the rest). */
const MAX_SHOWN = 200;

/** True when every character of `query` occurs in `text` in order (case-insensitive). */
export function matches(text, query) {
  const q = String(query).toLowerCase().replace(/\s+/g, '');
  if (!q) return true;
  const t = String(text).toLowerCase();
  let at = 0;
  for (const ch of q) {
    const i = t.indexOf(ch, at);
    if (i < 0) return false;
    at = i + 1;
  }
  return true;
}

const TAB_NAMES = { run: 'Run', process: 'Process', logs: 'Logs', snapshot: 'Snapshot', plan: 'Plan', grants: 'Grants' };

function showInspector() {
  if (narrow.matches) setDrawer('inspector');
  else if (!state.inspectorOpen) $('toggle-inspector').click();
}

/**
 * The actions available now, in display order: `{id, group, label, hint?,
 * run}`. Reads the state only; running one is what changes anything.
 */
export function buildCommands() {
  const out = [];
  const add = (id, group, label, run, hint) => out.push({ id, group, label, run, hint: hint || '' });
  const online = Boolean(panel.socket && panel.socket.isOpen());
  const caps = state.meta && Array.isArray(state.meta.capabilities) ? state.meta.capabilities : [];
  const id = state.selected;
  const desc = id ? state.sessions.get(id) : null;

  const ids = [...state.sessions.keys()].sort();
  for (const sid of ids) {
    if (sid === id) continue;
    add(`session:${sid}`, 'Sessions', `Switch to ${sid}`, () => select(sid), isHeadless(state.sessions.get(sid)) ? 'headless' : '');
  }
  if (!$('new-session').disabled) add('session:new', 'Sessions', 'New session…', () => $('new-session').click());

  if (desc && !isHeadless(desc)) {
    const busy = state.busy.get(id);
    const active = processActive(desc);
    const ready = online && !busy;
    if (ready && !active) add('worker:start', 'Worker', `Start the worker of ${id}…`, () => workerAction('start'));
    if (ready && (active || desc.connected)) {
      add('worker:stop', 'Worker', `Stop the worker of ${id}…`, () => workerAction('stop'));
      add('worker:restart', 'Worker', `Restart the worker of ${id}…`, () => workerAction('restart'));
    }
    if (ready && active) add('worker:force-kill', 'Worker', `Force-kill the worker of ${id}…`, () => workerAction('force-kill'));
    if (ready && !busyReason(desc)) add('session:delete', 'Sessions', `Delete session ${id}…`, () => deleteSession());

    const blocked = composerBlock();
    if (!blocked) {
      add('signal:status', 'Worker', 'Ask the worker for its status', () => send({ type: 'signal', session: id, operation: 'status' }));
      add('signal:options', 'Worker', 'Ask the worker which models it offers', () => send({ type: 'signal', session: id, operation: 'options' }));
      add('input:continue', 'Conversation', 'Continue run', () => sendInput('continue'));
      const wcaps = Array.isArray(desc.worker_capabilities) ? desc.worker_capabilities : [];
      if (wcaps.includes('context-compact')) add('input:compact', 'Conversation', 'Compact context', () => sendInput('compact'));
    }
    const v = state.views.get(id);
    if (online && desc.connected && v && runActive(desc)) {
      add('signal:cancel', 'Worker', 'Cancel the active run', () => $('cancel-run').click(), v.activeRun ? `run ${v.activeRun.runId.slice(0, 8)}` : '');
    }
    if (online) add('view:refresh', 'Conversation', 'Reload the transcript from the hub (Refresh conversation)', () => refreshView());
    for (const tab of TABS) add(`inspector:${tab}`, 'View', `Open the ${TAB_NAMES[tab] || tab} pane of the inspector`, () => {
      showInspector();
      selectTab(tab, true);
    });
    const mode = confirmMode(id);
    for (const [m, info] of Object.entries(MODES)) {
      if (m === mode) continue;
      add(`mode:${m}`, 'Approvals', `Confirmation mode: ${info.label}${m === 'approve' ? '…' : ''}`, () => chooseMode(id, m), `now ${MODES[mode].label}`);
    }
    if (!$('composer').hidden) add('composer:mode', 'Conversation', commandMode() ? 'Composer: back to message mode' : 'Composer: command mode', () => toggleMode(), 'Alt+Enter');
  }

  const inspectorShown = narrow.matches ? state.drawer === 'inspector' : state.inspectorOpen;
  add('view:inspector', 'View', inspectorShown ? 'Hide the inspector' : 'Show the inspector', () => {
    if (narrow.matches) setDrawer(inspectorShown ? null : 'inspector');
    else $('toggle-inspector').click();
  });
  if (narrow.matches) add('view:sessions', 'View', state.drawer === 'sessions' ? 'Hide the session list' : 'Show the session list', () => setDrawer(state.drawer === 'sessions' ? null : 'sessions'));
  if (online) add('hub:ping', 'Hub', 'Ping the hub (socket latency)', () => ping(), latencyText() ? `last ${latencyText()}` : '');
  add('view:details', 'View', detailsShown() ? 'Hide technical details' : 'Show technical details', () => toggleDetails());
  for (const t of THEMES) if (t !== theme()) add(`theme:${t}`, 'View', `Theme: ${themeLabel(t)}`, () => setTheme(t), `now ${themeLabel(theme())}`);
  if (caps.includes('configuration-library') && !$('configs-open').hidden) add('hub:configs', 'Hub', 'Configurations…', () => $('configs-open').click());
  if (caps.includes('hub-health') && !$('health-open').hidden) add('hub:health', 'Hub', 'Hub health…', () => $('health-open').click(), 'memory, connections, worker rates');
  if (desc && !isHeadless(desc) && !$('skills-open').hidden && !$('skills-open').disabled && !$('composer').hidden) add('composer:skills', 'Conversation', 'Skills…', () => $('skills-open').click());
  if (panel.socket && panel.socket.state === 'waiting') add('hub:reconnect', 'Hub', 'Reconnect now', () => panel.socket.retryNow());
  return out;
}

/** The entries whose label, hint or group match `query`. */
export function filterCommands(commands, query) {
  return commands.filter((c) => matches(`${c.label} ${c.hint} ${c.group}`, query));
}

const ui = { open: false, commands: [], shown: [], active: 0, returnTo: null, sig: '' };

/** What the drawn list shows, to skip redraws that would change nothing. */
function listSig(commands) {
  return JSON.stringify(commands.map((c) => [c.id, c.label, c.hint]));
}

function draw() {
  const q = $('palette-input').value;
  ui.shown = filterCommands(ui.commands, q).slice(0, MAX_SHOWN);
  if (ui.active >= ui.shown.length) ui.active = Math.max(0, ui.shown.length - 1);
  ui.sig = listSig(ui.commands);
  const list = $('palette-list');
  setChildren(
    list,
    ui.shown.map((c, i) =>
      h(
        'li',
        {
          id: `pal-${i}`,
          role: 'option',
          class: `palette-item${i === ui.active ? ' active' : ''}`,
          'aria-selected': String(i === ui.active),
          dataset: { command: c.id },
          onmousedown: (e) => e.preventDefault(), // keep the focus in the input
          onclick: () => runAt(i),
        },
        h('span', { class: 'palette-label', text: c.label }),
        c.hint ? h('span', { class: 'palette-hint muted small', text: c.hint }) : null,
        h('span', { class: 'palette-group muted small', text: c.group }),
      ),
    ),
  );
  $('palette-empty').hidden = ui.shown.length > 0;
  $('palette-count').textContent = ui.shown.length === 1 ? '1 action' : `${ui.shown.length} actions`;
  const input = $('palette-input');
  if (ui.shown.length) {
    input.setAttribute('aria-activedescendant', `pal-${ui.active}`);
    list.querySelector('.active')?.scrollIntoView({ block: 'nearest' });
  } else input.removeAttribute('aria-activedescendant');
}

export function openPalette() {
  // The dialog's own state, not ui.open: after Escape the dialog is closed
  // at once but its close event (which clears ui.open) comes a task later.
  if (document.querySelector('dialog[open]')) return;
  ui.returnTo = document.activeElement && document.activeElement !== document.body ? document.activeElement : null;
  ui.commands = buildCommands();
  ui.active = 0;
  ui.open = true;
  $('palette-input').value = '';
  $('palette-input').setAttribute('aria-expanded', 'true');
  draw();
  $('dlg-palette').showModal();
  $('palette-input').focus();
}

function restoreFocus() {
  const el = ui.returnTo;
  ui.returnTo = null;
  if (el && el.isConnected && !el.disabled && !el.closest('[hidden]')) el.focus();
  else $('transcript').focus({ preventScroll: true });
}

/**
 * Rebuilds the open palette's list from the current state (app.js calls it
 * after each redraw of the page). Nothing happens while it is closed or
 * when the available actions are unchanged; the highlighted action stays
 * highlighted while it is still listed.
 */
export function refreshPalette() {
  if (!ui.open || !$('dlg-palette').open) return;
  const commands = buildCommands();
  if (listSig(commands) === ui.sig) return;
  const current = ui.shown[ui.active] ? ui.shown[ui.active].id : null;
  ui.commands = commands;
  const q = $('palette-input').value;
  const at = current === null ? -1 : filterCommands(commands, q).slice(0, MAX_SHOWN).findIndex((c) => c.id === current);
  ui.active = at >= 0 ? at : 0;
  draw();
}

export function closePalette() {
  ui.open = false;
  $('palette-input').setAttribute('aria-expanded', 'false');
  if ($('dlg-palette').open) $('dlg-palette').close();
}

function runAt(i) {
  const cmd = ui.shown[i];
  if (!cmd) return;
  closePalette();
  restoreFocus();
  // After the palette is gone, so that a confirmation dialog the action
  // opens takes the focus and returns it to where the operator was.
  cmd.run();
}

export function wirePalette() {
  const dlg = $('dlg-palette');
  const input = $('palette-input');
  dlg.addEventListener('close', () => {
    // Not when the palette was opened again before this event came.
    if (ui.open && !dlg.open) {
      // Escape (the dialog's cancel) or a click outside.
      ui.open = false;
      input.setAttribute('aria-expanded', 'false');
      restoreFocus();
    }
  });
  dlg.addEventListener('click', (e) => {
    if (e.target === dlg) closePalette(); // the backdrop
  });
  input.addEventListener('input', () => {
    ui.active = 0;
    draw();
  });
  input.addEventListener('keydown', (e) => {
    if (e.isComposing) return;
    const n = ui.shown.length;
    if (e.key === 'ArrowDown') ui.active = n ? (ui.active + 1) % n : 0;
    else if (e.key === 'ArrowUp') ui.active = n ? (ui.active + n - 1) % n : 0;
    else if (e.key === 'Home' && input.value === '') ui.active = 0;
    else if (e.key === 'End' && input.value === '') ui.active = Math.max(0, n - 1);
    else if (e.key === 'Enter') {
      e.preventDefault();
      runAt(ui.active);
      return;
    } else return;
    e.preventDefault();
    draw();
  });
  $('palette-open').addEventListener('click', () => openPalette());
  document.addEventListener(
    'keydown',
    (e) => {
      if (e.key.toLowerCase() !== 'k' || !(e.ctrlKey || e.metaKey) || e.altKey || e.shiftKey || e.isComposing) return;
      if (dlg.open) {
        e.preventDefault();
        closePalette();
        restoreFocus();
        return;
      }
      if (document.querySelector('dialog[open]')) return; // another dialog has the keyboard
      e.preventDefault();
      openPalette();
    },
    true,
  );
}
