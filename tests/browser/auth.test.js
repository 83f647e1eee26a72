// A hub with a panel token: a wrong token brings up the sign-in prompt,
// the right one connects; `?token=` is accepted once, remembered in the
// `simplex_hub_token` cookie and stripped from the address bar.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startHub, launchBrowser, watch, tempDir, removeDir, shot, SOON } from './helpers.js';

const TOKEN = 'browser-test-token-7f3a';

describe('panel: sign-in', { timeout: 120000 }, () => {
  let dataDir;
  let hub;
  let browser;

  before(async () => {
    dataDir = tempDir('auth');
    hub = await startHub({ dataDir: path.join(dataDir, 'data'), args: ['--panel-token', TOKEN] });
    browser = await launchBrowser();
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) await hub.stop();
    if (dataDir) removeDir(dataDir);
  });

  it('prompts for the token when the given one is wrong', async () => {
    const page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    const seen = watch(page);
    await page.goto(`${hub.url}/?token=wrong-token`);
    const dialog = page.locator('#dlg-token');
    await dialog.waitFor({ state: 'visible' });
    assert.equal(new URL(page.url()).search, '', 'the token is stripped from the URL');
    await page.locator('#conn', { hasText: 'sign-in required' }).waitFor();
    await shot(page, 'sign-in.png');
    // A wrong token typed in is refused in place.
    await page.locator('#token-input').fill('still-wrong');
    await page.locator('#token-ok').click();
    await page.locator('#token-error', { hasText: 'refused' }).waitFor();
    // The right one connects.
    await page.locator('#token-input').fill(TOKEN);
    await page.locator('#token-ok').click();
    await dialog.waitFor({ state: 'hidden' });
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    const cookie = (await browser.context.cookies(hub.url)).find((c) => c.name === 'simplex_hub_token');
    assert.ok(cookie, 'the token cookie is set');
    assert.equal(decodeURIComponent(cookie.value), TOKEN);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(cookie.path, '/');
    assert.deepEqual(seen.errors, []);
    await page.close();
  });

  it('accepts ?token= once and remembers it', async () => {
    await browser.context.clearCookies();
    const page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    await page.goto(`${hub.url}/?token=${TOKEN}#session=none`);
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    assert.equal(new URL(page.url()).search, '', 'the token is stripped from the URL');
    assert.equal(await page.locator('#dlg-token').isVisible(), false);
    // A reload without the query still works: the cookie carries it.
    await page.reload();
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    await page.close();
  });
});
