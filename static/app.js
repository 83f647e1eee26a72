// The operator panel: sign-in, the panel socket, session list and
// controls, transcript, composer, approvals tray and inspector. This module
// wires them together: it creates the socket and the shared objects, binds
// the page's buttons, keys and scrolling to the actions, and boots.
// Untrusted text is only ever set with textContent (see dom.js).

import { $ } from './dom.js';
import { api, takeTokenFromUrl, PanelSocket } from './net.js';
import { Approvals } from './approvals.js';
import { TABS, HeadlessView } from './inspector.js';
import { state, panel, render, send, setDraw } from './state.js';
import { toast, showSignIn, wireCreate, wireSignIn } from './dialogs.js';
import { select, selectTab, setDrawer, narrow, refreshDescription, setPolicy, sendInput } from './actions.js';
import { renderAll, renderHubInfo, buildHeader, followLatest, onTranscriptScroll } from './render.js';
import { onMessage, onDisconnected, upsertSession } from './messages.js';
import { wireConfigurations } from './configs.js';
import { wireSkills } from './skills.js';
// The cockpit: palette, composer modes, confirmation mode, tokens, theme, status bar.
import { wirePalette, refreshPalette } from './palette.js';
import { wireComposerMode, renderComposerMode, commandMode, submitCommand, onCommandKey } from './composer.js';
import { wireModeControl, renderModeControl } from './confirm-mode.js';
import { renderTokens } from './tokens.js';
import { wireTheme } from './theme.js';
import { wireStatusBar, renderStatusBar, onSocketStateForLatency } from './statusbar.js';
import { wireHealth } from './health.js';

// ---------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------

function onSocketState(s) {
  onSocketStateForLatency(s);
  if (s !== 'open') {
    if (state.started) onDisconnected();
  }
  if (s === 'rejected') showSignIn('The hub refused the panel token.');
  render();
}

async function checkAuth() {
  const res = await api('GET', '/api/sessions');
  return res.status === 401;
}

function connect() {
  if (!panel.socket) panel.socket = new PanelSocket({ onMessage, onState: onSocketState, checkAuth });
  panel.socket.connect();
}

// ---------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------

function wireComposer() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    if (commandMode()) submitCommand();
    else sendInput('message');
  });
  $('message').addEventListener('keydown', (e) => {
    if (onCommandKey(e) || commandMode()) return;
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      sendInput('message');
    }
  });
  $('continue').addEventListener('click', () => sendInput('continue'));
  $('compact').addEventListener('click', () => sendInput('compact'));
  $('load-models').addEventListener('click', () => {
    if (state.selected) send({ type: 'signal', session: state.selected, operation: 'options' });
  });
  $('cancel-run').addEventListener('click', () => {
    const v = state.selected && state.views.get(state.selected);
    const msg = { type: 'signal', session: state.selected, operation: 'cancel' };
    if (v && v.activeRun) msg.run_id = v.activeRun.runId;
    send(msg);
  });
}

function wireTabs() {
  for (const b of document.querySelectorAll('[role="tab"]')) {
    b.addEventListener('click', () => selectTab(b.dataset.tab, false));
    b.addEventListener('keydown', (e) => {
      const i = TABS.indexOf(state.tab);
      if (e.key === 'ArrowRight') selectTab(TABS[(i + 1) % TABS.length], true);
      else if (e.key === 'ArrowLeft') selectTab(TABS[(i + TABS.length - 1) % TABS.length], true);
      else if (e.key === 'Home') selectTab(TABS[0], true);
      else if (e.key === 'End') selectTab(TABS[TABS.length - 1], true);
      else return;
      e.preventDefault();
    });
  }
}

function wireLayout() {
  $('toggle-sessions').addEventListener('click', () => setDrawer(state.drawer === 'sessions' ? null : 'sessions'));
  $('toggle-inspector').addEventListener('click', () => {
    if (narrow.matches) {
      setDrawer(state.drawer === 'inspector' ? null : 'inspector');
      return;
    }
    state.inspectorOpen = !state.inspectorOpen;
    $('layout').classList.toggle('no-inspector', !state.inspectorOpen);
    $('toggle-inspector').setAttribute('aria-expanded', String(state.inspectorOpen));
  });
  $('backdrop').addEventListener('click', () => setDrawer(null));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.drawer && !document.querySelector('dialog[open]')) setDrawer(null);
  });
  narrow.addEventListener('change', () => {
    setDrawer(null);
    $('toggle-inspector').setAttribute('aria-expanded', String(narrow.matches ? false : state.inspectorOpen));
  });
  if (narrow.matches) $('toggle-inspector').setAttribute('aria-expanded', 'false');
  const t = $('transcript');
  t.addEventListener('scroll', () => onTranscriptScroll(t));
  // The tray, notices and composer change the transcript's height.
  new ResizeObserver(() => followLatest()).observe(t);
  $('jump').addEventListener('click', () => {
    state.follow = true;
    $('jump').hidden = true;
    followLatest();
    t.focus({ preventScroll: true });
  });
  $('reconnect').addEventListener('click', () => panel.socket && panel.socket.retryNow());
  $('signin-open').addEventListener('click', () => showSignIn());
}

// ---------------------------------------------------------------------------
// Startup
// ---------------------------------------------------------------------------

/** What the cockpit modules draw after the rest of the page. */
function renderCockpit() {
  renderModeControl();
  renderTokens();
  renderComposerMode();
  renderStatusBar();
  refreshPalette();
}

async function boot() {
  setDraw(() => {
    renderAll();
    renderCockpit();
  });
  wireTheme();
  panel.approvals = new Approvals({
    send,
    api,
    onChange: () => render(),
    onSelect: (id) => select(id),
    toast,
    describe: (id) => state.sessions.get(id),
  });
  panel.headlessView = new HeadlessView($('headless-view'), { onPolicy: setPolicy, onSelect: (id) => select(id) });
  buildHeader();
  wireComposer();
  wireTabs();
  wireLayout();
  wireCreate();
  wireConfigurations();
  wireSkills(() => render());
  wireModeControl();
  wireComposerMode();
  wireStatusBar();
  wirePalette();
  wireSignIn(connect);
  takeTokenFromUrl();
  const m = /^#session=([A-Za-z0-9_-]{1,128})$/.exec(location.hash);
  if (m) state.selected = m[1];
  render();
  let delay = 1000;
  for (;;) {
    try {
      const res = await api('GET', '/api/meta');
      if (res.ok && res.body) {
        state.meta = res.body;
        state.conn = 'ok';
        break;
      }
    } catch {
      /* retried below */
    }
    state.conn = 'hub-unreachable';
    render();
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(30000, delay * 2);
  }
  renderHubInfo();
  const caps = Array.isArray(state.meta.capabilities) ? state.meta.capabilities : [];
  $('configs-open').hidden = !caps.includes('configuration-library');
  $('skills-open').hidden = !caps.includes('skill-library');
  wireHealth(caps);
  let probe = null;
  try {
    probe = await api('GET', '/api/sessions');
  } catch {
    probe = null;
  }
  if (probe && probe.status === 401) {
    panel.socket = new PanelSocket({ onMessage, onState: onSocketState, checkAuth });
    panel.socket.setState('rejected');
    return;
  }
  setInterval(refreshDescription, 5000);
  setInterval(() => {
    if (panel.socket && panel.socket.isOpen()) panel.approvals.pollHeld();
  }, 2000);
  if (probe && probe.ok && probe.body && Array.isArray(probe.body.sessions)) {
    for (const d of probe.body.sessions) upsertSession(d);
  }
  connect();
}

boot();
