// The hub dies (SIGKILL) and comes back on the same port and data
// directory: the panel reconnects, notices the new transcript epoch,
// discards its cursor, says so, and reloads the transcript (replay from
// zero plus the adopted worker's history).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startHub, hubApi, launchBrowser, watch, tempDir, removeDir, sendMessage, workerAction, shot, waitFor, SOON } from './helpers.js';

describe('panel: hub restart', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;

  before(async () => {
    dataDir = path.join(tempDir('restart'), 'data');
    hub = await startHub({ dataDir });
    assert.equal((await hubApi(hub, 'POST', '/api/sessions', { session: 'gamma' })).status, 201);
    assert.equal((await hubApi(hub, 'POST', '/api/sessions/gamma/start', {})).status, 200);
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      // Stop the adopted worker through the hub, then the hub.
      await hubApi(hub, 'POST', '/api/sessions/gamma/stop').catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(path.dirname(dataDir));
  });

  it('shows the transcript of a running worker', async () => {
    await page.goto(`${hub.url}/#session=gamma`);
    await page.locator('#session-title', { hasText: 'gamma' }).waitFor();
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await sendMessage(page, 'before the restart');
    await page.locator('.msg.assistant', { hasText: 'echo: before the restart' }).waitFor();
  });

  it('handles the epoch reset after the hub is killed and restarted', async () => {
    const epochBefore = (await hubApi(hub, 'GET', '/api/meta')).body.transcript_epoch;
    const port = hub.port;
    await hub.kill9();
    await page.locator('#conn', { hasText: /disconnected|reconnecting/ }).waitFor();
    hub = await startHub({ dataDir, listen: `127.0.0.1:${port}` });
    const epochAfter = (await hubApi(hub, 'GET', '/api/meta')).body.transcript_epoch;
    assert.notEqual(epochAfter, epochBefore);
    await page.locator('#conn', { hasText: 'connected' }).waitFor({ timeout: 40000 });
    const notice = page.locator('#notices .notice', { hasText: 'The hub restarted' });
    await notice.waitFor();
    await page.locator('#view-notices .notice', { hasText: 'reloaded from the start' }).waitFor();
    // The worker survived the hub, is adopted, reconnects, and its
    // history restores the conversation the new hub never saw.
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor({ timeout: 40000 });
    await page.locator('.history-restored .msg.assistant', { hasText: 'echo: before the restart' }).waitFor({ timeout: 40000 });
    await page.locator('.history-restored .msg.user', { hasText: 'before the restart' }).waitFor();
    await shot(page, 'hub-restarted.png');
  });

  it('keeps working after the restart', async () => {
    // The adopted worker's stdout and stderr were pipes to the killed hub,
    // so it may die at its next log line; restart it to continue.
    // Until the restart takes effect the header still shows the old
    // worker as running and attached, so wait for the new pid (a message
    // sent to the old worker while it stops is lost with it).
    const session = async () => (await hubApi(hub, 'GET', '/api/sessions/gamma')).body.session;
    const oldPid = (await session()).process.pid;
    await workerAction(page, 'Restart');
    const fresh = await waitFor(async () => {
      const s = await session();
      return s.process?.pid !== oldPid && s.process?.state === 'running' && s.connected && s;
    }, { what: 'the restarted worker to connect' });
    await page.locator('#session-header .badge', { hasText: `running · pid ${fresh.process.pid}` }).waitFor();
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await sendMessage(page, 'after the restart');
    await page.locator('.msg.assistant', { hasText: 'echo: after the restart' }).waitFor();
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.dialogs, []);
  });
});
