// The operator's main path against the real hub and its built-in worker:
// create, start, message, approve a tool call from another session's
// view, hostile output shown as text, stop, reload and replay, the
// inspector, keyboard use and the narrow layout.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  startHub,
  hubApi,
  launchBrowser,
  watch,
  tempDir,
  removeDir,
  createSession,
  selectSession,
  workerAction,
  sendMessage,
  shot,
  waitFor,
  SOON,
} from './helpers.js';

describe('panel: sessions, transcript, approvals', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;

  before(async () => {
    dataDir = tempDir('panel');
    hub = await startHub({ dataDir: path.join(dataDir, 'data') });
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    await page.goto(`${hub.url}/`);
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) await hub.stop();
    if (dataDir) removeDir(dataDir);
  });

  it('validates the session id as it is typed', async () => {
    await page.getByRole('button', { name: 'New session' }).click();
    const input = page.locator('#create-id');
    await input.fill('bad id');
    assert.equal(await page.locator('#create-ok').isDisabled(), true);
    assert.match(await page.locator('#create-id-note').innerText(), /letters, digits/);
    await input.fill('subagent-x');
    assert.equal(await page.locator('#create-ok').isDisabled(), true);
    assert.match(await page.locator('#create-id-note').innerText(), /reserved/);
    await input.fill('ok_id-1');
    assert.equal(await page.locator('#create-ok').isDisabled(), false);
    const providers = await page.locator('#create-provider option').allInnerTexts();
    assert.ok(providers.includes('mock'), `providers: ${providers}`);
    await page.keyboard.press('Escape');
    await page.locator('#dlg-create').waitFor({ state: 'hidden' });
  });

  it('creates two sessions and starts one worker', async () => {
    await createSession(page, 'alpha');
    await createSession(page, 'beta');
    await selectSession(page, 'alpha');
    const deleteButton = page.locator('#session-header .actions button', { hasText: /^Delete$/ });
    assert.equal(await deleteButton.isDisabled(), false, 'delete is allowed while nothing runs');
    const text = await workerAction(page, 'Start');
    assert.match(text, /Starts a new worker process/);
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await page.locator('.session-item[data-session="alpha"] .badge', { hasText: /running · pid \d+/ }).waitFor();
    assert.equal(await deleteButton.isDisabled(), true, 'delete is refused while a worker runs');
    assert.match(await deleteButton.getAttribute('title'), /Cannot delete while/);
  });

  it('sends a message with Enter and shows the reply', async () => {
    await sendMessage(page, 'hello from the browser');
    await page.locator('.msg.assistant', { hasText: 'echo: hello from the browser' }).waitFor();
    await page.locator('.msg.user', { hasText: 'hello from the browser' }).waitFor();
    await page.locator('.run-end.status-completed').first().waitFor();
    assert.equal(await page.locator('#message').inputValue(), '', 'the composer is cleared');
  });

  it('approves a tool call from another session through the tray', async () => {
    await sendMessage(page, '/run echo hi > marker.txt');
    const prompt = page.locator('.prompt');
    await prompt.waitFor();
    // Look at another session: the prompt stays reachable.
    await selectSession(page, 'beta');
    await prompt.waitFor();
    assert.match(await prompt.innerText(), /run_command/);
    assert.match(await prompt.innerText(), /require_confirm/);
    assert.match(await prompt.innerText(), /echo hi > marker\.txt/);
    await page.locator('.session-item[data-session="alpha"] .badge', { hasText: '1 approval' }).waitFor();
    await shot(page, 'approvals-tray.png');
    await prompt.locator('input.reason').fill('looks fine');
    await prompt.locator('button.approve').click();
    await page.locator('#tray').waitFor({ state: 'hidden' });
    await selectSession(page, 'alpha');
    const card = page.locator('.tool', { hasText: 'echo hi > marker.txt' });
    await card.locator('.tool-result').waitFor();
    assert.match(await card.innerText(), /exit 0/);
    assert.match(await card.locator('.approval').innerText(), /Approved/);
    await page.locator('.msg.assistant', { hasText: 'finished after 1 tool result(s)' }).waitFor();
    const marker = path.join(dataDir, 'data', 'sessions', 'alpha', 'marker.txt');
    await waitFor(() => fs.existsSync(marker), { what: 'marker.txt' });
    assert.equal(fs.readFileSync(marker, 'utf8'), 'hi\n');
  });

  it('shows hostile tool output as text', async () => {
    const payload = '<script>alert(1)</script><img src=x onerror=alert(2)>';
    await sendMessage(page, `/run printf '%s' '${payload}'`);
    const prompt = page.locator('.prompt');
    await prompt.waitFor();
    assert.ok((await prompt.innerText()).includes(payload), 'the preview shows the markup as text');
    await prompt.locator('button.approve').click();
    const output = page.locator('.tool-result pre.output', { hasText: payload });
    await output.waitFor();
    assert.equal(await output.innerText(), payload);
    const injected = await page.evaluate(() => ({
      scripts: [...document.querySelectorAll('script')].map((s) => s.getAttribute('src')),
      imgs: document.querySelectorAll('img[src="x"]').length,
    }));
    assert.deepEqual(injected.scripts, ['app.js'], 'no script element was created');
    assert.equal(injected.imgs, 0, 'no element was created from the output');
    assert.deepEqual(seen.dialogs, [], 'no dialog fired');
  });

  it('shows the inspector: status, process, logs and snapshot', async () => {
    await page.getByRole('tab', { name: 'Run' }).click();
    await page.locator('#inspector-panel', { hasText: 'loop status' }).waitFor();
    await page.getByRole('tab', { name: 'Process' }).click();
    await page.locator('#inspector-panel dd', { hasText: 'running' }).first().waitFor();
    await page.getByRole('tab', { name: 'Logs' }).click();
    await page.locator('.log-line', { hasText: 'mock-worker' }).first().waitFor();
    await shot(page, 'inspector-logs.png');
    await page.getByRole('tab', { name: 'Snapshot' }).click();
    await page.locator('#inspector-panel button', { hasText: 'Load' }).click();
    await page.locator('#inspector-panel', { hasText: 'state.json' }).waitFor();
    await page.locator('pre.snapshot', { hasText: 'simplex-mock-worker/1' }).waitFor();
    await page.getByRole('tab', { name: 'Run' }).click();
    await shot(page, 'session-transcript.png');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'session-transcript-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
  });

  it('offers the worker models and sends the chosen one', async () => {
    await page.locator('#model option[value="mock-slow"]').waitFor({ state: 'attached' });
    await page.locator('#model').selectOption('mock-flash');
    await sendMessage(page, 'with a model');
    await page.locator('.msg.assistant', { hasText: 'echo: with a model' }).waitFor();
    assert.equal(await page.locator('#compact').isDisabled(), false, 'the mock worker advertises context-compact');
  });

  it('compacts the context and shows the summary', async () => {
    await page.locator('#compact').click();
    const card = page.locator('.compact');
    await card.waitFor();
    assert.match(await card.innerText(), /Context compacted/);
    assert.match(await card.innerText(), /Summary of \d+ earlier turn/);
  });

  it('shows the session plan the worker sets, as Markdown text', async () => {
    await sendMessage(page, '/plan # Release plan\n1. Ship the **panel**\n   - [x] replay\n   - [ ] <b>not bold</b>');
    await page.locator('.msg.assistant', { hasText: 'plan/replace succeeded' }).waitFor();
    await page.getByRole('tab', { name: 'Plan' }).click();
    const plan = page.locator('#inspector-panel .md');
    await plan.locator('h3', { hasText: 'Release plan' }).waitFor();
    assert.equal(await plan.locator('ol > li strong', { hasText: 'panel' }).count(), 1);
    assert.match(await plan.innerText(), /<b>not bold<\/b>/);
    assert.equal(await plan.locator('b').count(), 0);
    await shot(page, 'plan.png');
    await page.getByRole('tab', { name: 'Run' }).click();
  });

  it('offers “jump to latest” when the reader has scrolled up', async () => {
    const t = page.locator('#transcript');
    await t.evaluate((el) => {
      el.scrollTop = 0;
    });
    await page.waitForTimeout(100);
    // Output caused by another client: the composer's own sends re-follow.
    const sent = await hubApi(hub, 'POST', '/api/sessions/alpha/input', { content: [{ type: 'text', modality: 'text', raw: 'while reading older output' }] });
    assert.equal(sent.status, 202);
    await page.locator('.msg.assistant', { hasText: 'echo: while reading older output' }).waitFor({ state: 'attached' });
    await page.locator('#jump').waitFor({ state: 'visible' });
    assert.equal(await t.evaluate((el) => el.scrollTop), 0, 'the reader keeps their place');
    await page.locator('#jump').click();
    await page.locator('#jump').waitFor({ state: 'hidden' });
    assert.ok(await t.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight < 48), 'at the latest output');
  });

  it('stops the worker after a truthful confirmation', async () => {
    const text = await workerAction(page, 'Stop');
    assert.match(text, /shut down over the protocol/);
    assert.match(text, /SIGTERM/);
    await page.locator('#session-header .badge', { hasText: 'no worker' }).waitFor();
    await page.locator('#session-header .badge', { hasText: /exited/ }).waitFor();
    assert.equal(await page.locator('#send').isDisabled(), true);
    assert.match(await page.locator('#composer-note').innerText(), /No worker is connected/);
    assert.equal(await page.locator('#compact').isDisabled(), true);
    assert.ok(await page.locator('#compact').getAttribute('aria-description'));
  });

  it('restores the transcript by replay after a reload', async () => {
    await page.reload();
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    await page.locator('#session-title', { hasText: 'alpha' }).waitFor();
    await page.locator('.msg.assistant', { hasText: 'echo: hello from the browser' }).waitFor();
    await page.locator('.msg.user', { hasText: 'hello from the browser' }).waitFor();
    await page.locator('.tool', { hasText: 'echo hi > marker.txt' }).locator('.tool-result').waitFor();
    await page.locator('.compact').waitFor();
  });

  it('replaces the transcript on an explicit refresh without duplicates', async () => {
    await page.locator('#session-header .actions button', { hasText: /^Refresh$/ }).click();
    await page.waitForTimeout(500);
    await page.locator('.msg.assistant', { hasText: 'echo: hello from the browser' }).waitFor();
    assert.equal(await page.locator('.msg.assistant', { hasText: 'echo: hello from the browser' }).count(), 1);
    assert.equal(await page.locator('.tool', { hasText: 'echo hi > marker.txt' }).count(), 1);
  });

  it('is usable from the keyboard and closes dialogs with Escape', async () => {
    await page.locator('#session-header .actions button', { hasText: /^Force kill$/ }).isDisabled();
    await page.getByRole('button', { name: 'New session' }).focus();
    await page.keyboard.press('Enter');
    await page.locator('#dlg-create').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate(() => document.activeElement.id), 'create-id');
    await page.keyboard.press('Escape');
    await page.locator('#dlg-create').waitFor({ state: 'hidden' });
    // Tabs move with the arrow keys.
    await page.getByRole('tab', { name: 'Run' }).focus();
    await page.keyboard.press('ArrowRight');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'tab-process');
    await page.keyboard.press('ArrowLeft');
    // A visible focus indicator.
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert.notEqual(outline, 'none');
  });

  it('deletes an idle session after confirmation', async () => {
    await selectSession(page, 'beta');
    await page.locator('#session-header .actions button', { hasText: /^Delete$/ }).click();
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-body').innerText(), /cannot be undone/);
    await page.locator('#confirm-ok').click();
    await page.locator('.session-item[data-session="beta"]').waitFor({ state: 'detached' });
    assert.equal(fs.existsSync(path.join(dataDir, 'data', 'sessions', 'beta')), false);
  });

  it('collapses the side columns on a narrow window', async () => {
    await selectSession(page, 'alpha');
    await page.setViewportSize({ width: 420, height: 800 });
    assert.equal(await page.locator('#sidebar').isVisible(), false);
    assert.equal(await page.locator('#inspector').isVisible(), false);
    await page.locator('#transcript .msg.assistant').first().waitFor();
    await shot(page, 'narrow.png');
    await page.locator('#toggle-sessions').click();
    await page.locator('#sidebar').waitFor({ state: 'visible' });
    await page.waitForTimeout(300); // the drawer slides in
    await shot(page, 'narrow-sessions.png');
    await page.keyboard.press('Escape');
    await page.locator('#sidebar').waitFor({ state: 'hidden' });
    await page.setViewportSize({ width: 1280, height: 800 });
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.dialogs, []);
  });
});
