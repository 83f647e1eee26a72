// Display rules the built-in worker never triggers, exercised with a
// scripted worker: a second page at the hub's origin opens the session's
// worker sockets with the session token (read from the generated worker
// configuration) and sends hand-written envelopes. Covers unknown events,
// reasoning, trusted and skipped tool calls, run failures, argument
// previews with truncation markers, the awaiting-identity hold, and the
// 8 s outcome check with its explicit retry. Also the Markdown renderer
// and the tool card with hostile input.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startHub, launchBrowser, watch, tempDir, removeDir, waitFor, scriptedWorker, sessionWorkerConfig, shot, SOON } from './helpers.js';

const WORKER = '11111111-2222-4333-8444-555555555555';

describe('panel: display rules with a scripted worker', { timeout: 180000 }, () => {
  let dataDir;
  let hub;
  let browser;
  let page;
  let fake;
  let seen;
  let config;

  before(async () => {
    dataDir = path.join(tempDir('display'), 'data');
    hub = await startHub({ dataDir });
    config = await sessionWorkerConfig(hub, dataDir, 'fake');
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    await page.goto(`${hub.url}/#session=fake`);
    await page.locator('#session-title', { hasText: 'fake' }).waitFor();
    fake = await scriptedWorker(browser.context, hub.url, config, 'fake', WORKER);
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) await hub.stop();
    if (dataDir) removeDir(path.dirname(dataDir));
  });

  const status = { active: false, stopping: false, storage_failed: true, rejected_payloads: 3, capabilities: ['session-history'], loop: { status: 'failed', phase: 'model', completed_exchanges: 1, error: 'boom', pending_results: [] } };

  it('renders unknown events, reasoning, tool cards and a failed run', async () => {
    await fake.evaluate(() => window.scripted.open());
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await fake.evaluate((st) => {
      const w = window.scripted;
      w.send('ready', st);
      w.send('mystery_event', { note: '<b>not bold</b>', nested: { n: 1 } });
      const run = { run: 'run-1', request: 'req-1' };
      w.send('input_admitted', { operation: 'message' }, run);
      w.send('run_started', {}, run);
      w.send('model_response', { type: 'model_response', role: 'assistant', content: [{ type: 'text', modality: 'text', raw: '## Heading\n\n- **bold** item\n- `code` <i>not italic</i>' }], reasoning: 'thinking <script>alert(3)</script>' }, run);
      const trusted = { id: 'c1', name: 'read_file', arguments: { path: '/etc/hostname' }, type: 'read_only', security: 'trusted' };
      const skipped = { id: 'c2', name: 'write_file', arguments: { path: 'x' }, type: 'serial_write', security: 'default_deny' };
      w.send('tool_calls', [trusted, skipped], run);
      w.send('tool_results', [{ query: trusted, output: { type: 'text', modality: 'text', raw: 'host-1' }, extras: { exit_code: 0 } }, { query: skipped, output: { type: 'text', modality: 'text', raw: '' }, loop_skipped: true }], run);
      w.send('error', { message: 'provider said no', durable: false }, run);
      w.send('run_finished', { status: 'failed', error: 'model unavailable', exchanges: 1, durable: false }, { ...run, skip: 2 });
    }, status);
    const generic = page.locator('.generic', { hasText: 'mystery_event' });
    await generic.waitFor();
    await generic.locator('summary').click();
    assert.match(await generic.locator('pre').innerText(), /"note": "<b>not bold<\/b>"/);
    assert.equal(await page.locator('#transcript b').count(), 0, 'markup in data stays text');
    const response = page.locator('.msg.assistant', { hasText: 'Heading' });
    await response.waitFor();
    assert.equal(await response.locator('h4.md-h', { hasText: 'Heading' }).count(), 1);
    assert.equal(await response.locator('li strong', { hasText: 'bold' }).count(), 1);
    assert.equal(await response.locator('code', { hasText: 'code' }).count(), 1);
    assert.match(await response.innerText(), /<i>not italic<\/i>/);
    const reasoning = response.locator('details.reasoning');
    assert.equal(await reasoning.getAttribute('open'), null, 'reasoning starts collapsed');
    await reasoning.locator('summary').click();
    assert.match(await reasoning.innerText(), /thinking <script>alert\(3\)<\/script>/);
    const trusted = page.locator('.tool', { hasText: 'read_file' });
    assert.match(await trusted.locator('.approval').innerText(), /No approval needed \(security: trusted\)/);
    assert.match(await trusted.innerText(), /host-1/);
    assert.match(await page.locator('.tool', { hasText: 'write_file' }).locator('.approval').innerText(), /Skipped by the loop/);
    assert.match(await page.locator('.err').innerText(), /provider said no/);
    assert.match(await page.locator('.run-end.status-failed').innerText(), /Run failed · 1 exchange\(s\) · NOT saved — model unavailable/);
    // Worker status and hub statistics in the inspector (the sequence gap).
    await page.getByRole('tab', { name: 'Run' }).click();
    await page.locator('#inspector-panel dd.error-text', { hasText: 'yes' }).waitFor(); // storage failed
    await waitFor(async () => /sequence gaps\s*1/.test(await page.locator('#inspector-panel').innerText()), { what: 'the gap count' });
    assert.match(await page.locator('#inspector-panel').innerText(), /rejected payloads\s*3/);
    assert.deepEqual(seen.dialogs, []);
  });

  it('holds decisions while the worker identity is unverified, then shows truncated arguments', async () => {
    // The event connection goes away: identity becomes stale.
    await fake.evaluate(() => window.scripted.close());
    await page.locator('#session-header .badge', { hasText: 'no worker' }).waitFor();
    const big = 'A'.repeat(200000);
    await fake.evaluate(({ big }) => window.scripted.confirm({ id: 'c9', name: 'run_command', arguments: { command: 'echo hi', blob: big }, type: 'serial_write', security: 'require_confirm' }, 'run-2'), { big });
    const prompt = page.locator('.prompt');
    await prompt.waitFor();
    await prompt.locator('.chip', { hasText: 'awaiting-identity' }).waitFor();
    assert.equal(await prompt.locator('button.approve').isDisabled(), true);
    assert.equal(await prompt.locator('button.deny').isDisabled(), true);
    assert.match(await prompt.locator('button.approve').getAttribute('title'), /identity/);
    // The preview marks what was cut, with byte counts.
    assert.match(await prompt.innerText(), /Arguments shortened for display: the original is .* \(\d+ bytes\)/);
    assert.match(await prompt.locator('mark.trunc', { hasText: 'truncated for display' }).innerText(), /truncated for display: .*\(200000 bytes\) in the original/);
    await shot(page, 'approval-identity-hold.png');
    // The worker reconnects and names itself: decisions are enabled.
    await fake.evaluate(async () => {
      await window.scripted.open();
      window.scripted.send('status', { active: true, stopping: false, storage_failed: false, rejected_payloads: 0, capabilities: [], loop: { status: 'running', phase: 'tools' } });
    });
    await prompt.locator('.chip', { hasText: 'awaiting-decision' }).waitFor();
    assert.equal(await prompt.locator('button.approve').isDisabled(), false);
  });

  it('checks the outcome after 8 s without settlement and offers an explicit retry', async () => {
    const prompt = page.locator('.prompt');
    // Lose the decision on its way out: the panel must not resend it.
    await page.evaluate(() => {
      const real = WebSocket.prototype.send;
      window.__sent = [];
      WebSocket.prototype.send = function (data) {
        const msg = JSON.parse(data);
        if (msg.type === 'confirmation' && !window.__letThrough) {
          window.__sent.push(msg);
          return undefined;
        }
        return real.call(this, data);
      };
    });
    await prompt.locator('button.approve').click();
    assert.equal(await prompt.locator('button.approve').isDisabled(), true, 'a submitted decision locks the prompt');
    await prompt.locator('.prompt-status', { hasText: 'Approve sent' }).waitFor();
    await prompt.locator('.prompt-status', { hasText: 'Still open after 8 s' }).waitFor({ timeout: 15000 });
    assert.equal(await page.evaluate(() => window.__sent.length), 1, 'the decision was never resent');
    assert.equal(await prompt.locator('button.deny').innerText(), 'Deny again');
    assert.equal(await prompt.locator('button.deny').isDisabled(), false);
    // An explicit retry, this time delivered.
    await page.evaluate(() => {
      window.__letThrough = true;
    });
    await prompt.locator('input.reason').fill('not today');
    await prompt.locator('button.deny').click();
    await page.locator('#tray').waitFor({ state: 'hidden' });
    const answer = await waitFor(() => fake.evaluate(() => window.scripted.answer), { what: 'the confirmation response' });
    assert.equal(answer.type, 'confirmation_response');
    assert.equal(answer.data.decision, 'denied');
    assert.equal(answer.data.reason, 'not today');
    await fake.evaluate(() => window.scripted.close());
  });

  it('bounds each view’s transcript copy to 8 MiB', async () => {
    const out = await page.evaluate(async () => {
      const { View, VIEW_BYTES } = await import('/views.js');
      const v = new View('budget-probe');
      const filler = 'x'.repeat(100 * 1024);
      for (let i = 1; i <= 120; i++) {
        v.accept({ type: 'event', event: 'model_response', worker_id: 'w', run_id: `r${i}`, request_id: '', sequence: i, hub_sequence: i, data: { content: [{ type: 'text', modality: 'text', raw: filler }] } });
      }
      const afterMany = { bytes: v.bytes, trimmed: v.trimmed, entries: v.entries.length, notice: v.notices.list.map((n) => n.text).join(' ') };
      v.accept({ type: 'event', event: 'model_response', worker_id: 'w', run_id: 'big', request_id: '', sequence: 121, hub_sequence: 121, data: { content: [{ type: 'text', modality: 'text', raw: 'y'.repeat(9 * 1024 * 1024) }] } });
      const last = v.entries[v.entries.length - 1];
      return { limit: VIEW_BYTES, afterMany, bytes: v.bytes, lastOmitted: last.display_omitted === true && last.panel_omitted === true, cursor: v.cursor };
    });
    assert.ok(out.afterMany.bytes <= out.limit, `${out.afterMany.bytes} > ${out.limit}`);
    assert.ok(out.afterMany.trimmed > 0);
    assert.match(out.afterMany.notice, /older events were dropped from this browser/);
    assert.ok(out.bytes <= out.limit);
    assert.ok(out.lastOmitted, 'an entry larger than the budget is kept as an omission record');
    assert.equal(out.cursor, 121);
  });

  it('renders Markdown as DOM nodes without parsing HTML', async () => {
    const out = await page.evaluate(async () => {
      const { markdown } = await import('/markdown.js');
      const el = markdown(
        [
          '# Plan',
          '',
          '1. first <img src=x onerror=alert(4)>',
          '2. second',
          '   - [x] done',
          '   - [ ] todo',
          '',
          '```',
          '<script>alert(5)</script>',
          '```',
          '',
          '```html',
          '<iframe src="javascript:alert(9)"></iframe>',
          '```',
          '',
          '> quoted [link](javascript:alert(6)) [up](JAVASCRIPT:alert(10)) [data](data:text/html,<b>x</b>) [rel](//evil.example/x) <javascript:alert(11)>',
          '',
          '| <b>head</b> | x |',
          '|---|---|',
          '| <script>alert(12)</script> | <img src=y onerror=alert(13)> `<svg onload=alert(14)>` |',
          '',
          '![pic](https://example.com/p.png) <a href="https://example.com">raw anchor</a> [ok](https://example.com/a?b=<c>)',
          '',
          '<details open><summary>html block</summary></details>',
        ].join('\n'),
      );
      document.body.appendChild(el);
      const result = {
        tags: [...el.querySelectorAll('*')].map((n) => n.tagName.toLowerCase()),
        text: el.textContent,
        links: [...el.querySelectorAll('a')].map((a) => [a.getAttribute('href'), a.target, a.rel]),
        attrs: [...el.querySelectorAll('*')].flatMap((n) => [...n.attributes].map((a) => a.name)).filter((n) => n.startsWith('on') || n === 'src' || n === 'srcdoc' || n === 'style'),
      };
      el.remove();
      return result;
    });
    for (const tag of ['img', 'script', 'iframe', 'svg', 'b', 'details', 'summary']) assert.ok(!out.tags.includes(tag), `created <${tag}>: ${out.tags}`);
    for (const tag of ['h3', 'ol', 'ul', 'li', 'pre', 'code', 'blockquote', 'table', 'th', 'td', 'input']) assert.ok(out.tags.includes(tag), `missing ${tag}`);
    assert.deepEqual(out.attrs, [], 'no event handler, source or style attribute');
    assert.deepEqual(out.links, [['https://example.com/a?b=%3Cc%3E', '_blank', 'noopener noreferrer']], 'only the http(s) link is a link');
    for (const literal of ['<img src=x onerror=alert(4)>', '<script>alert(5)</script>', '<iframe src="javascript:alert(9)"></iframe>', 'javascript:alert(6) — not opened', 'JAVASCRIPT:alert(10) — not opened', '//evil.example/x — not opened', '<javascript:alert(11)>', '<b>head</b>', '<script>alert(12)</script>', '<img src=y onerror=alert(13)>', '<svg onload=alert(14)>', '[image: pic] (https://example.com/p.png)', '<a href="https://example.com">raw anchor</a>', '<details open>']) {
      assert.ok(out.text.includes(literal), `missing literal text ${literal}`);
    }
    assert.deepEqual(seen.dialogs, []);
    assert.deepEqual(seen.errors, []);
  });

  it('renders hostile tool calls and output as text', async () => {
    const out = await page.evaluate(async () => {
      const { toolCard } = await import('/toolcard.js');
      const out = '<script>alert(15)</script>\n';
      const err = '<img src=z onerror=alert(16)>\n';
      const raw = `[[<b>field</b>]]: <i>value</i>\n[[exit_code]]: 1\n\nstdout (${new TextEncoder().encode(out).length} bytes):\n${out}\nstderr (${new TextEncoder().encode(err).length} bytes):\n${err}\n<u>rest</u>`;
      const tool = {
        id: 'c-h',
        call: { name: '<b>tool</b>', arguments: { command: 'echo "<img src=w onerror=alert(17)>" $(<svg/onload=alert(18)>)', note: '<script>x</script>' }, type: 'serial_write', security: 'trusted' },
        result: { output: { type: 'text', modality: 'text', raw }, extras: {} },
      };
      const card = toolCard(tool, { runId: 'r', finished: {} }, { approvals: new Map() }, { promptFor: () => null });
      document.body.appendChild(card);
      card.querySelector('.json-details summary')?.click();
      card.querySelector('.tool-raw summary')?.click();
      await new Promise((r) => setTimeout(r, 50));
      const result = {
        tags: [...card.querySelectorAll('*')].map((n) => n.tagName.toLowerCase()),
        text: card.textContent,
        stdout: card.querySelector('.stream-stdout pre')?.textContent,
        stderr: card.querySelector('.stream-stderr pre')?.textContent,
        exit: card.querySelector('.chip.exit')?.textContent,
      };
      card.remove();
      return result;
    });
    for (const tag of ['img', 'script', 'svg', 'b', 'i', 'u']) assert.ok(!out.tags.includes(tag), `created <${tag}>`);
    assert.equal(out.stdout, '<script>alert(15)</script>');
    assert.equal(out.stderr, '<img src=z onerror=alert(16)>');
    assert.equal(out.exit, 'exit 1');
    for (const literal of ['<b>tool</b>', '<b>field</b>', '<i>value</i>', '<u>rest</u>', 'echo "<img src=w onerror=alert(17)>" $(<svg/onload=alert(18)>)', '<script>x</script>']) {
      assert.ok(out.text.includes(literal), `missing literal text ${literal}`);
    }
    assert.deepEqual(seen.dialogs, []);
    assert.deepEqual(seen.errors, []);
  });
});
