// The composer's two modes and its primary button.
//
// Message mode is the ordinary text box. Alt+Enter switches to command
// mode, where the same box takes a command name instead: the commands whose
// names start with what is typed are listed (ArrowUp/ArrowDown choose, Tab
// completes the chosen name, Enter runs it, Escape or Alt+Enter goes back).
// The message draft is kept aside meanwhile and restored, so a command can
// never be sent to the worker as text, nor erase a draft.
//
// While a run is active the primary button is "Cancel run" instead of
// "Send"; Enter in message mode still queues the message behind the run
// (the hub tracks it as a queued input).

import { $, h, setChildren } from './dom.js';
import { state, panel, composerBlock, runActive } from './state.js';
import { isHeadless } from './inspector.js';
import { refreshView, sendInput } from './actions.js';

export const COMMANDS = [
  { id: 'refresh', name: 'Refresh conversation', detail: 'Reload the transcript from the hub and the history from the worker.' },
  { id: 'continue', name: 'Continue run', detail: 'Let the worker continue from its current state, without a new message.' },
  { id: 'compact', name: 'Compact context', detail: 'Archive the conversation and replace the context with a saved summary.' },
];

const ui = {
  mode: 'message',
  /** The message draft, kept while in command mode. */
  draft: '',
  /** The command text, kept while in message mode. */
  query: '',
  active: 0,
  /** Why the last Enter ran nothing (shown under the list), or ''. */
  note: '',
};

/** Commands whose name starts with `query` (case and leading blanks ignored). */
export function matchCommands(query) {
  const q = String(query).trimStart().toLowerCase();
  return COMMANDS.filter((c) => c.name.toLowerCase().startsWith(q));
}

/** Why `cmd` cannot run now, or null. */
export function commandBlock(cmd) {
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  if (!desc) return 'Select a session first.';
  if (isHeadless(desc)) return 'A headless subagent is driven by its parent worker only.';
  if (cmd.id === 'refresh') return panel.socket && panel.socket.isOpen() ? null : 'Not connected to the hub.';
  const blocked = composerBlock();
  if (blocked) return blocked;
  if (cmd.id === 'compact') {
    const caps = Array.isArray(desc.worker_capabilities) ? desc.worker_capabilities : [];
    if (!caps.includes('context-compact')) return 'The connected worker does not advertise context-compact.';
  }
  return null;
}

export function commandMode() {
  return ui.mode === 'command';
}

/** Switches between message and command mode, keeping each mode's text. */
export function toggleMode() {
  const box = $('message');
  if (ui.mode === 'message') {
    ui.draft = box.value;
    box.value = ui.query;
    ui.mode = 'command';
  } else {
    ui.query = box.value;
    box.value = ui.draft;
    ui.mode = 'message';
  }
  ui.active = 0;
  ui.note = '';
  renderComposerMode();
  box.focus();
}

function run(cmd) {
  const why = commandBlock(cmd);
  if (why) {
    ui.note = `${cmd.name} is not available: ${why}`;
    draw();
    return;
  }
  ui.note = '';
  ui.query = '';
  ui.active = 0;
  $('message').value = '';
  if (cmd.id === 'refresh') refreshView();
  else sendInput(cmd.id); // continue | compact
  draw();
}

/** Enter or the primary button in command mode: runs the highlighted command. */
export function submitCommand() {
  const list = matchCommands($('message').value);
  const cmd = list[Math.min(ui.active, list.length - 1)];
  if (!cmd) {
    ui.note = `No command starts with “${$('message').value.trim()}”.`;
    draw();
    return;
  }
  run(cmd);
}

/**
 * Keys in the text box while in command mode. Returns true when the key
 * was handled (app.js then leaves it alone).
 */
export function onCommandKey(e) {
  if (ui.mode !== 'command' || e.isComposing) return false;
  const list = matchCommands($('message').value);
  if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    if (list.length) ui.active = (Math.min(ui.active, list.length - 1) + (e.key === 'ArrowDown' ? 1 : list.length - 1)) % list.length;
  } else if (e.key === 'Tab' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey) {
    // Tab completes when there is something to complete; otherwise it
    // moves focus as usual.
    const cmd = list[Math.min(ui.active, list.length - 1)];
    if (!cmd || $('message').value === cmd.name) return false;
    $('message').value = cmd.name;
  } else if (e.key === 'Enter' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey) {
    submitCommand();
  } else if (e.key === 'Escape') {
    toggleMode();
  } else return false;
  e.preventDefault();
  draw();
  return true;
}

let listSig = null;

function draw() {
  const box = $('message');
  const command = ui.mode === 'command';
  const chip = $('composer-mode');
  chip.textContent = command ? 'Command mode' : 'Message mode';
  chip.className = `composer-mode ${command ? 'is-command' : ''}`;
  box.placeholder = command ? 'Type a command: Refresh conversation, Continue run, Compact context (Tab completes, Enter runs, Esc goes back)' : 'Message the worker (Enter sends, Shift+Enter for a new line, Alt+Enter for commands)';
  box.setAttribute('aria-label', command ? 'Command' : 'Message');
  const listEl = $('command-list');
  listEl.hidden = !command;
  const list = command ? matchCommands(box.value) : [];
  if (ui.active >= list.length) ui.active = Math.max(0, list.length - 1);
  const sig = JSON.stringify([command, list.map((c) => [c.id, commandBlock(c)]), ui.active, ui.note, box.value === '' ? '' : 'x']);
  if (command) {
    box.setAttribute('role', 'combobox');
    box.setAttribute('aria-controls', 'command-list');
    box.setAttribute('aria-expanded', 'true');
    box.setAttribute('aria-autocomplete', 'list');
    if (list.length) box.setAttribute('aria-activedescendant', `cmd-${list[ui.active].id}`);
    else box.removeAttribute('aria-activedescendant');
  } else {
    for (const a of ['role', 'aria-controls', 'aria-expanded', 'aria-autocomplete', 'aria-activedescendant']) box.removeAttribute(a);
  }
  if (sig !== listSig) {
    listSig = sig;
    setChildren(
      listEl,
      list.map((c, i) => {
        const why = commandBlock(c);
        return h(
          'li',
          {
            id: `cmd-${c.id}`,
            role: 'option',
            class: `command-item${i === ui.active ? ' active' : ''}${why ? ' unavailable' : ''}`,
            'aria-selected': String(i === ui.active),
            'aria-disabled': why ? 'true' : null,
            onmousedown: (e) => e.preventDefault(), // keep the focus in the box
            onclick: () => {
              ui.active = i;
              run(c);
            },
          },
          h('span', { class: 'command-name', text: c.name }),
          h('span', { class: 'command-detail muted small', text: why ? `Unavailable: ${why}` : c.detail }),
        );
      }),
      list.length ? null : h('li', { class: 'command-empty muted small', text: `No command starts with “${box.value.trim()}”.` }),
      ui.note ? h('li', { class: 'command-note error-text small', role: 'status', text: ui.note }) : null,
    );
  }
}

/** The primary button: Send (message), Run (command) or Cancel run (a run is active). */
export function renderComposerMode() {
  draw();
  const desc = state.selected ? state.sessions.get(state.selected) : null;
  const v = state.selected ? state.views.get(state.selected) : null;
  const active = Boolean(desc && !isHeadless(desc) && desc.connected && v && runActive(desc));
  const send = $('send');
  const cancel = $('cancel-run');
  cancel.hidden = !active;
  send.hidden = active && ui.mode === 'message';
  const label = ui.mode === 'command' ? 'Run' : 'Send';
  if (send.textContent !== label) send.textContent = label;
  if (ui.mode === 'command') {
    // A command's own availability is shown in the list; the button runs
    // whatever is highlighted (and says why when it cannot).
    send.disabled = !desc;
  }
  $('composer-hint').textContent = active && ui.mode === 'message' ? 'A run is active: Enter queues the message behind it.' : ui.mode === 'command' ? 'Alt+Enter or Esc: back to the message.' : 'Alt+Enter: command mode.';
}

export function wireComposerMode() {
  const box = $('message');
  box.addEventListener('input', () => {
    if (ui.mode !== 'command') return;
    ui.active = 0;
    ui.note = '';
    draw();
  });
  // Alt+Enter anywhere outside a dialog switches the mode and focuses the box.
  document.addEventListener(
    'keydown',
    (e) => {
      if (e.key !== 'Enter' || !e.altKey || e.ctrlKey || e.metaKey || e.shiftKey || e.isComposing || e.repeat) return;
      if (document.querySelector('dialog[open]')) return;
      if ($('composer').hidden || box.disabled) return;
      e.preventDefault();
      e.stopPropagation();
      toggleMode();
    },
    true,
  );
  draw();
}
