// The configuration library and the skill picker in the panel, against
// the real hub: the Configurations dialog (templates, editor with line
// numbers and highlighting, save, validate, the discard prompt, endpoint
// preview, rename, delete, apply to a stopped session), the launch and
// worker pickers of the new-session form, and a chosen skill expanded
// into the message that is sent. Hostile text stays text.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startHub, hubApi, hubBinary, launchBrowser, watch, tempDir, removeDir, selectSession, workerAction, shot, waitFor, SOON } from './helpers.js';

const HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>';

const MOCK_WORKER = `# the built-in worker ${HOSTILE}
driver_model: mock
providers:
  mock:
    model: mock-text
client:
  endpoint: '{{hub.events_endpoint}}'
security:
  confirmation:
    endpoint: '{{hub.confirm_endpoint}}'
persistence:
  directory: '{{session.directory}}'
`;

function directLaunch() {
  return `{
  // the hub's own built-in worker, through a command launcher
  "launcher": {"kind": "command", "command": [${JSON.stringify(hubBinary())}, "mock-worker", "--config", "{config}", "--session", "{session}", "--threads", "{threads}"]},
  "worker": {"threads": 1, "stopTimeoutMs": 2000}
}
`;
}

async function setEditor(page, text) {
  const area = page.locator('#cfg-editor textarea');
  await area.fill(text);
}

describe('panel: configuration library and skills', { timeout: 240000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let seen;

  before(async () => {
    dataDir = tempDir('library');
    const data = path.join(dataDir, 'data');
    fs.mkdirSync(path.join(data, 'skills'), { recursive: true });
    fs.writeFileSync(
      path.join(data, 'skills', 'careful.yaml'),
      `name: careful\ntitle: 'Careful ${HOSTILE}'\ndescription: Reads before it writes.\nkeywords: [review]\ntext: "Be careful. Task: {{input}} (done)"\n`,
    );
    fs.writeFileSync(path.join(data, 'skills', 'plain.yaml'), 'name: plain\ntitle: Plain\ntext: Say plainly what you see.\n');
    fs.writeFileSync(path.join(data, 'skills', 'broken.yaml'), 'name: [\n');
    hub = await startHub({ dataDir: data });
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

  it('lists the seeded files and edits with line numbers and highlighting', async () => {
    await page.getByRole('button', { name: 'Configurations' }).click();
    const dlg = page.locator('#dlg-configs');
    await dlg.waitFor({ state: 'visible' });
    await page.locator('#cfg-list .cfg-item', { hasText: 'local' }).waitFor();
    assert.deepEqual(await page.locator('#cfg-list .cfg-item').allInnerTexts(), ['docker', 'local']);
    await page.locator('#cfg-list .cfg-item', { hasText: 'local' }).click();
    await page.locator('#cfg-state', { hasText: 'saved as local' }).waitFor();
    const text = await page.locator('#cfg-editor textarea').inputValue();
    assert.match(text, /"launcher"/);
    const lines = text.split('\n').length;
    assert.equal(await page.locator('#cfg-editor .code-gutter div').count(), lines);
    assert.ok((await page.locator('#cfg-editor .code-layer .tok-key').count()) > 5, 'keys are highlighted');
    assert.ok((await page.locator('#cfg-editor .code-layer .tok-comment').count()) > 0, 'comments are highlighted');
    // Preview the endpoints of the local launch file.
    await page.locator('#cfg-preview').click();
    await page.locator('#cfg-result code', { hasText: `ws://127.0.0.1:${hub.port}/agent/SESSION_ID/events?token=SESSION_TOKEN` }).waitFor();
    await shot(page, 'configurations.png');
  });

  it('creates a worker file from a template, validates and saves it', async () => {
    await page.locator('#cfg-kind-worker').click();
    await page.locator('#cfg-list .cfg-item', { hasText: 'default' }).waitFor();
    await page.locator('#cfg-new').click();
    // The kind switch alone already says "new file"; the template has
    // arrived only when the status says so.
    await page.locator('#cfg-status', { hasText: 'A new file from the template' }).waitFor();
    await page.locator('#cfg-state', { hasText: 'new file' }).waitFor();
    assert.match(await page.locator('#cfg-editor textarea').inputValue(), /\{\{hub\.events_endpoint\}\}/);
    assert.ok((await page.locator('#cfg-editor .code-layer .tok-ph').count()) > 0, 'placeholders are highlighted');
    await setEditor(page, 'driver_model: nowhere\n');
    await page.locator('#cfg-validate').click();
    await page.locator('#cfg-status.status-error', { hasText: 'driver_model' }).waitFor();
    await setEditor(page, MOCK_WORKER);
    await page.locator('#cfg-validate').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Valid' }).waitFor();
    // The hostile comment is text in the highlighting layer, nothing more.
    assert.equal(await page.locator('#cfg-editor img, #cfg-editor script').count(), 0);
    assert.ok((await page.locator('#cfg-editor .code-layer').innerText()).includes(HOSTILE));
    await page.locator('#cfg-name').fill('bad name');
    assert.equal(await page.locator('#cfg-save').isDisabled(), true);
    await page.locator('#cfg-name').fill('mockw');
    await page.locator('#cfg-save').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Saved mockw' }).waitFor();
    assert.deepEqual(await page.locator('#cfg-list .cfg-item').allInnerTexts(), ['default', 'mockw']);
    const saved = await hubApi(hub, 'GET', '/api/configurations/worker/mockw');
    assert.equal(saved.body.text, MOCK_WORKER);
  });

  it('asks before unsaved edits are discarded', async () => {
    await page.locator('#cfg-editor textarea').press('End');
    await page.locator('#cfg-editor textarea').type('# an unsaved line\n');
    await page.locator('#cfg-state', { hasText: 'unsaved changes' }).waitFor();
    await page.locator('#cfg-list .cfg-item', { hasText: 'default' }).click();
    await page.locator('#dlg-confirm', { hasText: 'Discard unsaved changes?' }).waitFor();
    await page.locator('#confirm-cancel').click();
    assert.match(await page.locator('#cfg-editor textarea').inputValue(), /an unsaved line/);
    await page.locator('#cfg-reload').click();
    await page.locator('#dlg-confirm', { hasText: 'Discard unsaved changes?' }).waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('#cfg-status', { hasText: 'Reloaded mockw' }).waitFor();
    assert.equal(await page.locator('#cfg-editor textarea').inputValue(), MOCK_WORKER);
  });

  it('keeps the editor text when the file changed elsewhere, and offers the Docker template', async () => {
    // The file open in the editor (mockw) is saved by another client.
    const before = await hubApi(hub, 'GET', '/api/configurations/worker/mockw');
    const elsewhere = `${MOCK_WORKER}# saved by another client\n`;
    const put = await hubApi(hub, 'PUT', '/api/configurations/worker/mockw', { text: elsewhere, revision: before.body.revision });
    assert.equal(put.status, 200);
    await page.locator('#cfg-editor textarea').press('End');
    await page.locator('#cfg-editor textarea').type('# my edit\n');
    await page.locator('#cfg-save').click();
    await page.locator('#cfg-status.status-error', { hasText: 'reload' }).waitFor();
    assert.match(await page.locator('#cfg-editor textarea').inputValue(), /# my edit/);
    assert.equal((await hubApi(hub, 'GET', '/api/configurations/worker/mockw')).body.text, elsewhere);
    await page.locator('#cfg-reload').click();
    await page.locator('#dlg-confirm', { hasText: 'Discard unsaved changes?' }).waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('#cfg-status', { hasText: 'Reloaded mockw' }).waitFor();
    assert.equal(await page.locator('#cfg-editor textarea').inputValue(), elsewhere);
    // A launch file from the Docker template.
    await page.locator('#cfg-kind-launch').click();
    await page.locator('#cfg-list .cfg-item', { hasText: 'local' }).waitFor();
    await page.locator('#cfg-source').selectOption('docker');
    await page.locator('#cfg-new').click();
    await page.locator('#cfg-status', { hasText: 'A new file from the template' }).waitFor();
    const docker = await hubApi(hub, 'GET', '/api/configurations/launch/template?source=docker');
    assert.equal(await page.locator('#cfg-editor textarea').inputValue(), docker.body.text);
    assert.match(docker.body.text, /host\.docker\.internal/);
    await page.locator('#cfg-source').selectOption('default');
  });

  it('saves a launch file, renames and deletes files', async () => {
    await page.locator('#cfg-kind-launch').click();
    await page.locator('#cfg-list .cfg-item', { hasText: 'local' }).waitFor();
    // While the template loads the form is held: an edit typed meanwhile
    // would be overwritten by the template (or saved against its base).
    const template = '**/api/configurations/launch/template*';
    let release;
    const held = new Promise((resolve) => {
      release = resolve;
    });
    await page.route(template, async (route) => {
      await held;
      await route.continue();
    });
    await page.locator('#cfg-new').click();
    await page.waitForFunction(() => document.querySelector('#cfg-editor textarea').readOnly);
    assert.equal(await page.locator('#cfg-save').isDisabled(), true);
    assert.equal(await page.locator('#cfg-new').isDisabled(), true);
    release();
    await page.locator('#cfg-status', { hasText: 'A new file from the template' }).waitFor();
    await page.unroute(template);
    assert.equal(await page.locator('#cfg-editor textarea').evaluate((el) => el.readOnly), false);
    await setEditor(page, directLaunch());
    await page.locator('#cfg-name').fill('direct-x');
    await page.locator('#cfg-save').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Saved direct-x' }).waitFor();
    await page.locator('#cfg-name').fill('direct');
    await page.locator('#cfg-rename').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Renamed direct-x to direct' }).waitFor();
    assert.deepEqual(await page.locator('#cfg-list .cfg-item').allInnerTexts(), ['direct', 'docker', 'local']);
    // A copy to delete.
    await page.locator('#cfg-name').fill('spare');
    await page.locator('#cfg-save').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Saved spare' }).waitFor();
    await page.locator('#cfg-delete').click();
    await page.locator('#dlg-confirm', { hasText: 'Delete spare?' }).waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Deleted spare' }).waitFor();
    assert.deepEqual(await page.locator('#cfg-list .cfg-item').allInnerTexts(), ['direct', 'docker', 'local']);
    await page.locator('#cfg-close').click();
    await page.locator('#dlg-configs').waitFor({ state: 'hidden' });
  });

  it('creates a session from the saved pair and applies a pair only while it is stopped', async () => {
    await page.getByRole('button', { name: 'New session' }).click();
    await page.locator('#create-library').waitFor({ state: 'visible' });
    await page.locator('#create-id').fill('lib');
    await page.locator('#create-launch option[value="direct"]').waitFor({ state: 'attached' });
    await page.locator('#create-launch').selectOption('direct');
    assert.equal(await page.locator('#create-provider').isDisabled(), true);
    await page.locator('#create-ok').click();
    await page.locator('#create-error', { hasText: 'both' }).waitFor();
    await page.locator('#create-worker').selectOption('mockw');
    await page.locator('#create-ok').click();
    await page.locator('#session-title', { hasText: 'lib' }).waitFor();
    const created = await hubApi(hub, 'GET', '/api/sessions/lib');
    assert.equal(created.body.session.spec.launchConfig, 'direct');
    assert.equal(created.body.session.spec.workerConfig, 'mockw');
    await workerAction(page, 'Start');
    await waitFor(async () => (await hubApi(hub, 'GET', '/api/sessions/lib')).body.session.connected, { what: 'the library worker to connect' });
    const running = (await hubApi(hub, 'GET', '/api/sessions/lib')).body.session;
    assert.equal(running.process.command, hubBinary(), 'the session ran its own launcher');

    await page.getByRole('button', { name: 'Configurations' }).click();
    await page.locator('#cfg-apply', { hasText: 'Apply to lib' }).waitFor();
    assert.equal(await page.locator('#cfg-apply').isDisabled(), true);
    assert.match(await page.locator('#cfg-apply-note').innerText(), /Stop the worker first/);
    await page.locator('#cfg-close').click();
    await workerAction(page, 'Stop');
    await waitFor(async () => !(await hubApi(hub, 'GET', '/api/sessions/lib')).body.session.connected, { what: 'the worker to stop' });
    await page.getByRole('button', { name: 'Configurations' }).click();
    await waitFor(async () => !(await page.locator('#cfg-apply').isDisabled()), { what: 'apply to be enabled' });
    await page.locator('#cfg-apply-launch').selectOption('local');
    await page.locator('#cfg-apply-worker').selectOption('default');
    await page.locator('#cfg-apply').click();
    await page.locator('#cfg-status.status-ok', { hasText: 'Applied local and default to lib' }).waitFor();
    const applied = await hubApi(hub, 'GET', '/api/sessions/lib');
    assert.equal(applied.body.session.spec.launchConfig, 'local');
    await page.locator('#cfg-close').click();
  });

  it('expands a chosen skill into the message that is sent', async () => {
    await page.getByRole('button', { name: 'New session' }).click();
    await page.locator('#create-id').fill('plainsess');
    await page.locator('#create-ok').click();
    await page.locator('#session-title', { hasText: 'plainsess' }).waitFor();
    await workerAction(page, 'Start');
    await page.locator('#message:not([disabled])').waitFor();
    await waitFor(async () => !(await page.locator('#send').isDisabled()), { what: 'the composer to accept input' });
    await page.getByRole('button', { name: 'Skills' }).click();
    await page.locator('#skill-list .skill-item').first().waitFor();
    assert.equal(await page.locator('#skill-list .skill-item').count(), 2);
    await page.locator('#skill-errors-summary', { hasText: '1 skill file could not be read' }).waitFor();
    // The hostile title is text.
    assert.ok((await page.locator('#skill-list').innerText()).includes(HOSTILE));
    assert.equal(await page.locator('#skill-picker img, #skill-picker script').count(), 0);
    await page.locator('#skill-search').fill('review');
    assert.equal(await page.locator('#skill-list .skill-item').count(), 1);
    await page.locator('#skill-list .skill-item').first().click();
    await page.locator('#skill-chip-text', { hasText: 'Skill: Careful' }).waitFor();
    await shot(page, 'skills.png');
    await page.locator('#message').fill('tidy the notes');
    await page.locator('#message').press('Enter');
    const expanded = 'Be careful. Task: tidy the notes (done)';
    await page.locator('.msg.user', { hasText: expanded }).waitFor();
    await page.locator('.msg.assistant', { hasText: `echo: ${expanded}` }).waitFor();
    assert.equal(await page.locator('#skill-chip').isHidden(), true, 'the skill is used once');
    // Without {{input}}, the typed text follows the skill text; the kept
    // document is used even after the file changes, until a refresh.
    fs.writeFileSync(path.join(hub.dataDir, 'skills', 'plain.yaml'), 'name: plain\ntitle: Plain\ntext: Changed on disk.\n');
    await page.getByRole('button', { name: 'Skills' }).click();
    await page.locator('#skill-search').fill('');
    await page.locator('#skill-list .skill-item', { hasText: 'Plain' }).click();
    await page.locator('#message').fill('');
    await page.locator('#send').click();
    await page.locator('.msg.user', { hasText: 'Changed on disk.' }).waitFor();
    await page.getByRole('button', { name: 'Skills' }).click();
    await page.locator('#skill-list .skill-item', { hasText: 'Plain' }).click();
    await page.locator('#message').fill('and this');
    await page.locator('#send').click();
    await page.locator('.msg.user', { hasText: 'Changed on disk.\n\nand this' }).waitFor();
    fs.writeFileSync(path.join(hub.dataDir, 'skills', 'plain.yaml'), 'name: plain\ntitle: Plain\ntext: Changed again.\n');
    await page.getByRole('button', { name: 'Skills' }).click();
    await page.locator('#skill-list .skill-item', { hasText: 'Plain' }).click();
    await page.locator('#send').click();
    const users = await page.locator('.msg.user').allInnerTexts();
    assert.ok(!users.some((t) => t.includes('Changed again.')), 'the kept document is used until a refresh');
    await page.locator('.msg.user', { hasText: 'Changed on disk.' }).nth(2).waitFor();
    await page.getByRole('button', { name: 'Skills' }).click();
    await page.locator('#skill-refresh').click();
    await page.locator('#skill-list .skill-item', { hasText: 'Plain' }).click();
    await page.locator('#send').click();
    await page.locator('.msg.user', { hasText: 'Changed again.' }).waitFor();
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.dialogs, []);
  });

  it('offers Configurations and Skills in the command palette, from the keyboard', async () => {
    const active = () => page.evaluate(() => document.activeElement && document.activeElement.id);
    const labels = () => page.locator('#palette-list .palette-label').allInnerTexts();
    await page.locator('#message').focus();
    await page.keyboard.press('Control+K');
    await page.locator('#dlg-palette').waitFor({ state: 'visible' });
    const offered = await labels();
    assert.ok(offered.includes('Configurations…') && offered.includes('Skills…'), `offered: ${offered.join(' | ')}`);
    await page.keyboard.type('configurations');
    await page.keyboard.press('Enter');
    const configs = page.locator('#dlg-configs');
    await configs.waitFor({ state: 'visible' });
    await page.locator('#cfg-list .cfg-item', { hasText: 'local' }).waitFor();
    await page.keyboard.press('Escape');
    await configs.waitFor({ state: 'hidden' });
    await page.locator('#message').focus();
    await page.keyboard.press('Control+K');
    await page.locator('#dlg-palette').waitFor({ state: 'visible' });
    await page.keyboard.type('skills');
    await page.keyboard.press('Enter');
    await page.locator('#skill-picker').waitFor({ state: 'visible' });
    assert.equal(await active(), 'skill-search', 'the picker takes the focus');
    await page.keyboard.type('plain');
    await waitFor(async () => (await page.locator('#skill-list .skill-item').count()) === 1, { what: 'the search to narrow the list' });
    await page.keyboard.press('Escape');
    await page.locator('#skill-picker').waitFor({ state: 'hidden' });
    assert.equal(await active(), 'skills-open');
    // A stopped session has no composer: the palette offers no Skills.
    await workerAction(page, 'Stop');
    await page.locator('#session-header .badge', { hasText: 'no worker' }).waitFor();
    await page.locator('#transcript').focus();
    await page.keyboard.press('Control+K');
    await page.locator('#dlg-palette').waitFor({ state: 'visible' });
    const stopped = await labels();
    assert.ok(stopped.includes('Configurations…'), 'the library stays offered');
    assert.equal(stopped.includes('Skills…'), !(await page.locator('#skills-open').isDisabled()) && !(await page.locator('#skills-open').isHidden()), 'Skills only while its button can be used');
    await page.keyboard.press('Escape');
    await page.locator('#dlg-palette').waitFor({ state: 'hidden' });
    assert.deepEqual(seen.errors, []);
  });
});
