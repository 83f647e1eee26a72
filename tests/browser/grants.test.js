// Permission grants in the panel: a real Shard client (the hub's own
// `shard-stdio`, JSONL on stdin and stdout) answers a request
// `allow_always`; the Grants pane lists the grant (its tool and its exact
// arguments) and revokes it after a confirmation, and the JSON API agrees.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { startHub, startLiveSession, hubApi, hubBinary, openPanel, tempDir, removeDir, selectSession, shot, waitFor, SOON } from './helpers.js';

const SESSION = 'granted';

/** `simplex-hub shard-stdio --agent <id>`: lines in, parsed lines out. */
function stdioClient(hub, agent) {
  const proc = spawn(hubBinary(), ['shard-stdio', '--data-dir', hub.dataDir, '--agent', agent], { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = [];
  let buffer = '';
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk) => {
    buffer += chunk;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(buffer.slice(0, nl)));
      buffer = buffer.slice(nl + 1);
    }
  });
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  return {
    send(msg) {
      proc.stdin.write(`${JSON.stringify(msg)}\n`);
    },
    /** The first line of `type` not taken yet. */
    async next(type) {
      let found;
      await waitFor(
        () => {
          const i = lines.findIndex((m) => m.type === type);
          if (i < 0) return false;
          [found] = lines.splice(i, 1);
          return true;
        },
        { what: `a ${type} line (stderr: ${stderr})`, timeout: SOON },
      );
      return found;
    },
    async close() {
      proc.stdin.end();
      await new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', r)));
    },
  };
}

describe('panel: permission grants', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;

  before(async () => {
    dataDir = tempDir('grants');
    hub = await startHub({ dataDir: path.join(dataDir, 'data') });
    await startLiveSession(hub, SESSION);
    ({ browser, page } = await openPanel(`${hub.url}/`));
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      await hubApi(hub, 'POST', `/api/sessions/${SESSION}/stop`).catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(dataDir);
  });

  it('lists a grant made by a Shard client and revokes it', async () => {
    // A Shard client answers allow_always.
    const shard = stdioClient(hub, SESSION);
    await shard.next('sync');
    shard.send({ type: 'prompt', id: 'p', message: '/run echo granted-call' });
    const request = await shard.next('permission_request');
    assert.deepEqual(request.options, ['allow', 'allow_always', 'deny']);
    shard.send({ type: 'permission_response', id: 'a', request_id: request.request_id, decision: 'allow_always' });
    const resolved = await shard.next('permission_resolved');
    assert.equal(resolved.decision, 'allow_always');
    await shard.next('turn_end');
    await shard.close();

    await selectSession(page, SESSION);
    await page.locator('#tab-grants').click();
    await page.locator('#inspector-panel button', { hasText: 'Load' }).click();
    const grant = page.locator('#inspector-panel li.grant');
    await grant.waitFor();
    assert.equal(await grant.locator('.grant-tool').innerText(), 'run_command');
    assert.match(await grant.locator('.grant-arguments').innerText(), /echo granted-call/);
    await shot(page, 'grants-pane');

    // Revoked after a confirmation: the list empties, the API agrees.
    await grant.locator('button', { hasText: 'Revoke' }).click();
    await page.locator('#dlg-confirm').waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-body').innerText(), /ask again/);
    await page.locator('#confirm-ok').click();
    await page.locator('#inspector-panel', { hasText: 'No grants.' }).waitFor();
    const listed = await hubApi(hub, 'GET', `/api/sessions/${SESSION}/grants`);
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body.grants, []);
  });
});
