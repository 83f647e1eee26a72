// The operator's cockpit against the real hub and its built-in worker:
// the command palette (keyboard only, only available actions), the
// composer's command mode and the Send/Cancel slot, the per-session
// confirmation mode (sent with every input, approved and denied by the
// worker itself, remembered across a reload, cleared for a new worker),
// token figures, the theme toggle, the status bar's latency and technical
// details. A scripted worker covers what the built-in one never reports:
// a stated context size for the request-size meter, and hostile values in
// the places these modules show.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startHub, hubApi, launchBrowser, watch, tempDir, removeDir, createSession, selectSession, workerAction, sendMessage, scriptedWorker, sessionWorkerConfig, shot, shots, waitFor, ROOT, SOON } from './helpers.js';

/** Frames the panel page sent on its socket, parsed. */
function recordFrames(page) {
  const frames = { sent: [], received: [] };
  page.on('websocket', (ws) => {
    if (!ws.url().endsWith('/panel/ws')) return;
    ws.on('framesent', (f) => {
      try {
        frames.sent.push(JSON.parse(f.payload));
      } catch {
        /* not JSON */
      }
    });
    ws.on('framereceived', (f) => {
      try {
        frames.received.push(JSON.parse(f.payload));
      } catch {
        /* not JSON */
      }
    });
  });
  return frames;
}

const activeId = (page) => page.evaluate(() => document.activeElement && document.activeElement.id);
const paletteLabels = (page) => page.locator('#palette-list .palette-label').allInnerTexts();

async function openPalette(page) {
  await page.keyboard.press('Control+K');
  await page.locator('#dlg-palette').waitFor({ state: 'visible' });
  assert.equal(await activeId(page), 'palette-input', 'the palette takes the focus');
}

async function paletteRun(page, query) {
  await openPalette(page);
  await page.keyboard.type(query);
  await page.keyboard.press('Enter');
  await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
}

describe('panel: the cockpit with the built-in worker', { timeout: 240000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;
  let frames;

  before(async () => {
    dataDir = tempDir('cockpit');
    hub = await startHub({ dataDir: path.join(dataDir, 'data') });
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    frames = recordFrames(page);
    await page.goto(`${hub.url}/`);
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    await createSession(page, 'beta');
    await createSession(page, 'alpha');
    await workerAction(page, 'Start');
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await waitFor(async () => !(await page.locator('#send').isDisabled()), { what: 'the composer to accept input' });
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      for (const s of ['alpha', 'beta']) await hubApi(hub, 'POST', `/api/sessions/${s}/stop`).catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(dataDir);
  });

  it('filters by subsequence and offers only what is available', async () => {
    const filter = await page.evaluate(async () => {
      const { matches } = await import('/palette.js');
      return [matches('Restart the worker of beta', 'rwb'), matches('Restart the worker of beta', 'btw'), matches('Switch to beta', 'SWB'), matches('anything', '')];
    });
    assert.deepEqual(filter, [true, false, true, true]);
    await page.locator('#message').focus();
    await openPalette(page);
    let labels = await paletteLabels(page);
    // alpha runs and is idle: no Start, no Cancel; its controls and signals are offered.
    for (const l of ['Switch to beta', 'Stop the worker of alpha…', 'Restart the worker of alpha…', 'Force-kill the worker of alpha…', 'Ask the worker for its status', 'Continue run', 'Compact context', 'Open the Logs pane of the inspector', 'Confirmation mode: Approve all…', 'Ping the hub (socket latency)', 'Show technical details']) {
      assert.ok(labels.includes(l), `offered: ${l} (got ${labels.join(' | ')})`);
    }
    for (const l of ['Start the worker of alpha…', 'Cancel the active run', 'Delete session alpha…', 'Switch to alpha', 'Confirmation mode: Confirm']) {
      assert.ok(!labels.includes(l), `not offered: ${l}`);
    }
    await shot(page, 'cockpit-palette.png');
    // Arrow keys move the active entry (aria-selected and aria-activedescendant follow).
    const selectedText = () => page.locator('#palette-list [aria-selected="true"] .palette-label').innerText();
    const first = await selectedText();
    await page.keyboard.press('ArrowDown');
    const second = await selectedText();
    assert.notEqual(second, first);
    assert.equal(await page.locator('#palette-input').getAttribute('aria-activedescendant'), 'pal-1');
    await page.keyboard.press('ArrowUp');
    assert.equal(await selectedText(), first);
    await page.keyboard.press('ArrowUp'); // wraps to the last entry
    assert.equal(await selectedText(), labels[labels.length - 1]);
    // Typing narrows; nothing matching says so.
    await page.keyboard.type('zzqx');
    await page.locator('#palette-empty').waitFor();
    assert.equal(await page.locator('#palette-list li').count(), 0);
    // Escape closes and gives the focus back.
    await page.keyboard.press('Escape');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.equal(await activeId(page), 'message');
    // Switching sessions from the keyboard; focus returns to the box.
    await paletteRun(page, 'swbeta');
    await page.locator('#session-title', { hasText: 'beta' }).waitFor();
    assert.equal(await activeId(page), 'message');
    await openPalette(page);
    labels = await paletteLabels(page);
    assert.ok(labels.includes('Start the worker of beta…'), 'beta has no worker: Start');
    assert.ok(labels.includes('Delete session beta…'), 'an idle session can be deleted');
    for (const l of ['Stop the worker of beta…', 'Ask the worker for its status', 'Continue run', 'Compact context']) assert.ok(!labels.includes(l), `not offered without a worker: ${l}`);
    // Ctrl+K again closes it.
    await page.keyboard.press('Control+K');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.equal(await activeId(page), 'message');
    // An action with a dialog: the palette closes first, the dialog asks.
    await paletteRun(page, 'start beta');
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-title').innerText(), /Start the worker for beta/);
    await page.keyboard.press('Escape');
    await page.locator('#dlg-confirm').waitFor({ state: 'hidden' });
    assert.equal(await page.locator('#session-header .badge', { hasText: 'no worker' }).count(), 1, 'cancelled: nothing started');
    // The button opens it too.
    await page.locator('#palette-open').click();
    await page.locator('#dlg-palette').waitFor({ state: 'visible' });
    await page.keyboard.type('switch alpha');
    await page.keyboard.press('Enter');
    await page.locator('#session-title', { hasText: 'alpha' }).waitFor();
    assert.equal(await activeId(page), 'palette-open', 'focus back on the button that opened it');
  });

  it('opens again at once after Escape, before the closed dialog has told the page', async () => {
    // Escape closes the dialog at once; its close event comes a task later.
    // A Ctrl+K in between opened nothing (the CI saw it: the palette stayed
    // hidden right after an Escape).
    await page.locator('#message').focus();
    await openPalette(page);
    const state = await page.evaluate(async () => {
      const dlg = document.getElementById('dlg-palette');
      const closeEvent = new Promise((resolve) => dlg.addEventListener('close', resolve, { once: true }));
      dlg.close();
      document.dispatchEvent(new KeyboardEvent('keydown', { key: 'k', ctrlKey: true, bubbles: true, cancelable: true }));
      const reopened = dlg.open;
      await closeEvent; // the page's own close handler has run before this one
      return { reopened, stillOpen: dlg.open, focus: document.activeElement && document.activeElement.id };
    });
    assert.deepEqual(state, { reopened: true, stillOpen: true, focus: 'palette-input' });
    await page.keyboard.press('Escape');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    await waitFor(async () => (await activeId(page)) === 'message', { what: 'the focus back in the message box' });
  });

  it('turns Send into Cancel run while a run is active, and offers Cancel in the palette', async () => {
    await sendMessage(page, '/sleep 20000');
    await page.locator('.run-end.running').waitFor();
    await page.locator('#cancel-run').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#send').isVisible(), false, 'Send gives its slot to Cancel run');
    const order = await page.evaluate(() => [...document.querySelector('.composer-row').children].filter((b) => !b.hidden).map((b) => b.id)[0]);
    assert.equal(order, 'cancel-run', 'Cancel run is first in the row');
    assert.match(await page.locator('#composer-hint').innerText(), /Enter queues/);
    await openPalette(page);
    assert.ok((await paletteLabels(page)).includes('Cancel the active run'));
    await page.keyboard.type('cancel active');
    await page.keyboard.press('Enter');
    await page.locator('.run-end.status-cancelled').waitFor();
    await page.locator('#send').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#cancel-run').isVisible(), false);
    const cancel = frames.sent.find((f) => f.type === 'signal' && f.operation === 'cancel');
    assert.ok(cancel && cancel.session === 'alpha' && typeof cancel.run_id === 'string', 'a cancel signal with the run id');
  });

  it('keeps the open palette in step: Cmd+K, an action that ends leaves the list', async () => {
    // Cmd+K (a Mac's shortcut) opens and closes it as Ctrl+K does.
    await page.locator('#message').focus();
    await page.keyboard.press('Meta+K');
    await page.locator('#dlg-palette').waitFor({ state: 'visible' });
    assert.equal(await activeId(page), 'palette-input');
    await page.keyboard.press('Meta+K');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.equal(await activeId(page), 'message');
    // A short run: Cancel is offered while it lasts and leaves the open
    // palette when the run ends, without closing it or moving the
    // highlighted entry.
    await sendMessage(page, '/sleep 3000');
    await page.locator('.run-end.running').waitFor();
    await openPalette(page);
    await page.keyboard.type('ping hub');
    assert.deepEqual(await paletteLabels(page), ['Ping the hub (socket latency)']);
    await page.keyboard.press('Control+A');
    await page.keyboard.press('Backspace');
    assert.ok((await paletteLabels(page)).includes('Cancel the active run'), 'offered during the run');
    const selected = () => page.locator('#palette-list [aria-selected="true"] .palette-label').innerText();
    await page.keyboard.press('ArrowDown');
    const chosen = await selected();
    assert.notEqual(chosen, 'Cancel the active run');
    await page.locator('.run-end.running').waitFor({ state: 'detached', timeout: 15000 });
    await waitFor(async () => !(await paletteLabels(page)).includes('Cancel the active run'), { what: 'Cancel to leave the open palette' });
    assert.equal(await page.locator('#dlg-palette').isVisible(), true, 'still open');
    assert.equal(await selected(), chosen, 'the highlighted entry is kept');
    assert.equal(await activeId(page), 'palette-input');
    await page.keyboard.press('Escape');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.equal(await activeId(page), 'message');
  });

  it('runs composer commands from the keyboard without sending them as text', async () => {
    const box = page.locator('#message');
    await box.fill('my unfinished draft');
    await box.focus();
    await page.keyboard.press('Alt+Enter');
    await page.locator('#composer-mode', { hasText: 'Command mode' }).waitFor();
    assert.equal(await box.inputValue(), '', 'the draft is put aside');
    assert.equal(await activeId(page), 'message');
    await page.keyboard.type('co');
    const items = page.locator('#command-list .command-name');
    assert.deepEqual(await items.allInnerTexts(), ['Continue run', 'Compact context']);
    assert.equal(await page.locator('#command-list [aria-selected="true"] .command-name').innerText(), 'Continue run');
    await page.keyboard.press('ArrowDown');
    assert.equal(await page.locator('#command-list [aria-selected="true"] .command-name').innerText(), 'Compact context');
    assert.equal(await box.getAttribute('aria-activedescendant'), 'cmd-compact');
    await page.keyboard.press('ArrowUp');
    await page.keyboard.press('Tab');
    assert.equal(await box.inputValue(), 'Continue run', 'Tab completes the chosen name');
    assert.equal(await activeId(page), 'message', 'Tab completed instead of moving the focus');
    await shots(page, 'cockpit-command-mode', page.locator('#message'));
    const before = frames.sent.filter((f) => f.type === 'input').length;
    await page.keyboard.press('Enter');
    await page.locator('.msg.assistant', { hasText: 'continued' }).waitFor();
    const inputs = frames.sent.filter((f) => f.type === 'input').slice(before);
    assert.equal(inputs.length, 1);
    assert.equal(inputs[0].operation, 'continue');
    assert.equal(inputs[0].content, undefined, 'a command is not message content');
    assert.equal(await page.locator('.msg.user', { hasText: 'Continue run' }).count(), 0);
    // An unknown command says so and sends nothing.
    await page.keyboard.type('xyz');
    await page.keyboard.press('Enter');
    await page.locator('#command-list .command-note', { hasText: 'No command starts with “xyz”' }).waitFor();
    assert.equal(frames.sent.filter((f) => f.type === 'input').length, before + 1);
    // Refresh conversation: a replacing subscription, no duplicated reply.
    await box.fill('');
    await page.keyboard.type('ref');
    await page.keyboard.press('Tab');
    assert.equal(await box.inputValue(), 'Refresh conversation');
    const subs = frames.sent.filter((f) => f.type === 'subscribe' && f.replace).length;
    await page.keyboard.press('Enter');
    await waitFor(() => frames.sent.filter((f) => f.type === 'subscribe' && f.replace).length === subs + 1, { what: 'a replacing subscribe' });
    // The replay's last frame has arrived and been drawn (two frames later).
    const replacing = frames.sent.filter((f) => f.type === 'subscribe' && f.replace).pop();
    await waitFor(() => frames.received.some((f) => f.type === 'subscribed' && f.request_id === replacing.request_id && f.replay_more !== true), { what: 'the replay’s last page' });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await page.locator('.msg.assistant', { hasText: 'continued' }).waitFor();
    assert.equal(await page.locator('.msg.assistant', { hasText: 'continued' }).count(), 1);
    // Escape goes back to message mode with the draft; Alt+Enter toggles too.
    await page.keyboard.press('Escape');
    await page.locator('#composer-mode', { hasText: 'Message mode' }).waitFor();
    assert.equal(await box.inputValue(), 'my unfinished draft');
    await page.keyboard.press('Alt+Enter');
    await page.locator('#composer-mode', { hasText: 'Command mode' }).waitFor();
    await page.keyboard.press('Alt+Enter');
    await page.locator('#composer-mode', { hasText: 'Message mode' }).waitFor();
    assert.equal(await box.inputValue(), 'my unfinished draft');
    await box.fill('');
  });

  it('sends the confirmation mode with each input; Approve all asks first', async () => {
    const select = page.locator('#confirm-mode');
    assert.equal(await select.inputValue(), 'ask');
    assert.deepEqual(await select.locator('option').allInnerTexts(), ['Confirm', 'Approve all', 'Deny all']);
    // Every input so far carried mode ask.
    const inputs = frames.sent.filter((f) => f.type === 'input');
    assert.ok(inputs.length >= 2);
    for (const f of inputs) assert.deepEqual(f.options && f.options.confirmation, { mode: 'ask' });
    // Approve all needs an explicit confirmation; cancelling keeps Confirm.
    await select.selectOption('approve');
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-title').innerText(), /Approve every tool call of alpha automatically/);
    assert.equal(await page.locator('#confirm-ok').getAttribute('class'), 'danger');
    await page.locator('#confirm-cancel').click();
    await page.locator('#dlg-confirm').waitFor({ state: 'hidden' });
    await waitFor(async () => (await select.inputValue()) === 'ask', { what: 'the mode back to Confirm' });
    // From the keyboard: the palette offers Approve all, the dialog asks
    // with the focus on Cancel, and Approve all needs a deliberate move.
    await page.locator('#message').focus();
    await paletteRun(page, 'mode approve all');
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-title').innerText(), /Approve every tool call of alpha automatically/);
    assert.equal(await activeId(page), 'confirm-cancel', 'the safe choice has the focus');
    await page.keyboard.press('Enter');
    await page.locator('#dlg-confirm').waitFor({ state: 'hidden' });
    assert.equal(await select.inputValue(), 'ask', 'Enter on Cancel keeps Confirm');
    await paletteRun(page, 'mode approve all');
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    await page.keyboard.press('Tab');
    if ((await activeId(page)) !== 'confirm-ok') await page.keyboard.press('Shift+Tab');
    assert.equal(await activeId(page), 'confirm-ok');
    await page.keyboard.press('Enter');
    await page.locator('#dlg-confirm').waitFor({ state: 'hidden' });
    await waitFor(async () => /mode-approve/.test(await select.getAttribute('class')), { what: 'the danger style' });
    assert.equal(await activeId(page), 'message', 'focus back where the palette was opened');
    const colors = await select.evaluate((el) => [getComputedStyle(el).color, getComputedStyle(document.documentElement).getPropertyValue('--bad').trim()]);
    assert.equal(colors[0], 'rgb(180, 35, 24)', `Approve all is drawn in the danger colour (${colors})`);
    await shots(page, 'cockpit-approve-all', page.locator('#confirm-mode'));
    // The worker approves by itself: no prompt, the command runs.
    const sentBefore = frames.sent.length;
    await sendMessage(page, '/run echo approved > approved.txt');
    const card = page.locator('.tool', { hasText: 'echo approved > approved.txt' });
    await card.locator('.tool-result').waitFor();
    assert.match(await card.innerText(), /exit 0/);
    assert.equal(await page.locator('#tray').isVisible(), false, 'no approval prompt');
    const file = path.join(dataDir, 'data', 'sessions', 'alpha', 'approved.txt');
    await waitFor(() => fs.existsSync(file), { what: 'approved.txt' });
    const sent = frames.sent.slice(sentBefore).find((f) => f.type === 'input');
    assert.deepEqual(sent.options.confirmation, { mode: 'approve' });
    // Deny all: no dialog, the worker denies by itself.
    await select.selectOption('deny');
    await waitFor(async () => /mode-deny/.test(await select.getAttribute('class')), { what: 'the deny style' });
    assert.equal(await page.locator('#dlg-confirm').isVisible(), false);
    await sendMessage(page, '/run echo no > denied.txt');
    const denied = page.locator('.tool', { hasText: 'echo no > denied.txt' });
    await denied.locator('.tool-result').waitFor();
    assert.match(await denied.innerText(), /denied/i);
    assert.equal(fs.existsSync(path.join(dataDir, 'data', 'sessions', 'alpha', 'denied.txt')), false);
    // The other session keeps its own mode.
    await selectSession(page, 'beta');
    assert.equal(await select.inputValue(), 'ask');
    await selectSession(page, 'alpha');
    assert.equal(await select.inputValue(), 'deny');
  });

  it('remembers the mode across a reload and clears it when another worker starts', async () => {
    await page.reload();
    await page.locator('#session-title', { hasText: 'alpha' }).waitFor();
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    assert.equal(await page.locator('#confirm-mode').inputValue(), 'deny');
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('simplex-hub:confirm-mode')));
    const worker = (await hubApi(hub, 'GET', '/api/sessions/alpha')).body.session.identity.worker_id;
    assert.deepEqual(stored, { alpha: { mode: 'deny', worker } });
    await workerAction(page, 'Restart');
    await waitFor(async () => {
      const id = (await hubApi(hub, 'GET', '/api/sessions/alpha')).body.session.identity;
      return id.state === 'live' && id.worker_id !== worker;
    }, { what: 'a new live worker' });
    await page.locator('#view-notices .notice', { hasText: 'back to Confirm' }).waitFor();
    assert.equal(await page.locator('#confirm-mode').inputValue(), 'ask');
    assert.equal(await page.evaluate(() => localStorage.getItem('simplex-hub:confirm-mode')), null);
    // Ask mode again: the prompt appears in the tray.
    await waitFor(async () => !(await page.locator('#send').isDisabled()), { what: 'the composer to accept input' });
    await sendMessage(page, '/run echo asked');
    const prompt = page.locator('.prompt', { hasText: 'echo asked' });
    await prompt.waitFor();
    await prompt.locator('button.deny').click();
    await page.locator('#tray').waitFor({ state: 'hidden' });
  });

  it('shows the latest request’s token figures, with no meter when no context size is known', async () => {
    await sendMessage(page, 'count my tokens please');
    await page.locator('.msg.assistant', { hasText: 'echo: count my tokens please' }).waitFor();
    const events = (await hubApi(hub, 'GET', '/api/sessions/alpha/events')).body.events;
    const cost = events.filter((e) => e.event === 'model_response').pop().data.cost;
    const box = page.locator('#token-usage');
    await waitFor(async () => (await box.innerText()).includes(`prompt ${cost.prompt}`), { what: 'the prompt figure' });
    assert.match(await box.innerText(), new RegExp(`generated ${cost.generated}`));
    assert.match(await box.innerText(), /cache hit 0 \(0% of prompt\)/);
    assert.equal(await page.locator('#token-meter').count(), 0, 'the mock worker states no context size: no meter');
    const units = await page.evaluate(async () => {
      const { fmtTokens, parseCost } = await import('/tokens.js');
      return [fmtTokens(950), fmtTokens(1234), fmtTokens(128000), fmtTokens(1500000), fmtTokens(2e9), parseCost({ prompt: -1 }), parseCost({}), parseCost({ prompt: 5 })];
    });
    assert.deepEqual(units, ['950', '1.2K', '128K', '1.5M', '2B', null, null, { prompt: 5, generated: null, cacheHit: null }]);
  });

  it('measures socket latency and toggles technical details', async () => {
    const latency = page.locator('#sb-latency');
    await waitFor(async () => /Socket latency: \d+ ms/.test(await latency.innerText()), { what: 'a latency figure' });
    const pings = frames.sent.filter((f) => f.type === 'ping').length;
    const pongs = frames.received.filter((f) => f.type === 'pong').length;
    await page.locator('#ping-now').click();
    await waitFor(() => frames.received.filter((f) => f.type === 'pong').length > pongs, { what: 'a pong' });
    assert.equal(frames.sent.filter((f) => f.type === 'ping').length, pings + 1);
    await paletteRun(page, 'ping hub');
    await waitFor(() => frames.sent.filter((f) => f.type === 'ping').length === pings + 2, { what: 'the palette ping' });
    // Details: off by default, then on (exact figures, protocol identifiers), kept across a reload.
    assert.equal(await page.locator('#sb-details').isVisible(), false);
    await page.locator('#details-toggle').focus();
    await page.keyboard.press('Space');
    await page.locator('#sb-details').waitFor();
    const text = await page.locator('#sb-details').innerText();
    assert.match(text, /transcript epoch/);
    assert.match(text, /cursor \d+/);
    assert.match(text, /worker [0-9a-f]{8}.* \(live\)/);
    assert.match(await page.locator('#token-usage').innerText(), /prompt \d+ \(\d+\)/, 'exact counts beside the short ones');
    await shots(page, 'cockpit-status-bar', page.locator('#statusbar'));
    await page.reload();
    await page.locator('#sb-details').waitFor();
    assert.equal(await page.locator('#details-toggle').isChecked(), true);
    await paletteRun(page, 'hide technical');
    await page.locator('#sb-details').waitFor({ state: 'hidden' });
  });

  it('switches the theme light, dark and system, and keeps the choice', async () => {
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const button = page.locator('#theme-toggle');
    await page.emulateMedia({ colorScheme: 'dark' });
    assert.equal(await button.innerText(), 'Theme: System');
    assert.equal(await bg(), 'rgb(16, 20, 25)', 'system follows the dark preference');
    await button.click();
    assert.equal(await button.innerText(), 'Theme: Light');
    assert.equal(await bg(), 'rgb(246, 247, 249)', 'light despite the dark preference');
    await button.click();
    assert.equal(await button.innerText(), 'Theme: Dark');
    await page.emulateMedia({ colorScheme: 'light' });
    assert.equal(await bg(), 'rgb(16, 20, 25)', 'dark despite the light preference');
    await page.reload();
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    assert.equal(await page.locator('#theme-toggle').innerText(), 'Theme: Dark');
    assert.equal(await bg(), 'rgb(16, 20, 25)');
    assert.equal(await page.evaluate(() => getComputedStyle(document.documentElement).colorScheme), 'dark');
    await page.locator('#message').focus();
    await openPalette(page);
    await shot(page, 'cockpit-palette-dark.png');
    await page.keyboard.type('theme system');
    await page.keyboard.press('Enter');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.equal(await page.locator('#theme-toggle').innerText(), 'Theme: System');
    assert.equal(await bg(), 'rgb(246, 247, 249)');
    assert.equal(await page.evaluate(() => localStorage.getItem('simplex-hub:theme')), null);
  });

  it('works on a narrow window', async () => {
    await page.setViewportSize({ width: 420, height: 800 });
    await page.locator('#message').focus();
    await openPalette(page);
    assert.ok((await paletteLabels(page)).includes('Show the session list'));
    await shot(page, 'cockpit-palette-narrow.png');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'cockpit-palette-narrow-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.keyboard.type('session list');
    await page.keyboard.press('Enter');
    await page.locator('#sidebar.open').waitFor();
    await page.keyboard.press('Escape');
    await page.locator('#sidebar.open').waitFor({ state: 'detached' });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.locator('#confirm-mode').selectOption('deny');
    await shot(page, 'cockpit-narrow-dark.png');
    await page.locator('#confirm-mode').selectOption('ask');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1280, height: 800 });
    assert.deepEqual(seen.dialogs, []);
    assert.deepEqual(seen.errors, []);
  });
});

const WORKER = '99999999-2222-4333-8444-555555555555';

describe('panel: cockpit figures from a scripted worker', { timeout: 120000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let fake;
  let seen;

  before(async () => {
    dataDir = path.join(tempDir('cockpit-fake'), 'data');
    hub = await startHub({ dataDir });
    const config = await sessionWorkerConfig(hub, dataDir, 'meter');
    browser = await launchBrowser({ colorScheme: 'dark' });
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    await page.goto(`${hub.url}/#session=meter`);
    await page.locator('#session-title', { hasText: 'meter' }).waitFor();
    fake = await scriptedWorker(browser.context, hub.url, config, 'meter', WORKER);
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) await hub.stop();
    if (dataDir) removeDir(path.dirname(dataDir));
  });

  it('draws the request-size meter against a stated context size, with K units', async () => {
    await fake.evaluate(() => window.scripted.open());
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await fake.evaluate(() => {
      const w = window.scripted;
      w.send('ready', { active: false, stopping: false, storage_failed: false, rejected_payloads: 0, capabilities: [] });
      w.send('options', { model: { available: [], current: { model: 'big', context_window: 131072 } }, tools: { available: [], current: {} }, confirmation: { available: [], current: { mode: 'ask' } } });
      const run = { run: 'run-1', request: 'req-1' };
      w.send('input_admitted', { operation: 'message' }, run);
      w.send('run_started', {}, run);
      w.send('model_response', { type: 'model_response', role: 'assistant', content: [{ type: 'text', modality: 'text', raw: 'a big answer' }], cost: { prompt: 98304, generated: 1200, cache_hit: 65536 } }, run);
      w.send('run_finished', { status: 'completed', error: '', exchanges: 1, durable: true }, run);
    });
    const box = page.locator('#token-usage');
    await box.locator('#token-meter').waitFor();
    const text = await box.innerText();
    assert.match(text, /prompt 98\.3K/);
    assert.match(text, /generated 1\.2K/);
    assert.match(text, /cache hit 65\.5K \(67% of prompt\)/);
    assert.match(text, /99\.5K \/ 131K \(76%\)/);
    const meter = await page.locator('#token-meter').evaluate((m) => ({ value: m.value, max: m.max, label: m.getAttribute('aria-label') }));
    assert.deepEqual(meter, { value: 99504, max: 131072, label: 'Latest request size against the model’s context' });
    await shots(page, 'cockpit-tokens', box);
    await page.emulateMedia({ colorScheme: 'dark' });
  });

  it('shows worker-supplied values as text only', async () => {
    const hostile = '<img src=x onerror=alert(7)><script>alert(8)</script>';
    await fake.evaluate((bad) => {
      window.scripted.send('options', { model: { available: [], current: { context_window: bad } }, confirmation: { current: { mode: bad } } });
    }, hostile);
    await page.locator('#details-toggle').check();
    await page.locator('#sb-details code', { hasText: '<img src=x' }).waitFor();
    assert.equal(await page.locator('#token-meter').count(), 0, 'a context size that is not a number draws no meter');
    const injected = await page.evaluate(() => ({ imgs: document.querySelectorAll('img[src="x"]').length, scripts: document.querySelectorAll('script').length }));
    assert.deepEqual(injected, { imgs: 0, scripts: 1 });
    assert.deepEqual(seen.dialogs, []);
    assert.deepEqual(seen.errors, []);
  });
});

describe('panel: no HTML sinks in the panel code', () => {
  it('builds every element from nodes and text', () => {
    const dir = path.join(ROOT, 'static');
    const sink = /\.(innerHTML|outerHTML)\s*[+]?=|insertAdjacentHTML\s*\(|document\.write(ln)?\s*\(|\beval\s*\(|new\s+Function\s*\(|createContextualFragment|\bDOMParser\b|\.srcdoc\b|setAttribute\(\s*['"](style|on[a-z]+|srcdoc)['"]/;
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.js'));
    assert.ok(files.includes('palette.js') && files.includes('tokens.js'), `scanned: ${files}`);
    for (const f of files) {
      const lines = fs.readFileSync(path.join(dir, f), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (/^\s*(\/\/|\*)/.test(line)) return; // comments may name the sinks they avoid
        assert.doesNotMatch(line, sink, `${f}:${i + 1} uses an HTML sink`);
      });
    }
  });
});
