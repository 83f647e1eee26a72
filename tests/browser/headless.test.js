// Headless subagents in the panel: the built-in worker of a real parent
// session forks a child (`/fork`). The child is listed with a "headless"
// badge under its parent; selecting it opens a status/security view (no
// transcript, composer or worker controls); its approval prompts say
// whose child it is; the safety policy selector changes what happens to
// new requests only; and the child leaves the list once its parent stops
// it.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startHub, startLiveSession, describeSession, hubApi, openPanel, tempDir, removeDir, shot, waitFor } from './helpers.js';

const PARENT = 'parent';

function text(raw) {
  return { content: [{ type: 'text', modality: 'text', raw }] };
}

describe('panel: headless subagents', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;
  let child;

  /** Has the parent's worker send the child a message. */
  async function tellChild(raw) {
    const res = await hubApi(hub, 'POST', `/api/sessions/${PARENT}/input`, text(`/send ${child} ${raw}`));
    assert.equal(res.status, 202, JSON.stringify(res.body));
  }

  before(async () => {
    dataDir = tempDir('headless');
    hub = await startHub({ dataDir: path.join(dataDir, 'data') });
    await startLiveSession(hub, PARENT);
    assert.equal((await hubApi(hub, 'POST', `/api/sessions/${PARENT}/input`, text('/fork'))).status, 202);
    child = await waitFor(
      async () => {
        const list = (await hubApi(hub, 'GET', '/api/sessions')).body.sessions;
        const c = list.find((s) => s.kind === 'headless' && s.subagent.lifecycle === 'ready' && s.identity.state === 'live');
        return c ? c.session_id : null;
      },
      { what: 'a ready child' },
    );
    ({ browser, page, seen } = await openPanel(`${hub.url}/`));
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) {
      await hubApi(hub, 'POST', `/api/sessions/${PARENT}/stop`).catch(() => {});
      await hub.stop();
    }
    if (dataDir) removeDir(dataDir);
  });

  it('lists the child with a headless badge, right under its parent', async () => {
    const item = page.locator(`.session-item[data-session="${child}"]`);
    await item.waitFor();
    await item.locator('.badge', { hasText: /^headless$/ }).waitFor();
    assert.match(await item.innerText(), new RegExp(`child of ${PARENT}`));
    const order = await page.locator('.session-item').evaluateAll((els) => els.map((e) => e.dataset.session));
    assert.equal(order[order.indexOf(PARENT) + 1], child, `order: ${order}`);
  });

  it('opens a status and security view instead of the transcript', async () => {
    await page.locator(`.session-item[data-session="${child}"]`).click();
    await page.locator('#session-title', { hasText: child }).waitFor();
    const view = page.locator('#headless-view');
    await view.waitFor();
    assert.equal(await page.locator('#composer').isVisible(), false, 'no composer');
    assert.equal(await page.locator('#transcript').isVisible(), false, 'no transcript');
    assert.equal(await page.locator('#session-header .actions').isVisible(), false, 'no worker controls');
    const facts = page.locator('#headless-view .headless-facts');
    await facts.locator('dd', { hasText: /^ready$/ }).waitFor();
    const shown = await facts.innerText();
    for (const want of [PARENT, 'connected', 'idle', 'healthy', /running · pid \d+/]) {
      assert.match(shown, want instanceof RegExp ? want : new RegExp(want), shown);
    }
    assert.equal(await page.locator('#policy-ask').isChecked(), true);
    assert.match(await page.locator('#inspector-panel').innerText(), /headless subagent/);
    // The parent link shows the parent again.
    await facts.getByRole('button', { name: PARENT }).click();
    await page.locator('#session-title', { hasText: PARENT }).waitFor();
    await page.locator('#composer').waitFor();
    await page.locator(`.session-item[data-session="${child}"]`).click();
    await view.waitFor();
    await shot(page, 'headless-subagent.png');
    // Nothing the panel sent was refused as headless_restricted.
    assert.doesNotMatch(await page.locator('#toasts').innerText(), /headless_restricted/);
    assert.deepEqual(seen.errors, []);
  });

  it('labels the child’s prompts and keeps an open one actionable after a policy change', async () => {
    await tellChild('/run echo asked');
    const card = page.locator('#tray-list .prompt');
    await card.waitFor();
    await card.locator('.chip', { hasText: new RegExp(`child subagent-.* of parent ${PARENT}`) }).waitFor();
    await card.locator('.chip', { hasText: 'awaiting-decision' }).waitFor();
    await page.locator(`.session-item[data-session="${child}"] .badge`, { hasText: '1 approval' }).waitFor();
    // Deny from now on: the open prompt stays open for an operator.
    await page.locator('#policy-deny').check();
    await page.locator('.policy-status', { hasText: 'Current policy: deny' }).waitFor();
    assert.equal((await describeSession(hub, child)).subagent.policy, 'deny');
    await page.waitForTimeout(500);
    assert.equal(await card.count(), 1, 'the ask prompt is still open');
    assert.equal(await card.locator('button.approve').isDisabled(), false);
    await card.locator('button.deny').click();
    await card.waitFor({ state: 'detached' });
  });

  it('answers new requests by the policy, without showing a prompt', async () => {
    await page.evaluate(() => {
      window.__prompts = 0;
      new MutationObserver((records) => {
        for (const r of records) for (const n of r.addedNodes) if (n.classList && n.classList.contains('prompt')) window.__prompts += 1;
      }).observe(document.getElementById('tray-list'), { childList: true });
    });
    const before = (await describeSession(hub, child)).last_run_id;
    await tellChild('/run echo denied-by-policy');
    await waitFor(
      async () => {
        const d = await describeSession(hub, child);
        return d.last_run_id !== before && !d.subagent.active_run && d.confirmations.length === 0;
      },
      { what: 'the child run to finish' },
    );
    assert.equal(await page.evaluate(() => window.__prompts), 0, 'no prompt was shown');
  });

  it('asks before switching to approve', async () => {
    await page.locator('#policy-approve').check();
    const dialog = page.locator('#dlg-confirm');
    await dialog.waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-body').innerText(), /approved by the hub at once/);
    await page.locator('#confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    await waitFor(() => page.locator('#policy-deny').isChecked(), { what: 'the selector to show deny again' });
    assert.equal(await page.locator('#policy-approve').isChecked(), false);
    assert.equal((await describeSession(hub, child)).subagent.policy, 'deny');
    await page.locator('#policy-approve').check();
    await dialog.waitFor({ state: 'visible' });
    await page.locator('#confirm-ok').click();
    await page.locator('.policy-status', { hasText: 'Current policy: approve' }).waitFor();
    assert.equal((await describeSession(hub, child)).subagent.policy, 'approve');
  });

  it('drops the child from the list once its parent stops it', async () => {
    const res = await hubApi(hub, 'POST', `/api/sessions/${PARENT}/input`, text(`/stop-child ${child}`));
    assert.equal(res.status, 202);
    await page.locator(`.session-item[data-session="${child}"]`).waitFor({ state: 'detached' });
    await page.locator('#toasts', { hasText: 'stopped and was removed' }).waitFor();
    assert.equal(await page.locator('#headless-view').isVisible(), false);
    await page.reload();
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    await page.locator(`.session-item[data-session="${PARENT}"]`).waitFor();
    assert.equal(await page.locator(`.session-item[data-session="${child}"]`).count(), 0);
    assert.deepEqual(seen.errors, []);
  });
});
