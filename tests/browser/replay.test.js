// Replay honesty: with a transcript ring of 12 events the hub forgets the
// start of a conversation; a fresh panel's replay then starts after
// event 1 and the panel says so (a gap notice), and the worker history
// fills in what the ring no longer holds. Also: an input waits as queued
// until the worker admits it.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startHub, hubApi, launchBrowser, watch, tempDir, removeDir, sendMessage, SOON } from './helpers.js';

describe('panel: replay gaps and queued input', { timeout: 120000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;

  before(async () => {
    dataDir = path.join(tempDir('replay'), 'data');
    fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(dataDir, 'hub.config.jsonc'), JSON.stringify({ launcher: { kind: 'built-in' }, limits: { transcriptEvents: 12 } }), { mode: 0o600 });
    hub = await startHub({ dataDir });
    assert.equal((await hubApi(hub, 'POST', '/api/sessions', { session: 'delta' })).status, 201);
    assert.equal((await hubApi(hub, 'POST', '/api/sessions/delta/start', {})).status, 200);
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    await page.goto(`${hub.url}/#session=delta`);
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      await hubApi(hub, 'POST', '/api/sessions/delta/stop').catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(path.dirname(dataDir));
  });

  it('shows an input as queued until the worker admits it', async () => {
    // The run must still be going when the page looks: the running state
    // and the queued chip are transient, so give them seconds on a loaded
    // machine (one stressed run timed out here with a 2.5 s run, which can
    // end before a starved browser draws it).
    await sendMessage(page, '/sleep 8000');
    await page.locator('.run-end.running').waitFor();
    await sendMessage(page, 'waiting in line');
    const queued = page.locator('.pending .msg.queued', { hasText: 'waiting in line' });
    await queued.waitFor();
    // The chip reads "sending…" until the hub acknowledges the input, then
    // "queued…" until the worker admits it: wait for that state, do not
    // sample it once.
    await queued.locator('.chip', { hasText: /queued until the worker admits it/ }).first().waitFor();
    // Once admitted it leaves the queue and runs as its own round.
    await page.locator('.round .msg.assistant', { hasText: 'echo: waiting in line' }).waitFor();
    await queued.waitFor({ state: 'detached' });
  });

  it('reports a replay that starts after the expected event', async () => {
    for (const word of ['one', 'two', 'three']) {
      await sendMessage(page, word);
      await page.locator('.msg.assistant', { hasText: `echo: ${word}` }).waitFor();
    }
    const latest = (await hubApi(hub, 'GET', '/api/sessions/delta/events')).body;
    assert.ok(latest.events[0].hub_sequence > 1, 'the ring has dropped the first events');
    await page.reload();
    const notice = page.locator('#view-notices .notice', { hasText: 'no longer retained by the hub' });
    await notice.waitFor();
    assert.match(await notice.innerText(), new RegExp(`Events 1–${latest.events[0].hub_sequence - 1} `));
    // What the ring forgot comes back from the worker's history.
    await page.locator('.history-restored .msg.assistant', { hasText: 'echo: waiting in line' }).waitFor();
    await page.locator('.round .msg.assistant', { hasText: 'echo: three' }).waitFor();
    assert.deepEqual(seen.errors, []);
  });
});
