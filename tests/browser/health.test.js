// The hub health view against a real hub and its built-in worker: the
// Health button opens it (mouse, keyboard, the command palette), it shows the hub's figures
// from GET /api/hub/health and refreshes them while open (a second panel
// appears in its list, a worker's events move its row), and it asks
// nothing once closed.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startHub, startLiveSession, hubApi, openPanel, tempDir, removeDir, selectSession, shot, waitFor } from './helpers.js';

const SESSION = 'busy';

function text(raw) {
  return { content: [{ type: 'text', modality: 'text', raw }] };
}

describe('panel: hub health view', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;
  /** Every health request the page made, with when. */
  const asked = [];

  const samples = async () => Number(await page.locator('#dlg-health').getAttribute('data-samples'));
  const row = () => page.locator(`#health-workers tr[data-session="${SESSION}"]`);
  const events = async () => Number((await row().locator('td.health-events').innerText()).replace(/,/g, ''));

  before(async () => {
    dataDir = tempDir('health');
    hub = await startHub({ dataDir: path.join(dataDir, 'data') });
    await startLiveSession(hub, SESSION);
    ({ browser, page, seen } = await openPanel(`${hub.url}/`));
    page.on('request', (rq) => {
      if (new URL(rq.url()).pathname === '/api/hub/health') asked.push(Date.now());
    });
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      await hubApi(hub, 'POST', `/api/sessions/${SESSION}/stop`).catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(dataDir);
  });

  it('asks nothing until the view is opened', async () => {
    await selectSession(page, SESSION);
    await page.locator('#health-open').waitFor({ state: 'visible' });
    assert.equal(asked.length, 0);
    // The dialog's close event (which clears the timer) follows its hiding.
    await waitFor(async () => (await page.locator('#dlg-health').getAttribute('data-polling')) === 'off', { what: 'polling to stop' });
  });

  it('opens with the hub figures', async () => {
    await page.locator('#health-open').click();
    const dialog = page.locator('#dlg-health');
    await dialog.waitFor({ state: 'visible' });
    await waitFor(async () => (await samples()) >= 1, { what: 'the first reading' });
    assert.equal(await dialog.getAttribute('data-polling'), 'on');
    // The process figures are the hub's own (threads come and go with
    // requests and idle writers, so only roughly the same).
    const api = (await hubApi(hub, 'GET', '/api/hub/health')).body;
    const cards = page.locator('#health-process');
    // The view's own styles apply at this width (cards in a grid).
    assert.equal(await cards.evaluate((el) => getComputedStyle(el).display), 'grid');
    assert.match(await cards.innerText(), /Memory \(RSS\)[\s\S]*(KiB|MiB)/);
    const threads = Number(await cards.locator('.health-card', { hasText: 'Threads' }).locator('.health-figure').innerText());
    assert.ok(threads >= 3 && Math.abs(threads - api.process.threads) <= 8, `${threads} vs ${api.process.threads}`);
    assert.match(await cards.innerText(), new RegExp(`pid ${api.hub.pid}`));
    // This page's own panel socket, with its budget.
    await page.locator('h3', { hasText: 'Panel connections (1)' }).waitFor();
    assert.match(await page.locator('#health-panels').innerText(), /4\.0 MiB/);
    assert.match(await page.locator('#health-shard').innerText(), /No Shard connections/);
    // The session's worker, with its ring's budget.
    assert.match(await row().innerText(), /running[\s\S]*connected[\s\S]*32\.0 MiB/);
  });

  it('refreshes while open: a second panel and a worker\'s events show', async () => {
    const before = await samples();
    const second = await browser.context.newPage();
    await second.goto(`${hub.url}/`);
    await second.locator('#conn', { hasText: 'connected' }).waitFor();
    await page.locator('h3', { hasText: 'Panel connections (2)' }).waitFor();
    assert.ok((await samples()) > before);
    assert.equal(await page.locator('#health-panels tbody tr').count(), 2);

    const eventsBefore = await events();
    const res = await hubApi(hub, 'POST', `/api/sessions/${SESSION}/input`, text('hello health'));
    assert.equal(res.status, 202, JSON.stringify(res.body));
    await waitFor(async () => (await events()) > eventsBefore, { what: 'the event count to move' });
    const rate = Number(await row().locator('td.health-rate').innerText());
    assert.ok(rate > 0, `rate ${rate}`);
    await shot(page, 'health.png');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'health-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
    await second.close();
    await page.locator('h3', { hasText: 'Panel connections (1)' }).waitFor();
  });

  it('closes with Escape and stops asking', async () => {
    await page.keyboard.press('Escape');
    await page.locator('#dlg-health').waitFor({ state: 'hidden' });
    // The dialog's close event (which clears the timer) follows its hiding.
    await waitFor(async () => (await page.locator('#dlg-health').getAttribute('data-polling')) === 'off', { what: 'polling to stop' });
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'health-open');
    const closedAt = Date.now();
    const count = asked.length;
    // The panel's own 5 s description refresh of the selected session
    // marks a window longer than two health intervals.
    const refreshed = page.waitForRequest((rq) => new URL(rq.url()).pathname === `/api/sessions/${SESSION}` && Date.now() > closedAt + 4500, { timeout: 12000 });
    await refreshed;
    assert.equal(asked.length, count, 'the closed view kept asking');
  });

  it('is offered by the command palette', async () => {
    await page.locator('#transcript').focus();
    await page.keyboard.press('Control+K');
    await page.locator('#palette-input').waitFor({ state: 'visible' });
    await page.keyboard.type('hub health');
    await page.locator('#palette-list li', { hasText: 'Hub health…' }).first().waitFor();
    await page.keyboard.press('Enter');
    await page.locator('#dlg-health').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'health-close');
    const before = await samples();
    await waitFor(async () => (await samples()) > before, { what: 'a reading after the palette opened the view' });
    await page.keyboard.press('Escape');
    await page.locator('#dlg-health').waitFor({ state: 'hidden' });
    // The dialog's close event (which clears the timer) follows its hiding.
    await waitFor(async () => (await page.locator('#dlg-health').getAttribute('data-polling')) === 'off', { what: 'polling to stop' });
  });

  it('stops asking while the page is hidden and resumes when it is shown', async () => {
    // Headless Chromium keeps every tab visible, so the page is told it is
    // hidden the way a browser would: document.hidden and a
    // visibilitychange event (only the browser's API is stood in for).
    const setHidden = (hidden) =>
      page.evaluate((h) => {
        Object.defineProperty(document, 'hidden', { configurable: true, get: () => h });
        Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (h ? 'hidden' : 'visible') });
        document.dispatchEvent(new Event('visibilitychange'));
      }, hidden);
    await page.locator('#health-open').click();
    await page.locator('#dlg-health').waitFor({ state: 'visible' });
    const first = await samples();
    await waitFor(async () => (await samples()) > first, { what: 'a reading while visible' });
    await setHidden(true);
    await waitFor(async () => (await page.locator('#dlg-health').getAttribute('data-polling')) === 'off', { what: 'polling to stop while hidden' });
    // Nothing is asked for more than two refresh intervals (a request
    // already on its way when the page was hidden is recorded first).
    const hiddenAt = Date.now();
    await waitFor(() => Date.now() > hiddenAt + 2 * 2000 + 1000, { what: 'two refresh intervals while hidden', timeout: 20000 });
    const late = asked.filter((t) => t > hiddenAt + 500);
    assert.deepEqual(late, [], 'the hidden page kept asking');
    assert.equal(await page.locator('#dlg-health').getAttribute('data-polling'), 'off');
    const before = await samples();
    await setHidden(false);
    await waitFor(async () => (await samples()) > before, { what: 'a reading once the page is shown again' });
    assert.equal(await page.locator('#dlg-health').getAttribute('data-polling'), 'on');
    await page.keyboard.press('Escape');
    await page.locator('#dlg-health').waitFor({ state: 'hidden' });
    await waitFor(async () => (await page.locator('#dlg-health').getAttribute('data-polling')) === 'off', { what: 'polling to stop' });
    await page.evaluate(() => {
      delete document.hidden;
      delete document.visibilityState;
    });
  });

  it('opens from the keyboard and fits a narrow window', async () => {
    await page.setViewportSize({ width: 420, height: 860 });
    await page.locator('#health-open').focus();
    await page.keyboard.press('Enter');
    await page.locator('#dlg-health').waitFor({ state: 'visible' });
    const before = await samples();
    await waitFor(async () => (await samples()) >= before + 2, { what: 'two more readings' });
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'health-close');
    // The dialog stays inside the window; wide tables scroll in their box.
    const box = await page.locator('#dlg-health').boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 420, JSON.stringify(box));
    await shot(page, 'health-narrow.png');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'health-narrow-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.locator('#health-close').click();
    await page.locator('#dlg-health').waitFor({ state: 'hidden' });
    await page.setViewportSize({ width: 1280, height: 800 });
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.dialogs, []);
  });
});
