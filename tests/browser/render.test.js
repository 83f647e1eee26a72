// The renderers against the real hub and its built-in worker: Markdown
// (GFM tables, task lists, fenced code with highlighting, a language label
// and a copy button, http(s) links only), the highlighter's languages, tool
// cards with command, exit status, stdout and stderr, the plain-text window
// of a large answer, and the complete answer read in 32 KiB pages (next,
// previous, copy, identity checks, the explicit unavailability messages),
// also for a response too large for the hub's transcript. Bounded time on
// hostile input, and no HTML sink anywhere in the panel's code.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, startHub, hubApi, launchBrowser, watch, tempDir, removeDir, createSession, workerAction, sendMessage, shots, waitFor, SOON } from './helpers.js';

const MARKDOWN = [
  'Report',
  '',
  '| Name | Size | State |',
  '|:-----|-----:|:-----:|',
  '| alpha | 12 | **ok** |',
  '| beta `b\\|c` | 7 | ~~gone~~ |',
  '',
  '- [x] built',
  '- [ ] tested',
  '  1. nested one',
  '  2. nested two',
  '',
  '```rust',
  'fn main() { let n: u32 = 42; println!("hi {n}"); }',
  '```',
  '',
  '```json',
  '{"key": [1, true, null]}',
  '```',
  '',
  'See [the site](https://example.com/docs?a=1) or <https://example.org/x>, not [this](javascript:alert(1)).',
].join('\n');

describe('panel: Markdown, tool cards and complete answers', { timeout: 240000 }, () => {
  let dir;
  let hub;
  let browser;
  let page;
  let seen;

  before(async () => {
    dir = tempDir('render');
    // A 200 kB transcript ring: a 100 kB answer is kept, a 300 kB one
    // becomes an omission record that still names its answer source.
    const config = path.join(dir, 'hub.jsonc');
    fs.writeFileSync(config, JSON.stringify({ launcher: { kind: 'built-in' }, limits: { transcriptBytes: 200000 } }));
    hub = await startHub({ dataDir: path.join(dir, 'data'), args: ['-c', config] });
    browser = await launchBrowser();
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: hub.url });
    page = await browser.context.newPage();
    page.setDefaultTimeout(SOON);
    seen = watch(page);
    await page.goto(`${hub.url}/`);
    await page.locator('#conn', { hasText: 'connected' }).waitFor();
    await createSession(page, 'md');
    await workerAction(page, 'Start');
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
  });

  after(async () => {
    if (browser) await browser.close();
    if (hub) await hub.stop();
    if (dir) removeDir(dir);
  });

  const clipboard = () => page.evaluate(() => navigator.clipboard.readText());

  it('renders GFM tables, task lists, code blocks and links from a model response', async () => {
    await sendMessage(page, MARKDOWN);
    const reply = page.locator('.msg.assistant', { hasText: 'echo: Report' });
    await reply.waitFor();
    const table = reply.locator('table.md-table');
    assert.deepEqual(await table.locator('th').allInnerTexts(), ['Name', 'Size', 'State']);
    assert.deepEqual(await table.locator('tbody tr').first().locator('td').allInnerTexts(), ['alpha', '12', 'ok']);
    assert.equal(await table.locator('tbody td strong', { hasText: 'ok' }).count(), 1);
    assert.equal(await table.locator('tbody td del', { hasText: 'gone' }).count(), 1);
    assert.equal(await table.locator('tbody td code').innerText(), 'b|c', 'an escaped pipe stays in its cell');
    assert.equal(await table.locator('th').nth(1).getAttribute('class'), 'al-right');
    assert.equal(await table.locator('th').nth(2).getAttribute('class'), 'al-center');
    const boxes = reply.locator('li.task input[type="checkbox"]');
    assert.equal(await boxes.count(), 2);
    assert.deepEqual([await boxes.nth(0).isChecked(), await boxes.nth(1).isChecked()], [true, false]);
    assert.equal(await boxes.nth(0).isDisabled(), true, 'task boxes are not controls');
    assert.deepEqual(await reply.locator('li.task ol li').allInnerTexts(), ['nested one', 'nested two']);
    // Fenced code: label, highlighting, copy.
    const blocks = reply.locator('.md-codeblock');
    assert.equal(await blocks.count(), 2);
    assert.equal(await blocks.nth(0).locator('.md-lang').innerText(), 'rust');
    assert.deepEqual(await blocks.nth(0).locator('.hl-kw').allInnerTexts(), ['fn', 'let']);
    assert.deepEqual(await blocks.nth(0).locator('.hl-type').allInnerTexts(), ['u32']);
    assert.deepEqual(await blocks.nth(0).locator('.hl-fn').allInnerTexts(), ['main', 'println!']);
    assert.equal(await blocks.nth(0).locator('.hl-num').innerText(), '42');
    assert.equal(await blocks.nth(0).locator('.hl-str').innerText(), '"hi {n}"');
    assert.equal(await blocks.nth(1).locator('.md-lang').innerText(), 'json');
    assert.deepEqual(await blocks.nth(1).locator('.hl-key').allInnerTexts(), ['"key"']);
    assert.deepEqual(await blocks.nth(1).locator('.hl-lit').allInnerTexts(), ['true', 'null']);
    const copy = blocks.nth(0).getByRole('button', { name: 'Copy rust code' });
    await copy.click();
    await blocks.nth(0).locator('button.copy', { hasText: 'Copied' }).waitFor();
    assert.equal(await clipboard(), 'fn main() { let n: u32 = 42; println!("hi {n}"); }');
    await copy.focus();
    await page.keyboard.press('Enter');
    assert.equal(await clipboard(), 'fn main() { let n: u32 = 42; println!("hi {n}"); }', 'the copy button works from the keyboard');
    // Links: http(s) only, in a new tab without an opener or referrer.
    const links = reply.locator('a');
    assert.deepEqual(await links.evaluateAll((as) => as.map((a) => [a.getAttribute('href'), a.target, a.rel, a.textContent])), [
      ['https://example.com/docs?a=1', '_blank', 'noopener noreferrer', 'the site'],
      ['https://example.org/x', '_blank', 'noopener noreferrer', 'https://example.org/x'],
    ]);
    assert.match(await reply.innerText(), /this \(javascript:alert\(1\) — not opened\)/);
    await shots(page, 'markdown', reply);
    assert.deepEqual(seen.dialogs, []);
  });

  it('highlights JSON, YAML, shell, Rust, Python, JavaScript, C, C++ and diff', async () => {
    const out = await page.evaluate(async () => {
      const { tokens, languageOf } = await import('/highlight.js');
      const samples = {
        json: '{"a": 1, "b": "two", "c": false}',
        yaml: 'name: demo # note\nitems:\n  - 3\n  - "q"\nflag: true\ntext: |\n  key: not a key\n',
        sh: 'FOO=1 grep -n "x $HOME" file.txt | wc -l # count\nif [ -f a ]; then echo ${FOO}; fi',
        rs: '#[derive(Debug)]\npub struct S<\'a> { s: &\'a str } // c\nlet c = \'x\'; let r = r#"raw"#;',
        python: '@cache\ndef f(x: int) -> None:\n    """doc"""\n    return f"{x}" if x else None  # c',
        js: 'const f = async (a) => { return `t${a}` + 0x1F; }; // c\nclass Apple extends Base {}',
        c: '#include <stdio.h>\nint main(void) { printf("%d\\n", 7); return 0; } /* c */',
        'c++': 'template <typename T> class V { std::vector<T> v; bool ok() const { return nullptr == 0; } };',
        diff: 'diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n same',
      };
      const result = {};
      for (const [word, code] of Object.entries(samples)) {
        const lang = languageOf(word);
        const toks = tokens(code, lang);
        const by = {};
        for (const [cls, text] of toks) if (cls) (by[cls] ||= []).push(text);
        result[word] = { lang, exact: toks.map((t) => t[1]).join('') === code, by };
      }
      result.unknown = languageOf('brainfuck');
      const redirect = tokens('echo x >&2; exit 3', 'shell');
      result.redirect = { by: {} };
      for (const [cls, text] of redirect) if (cls) (result.redirect.by[cls] ||= []).push(text);
      return result;
    });
    for (const [word, r] of Object.entries(out)) if (word !== 'unknown' && word !== 'redirect') assert.ok(r.exact, `${word}: the tokens give back the text`);
    assert.equal(out.unknown, null);
    assert.deepEqual(out.json.by['hl-key'], ['"a"', '"b"', '"c"']);
    assert.deepEqual(out.json.by['hl-str'], ['"two"']);
    assert.deepEqual(out.yaml.by['hl-key'], ['name', 'items', 'flag', 'text']);
    assert.deepEqual(out.yaml.by['hl-com'], ['# note']);
    assert.ok(out.yaml.by['hl-str'].includes('key: not a key'), 'block scalar text is not a key');
    assert.deepEqual(out.yaml.by['hl-lit'], ['true']);
    assert.deepEqual(out.sh.by['hl-fn'], ['grep', 'wc', '[', 'echo']);
    assert.ok(out.sh.by['hl-var'].includes('FOO') && out.sh.by['hl-var'].includes('${FOO}'));
    assert.deepEqual(out.sh.by['hl-str'], ['"x $HOME"']);
    assert.deepEqual(out.sh.by['hl-meta'], ['-n', '-l', '-f']);
    assert.deepEqual(out.redirect.by['hl-meta'], ['>&2']);
    assert.deepEqual(out.redirect.by['hl-fn'], ['echo', 'exit']);
    assert.deepEqual(out.sh.by['hl-kw'], ['if', 'then', 'fi']);
    assert.equal(out.rs.lang, 'rust');
    assert.deepEqual(out.rs.by['hl-meta'], ['#[derive(Debug)]', "'a", "'a"]);
    assert.deepEqual(out.rs.by['hl-str'], ["'x'", 'r#"raw"#']);
    assert.deepEqual(out.python.by['hl-meta'], ['@cache']);
    assert.deepEqual(out.python.by['hl-str'], ['"""doc"""', 'f"{x}"']);
    assert.deepEqual(out.python.by['hl-lit'], ['None', 'None']);
    assert.deepEqual(out.js.by['hl-str'], ['`t${a}`']);
    assert.deepEqual(out.js.by['hl-num'], ['0x1F']);
    assert.deepEqual(out.js.by['hl-type'], ['Apple', 'Base']);
    assert.deepEqual(out.c.by['hl-meta'], ['#include <stdio.h>']);
    assert.deepEqual(out.c.by['hl-type'], ['int', 'void']);
    assert.deepEqual(out.c.by['hl-com'], ['/* c */']);
    assert.equal(out['c++'].lang, 'cpp');
    assert.ok(out['c++'].by['hl-kw'].includes('template') && out['c++'].by['hl-lit'].includes('nullptr'));
    assert.deepEqual(out.diff.by['hl-add'], ['+new']);
    assert.deepEqual(out.diff.by['hl-del'], ['-old']);
    assert.deepEqual(out.diff.by['hl-hunk'], ['@@ -1,2 +1,2 @@']);
    assert.deepEqual(out.diff.by['hl-meta'], ['diff --git a/x b/x', '--- a/x', '+++ b/x']);
  });

  it('shows a tool call’s command, exit status, stdout and stderr separately', async () => {
    await sendMessage(page, "/run printf 'out <b>1</b>\\nstderr (9 bytes):\\nnot a block\\n'; printf 'bad thing\\n' >&2; exit 3");
    const prompt = page.locator('.prompt');
    await prompt.waitFor();
    await prompt.locator('button.approve').click();
    await page.locator('#tray').waitFor({ state: 'hidden' });
    const card = page.locator('.tool', { hasText: 'bad thing' });
    await card.waitFor();
    const command = card.locator('.tool-command pre.cmd');
    assert.equal(await command.innerText(), "printf 'out <b>1</b>\\nstderr (9 bytes):\\nnot a block\\n'; printf 'bad thing\\n' >&2; exit 3");
    assert.deepEqual(await command.locator('.hl-fn').allInnerTexts(), ['printf', 'printf', 'exit']);
    assert.equal(await command.locator('.hl-str').count(), 2);
    assert.equal(await card.locator('.chip.exit').innerText(), 'exit 3');
    assert.match(await card.locator('.chip.exit').getAttribute('class'), /exit-bad/);
    assert.equal(await card.getAttribute('data-outcome'), 'failed');
    const stdout = card.locator('.tool-stream.stream-stdout');
    const stderr = card.locator('.tool-stream.stream-stderr');
    // The counted block keeps output that looks like a header inside it.
    assert.equal(await stdout.locator('pre').innerText(), 'out <b>1</b>\nstderr (9 bytes):\nnot a block');
    assert.equal(await stderr.locator('pre').innerText(), 'bad thing');
    assert.equal(await card.locator('.tool-stream').count(), 2);
    assert.equal(await card.locator('b').count(), 0, 'tool output is text');
    assert.match(await card.locator('.tool-fields').innerText(), /state\s+exited/);
    await stdout.getByRole('button', { name: 'Copy stdout' }).click();
    assert.equal(await clipboard(), 'out <b>1</b>\nstderr (9 bytes):\nnot a block', 'the copy is the shown text');
    await card.locator('.tool-raw summary').click();
    assert.match(await card.locator('.tool-raw pre').innerText(), /\[\[exit_code\]\]: 3/);
    await shots(page, 'tool-card', card);
    // A command that succeeds.
    await sendMessage(page, '/run echo fine');
    await prompt.waitFor();
    await prompt.locator('button.approve').click();
    const ok = page.locator('.tool', { hasText: 'echo fine' });
    await ok.locator('.chip.exit', { hasText: 'exit 0' }).waitFor();
    assert.equal(await ok.getAttribute('data-outcome'), 'ok');
    assert.equal(await ok.locator('.stream-stdout pre').innerText(), 'fine');
    assert.equal(await ok.locator('.stream-stderr pre').count(), 0);
    assert.match(await ok.locator('.stream-stderr').innerText(), /stderr\s+empty/);
  });

  it('shows a large answer in a plain-text window and reads it in 32 KiB pages', async () => {
    await sendMessage(page, '/big 100000');
    const reply = page.locator('.msg.assistant', { has: page.locator('.answer-window') });
    await reply.waitFor();
    const events = (await hubApi(hub, 'GET', '/api/sessions/md/events')).body;
    const list = Array.isArray(events) ? events : events.events;
    const big = list.filter((e) => e.event === 'model_response').pop();
    const full = big.data.content[0].raw;
    assert.equal(full.length, 100000);
    // The window: four sections of 32,768 units, nothing else in the DOM.
    const win = reply.locator('.answer-window');
    assert.match(await win.locator('.answer-where').innerText(), /section 1 of 4 · characters 1–32,768 of 100,000/);
    assert.equal(await win.locator('pre').innerText(), full.slice(0, 32768));
    assert.equal(await win.locator('.window-prev').isDisabled(), true);
    await win.locator('.window-next').click();
    assert.match(await win.locator('.answer-where').innerText(), /section 2 of 4/);
    assert.equal(await win.locator('pre').innerText(), full.slice(32768, 65536));
    await page.keyboard.press('Enter'); // focus stays on "Next section"
    await page.keyboard.press('Enter');
    assert.match(await win.locator('.answer-where').innerText(), /section 4 of 4 · characters 98,305–100,000/);
    assert.equal(await win.locator('.window-next').isDisabled(), true);
    // Pages from the worker.
    const pages = reply.locator('.answer-pages');
    await pages.getByRole('button', { name: 'Read complete answer' }).click();
    const where = pages.locator('.answer-where');
    await where.filter({ hasText: 'bytes 0–32,768 of 100,000' }).waitFor();
    assert.match(await where.innerText(), /part 1 of 1 .* page 1/);
    const texts = [await pages.locator('pre.answer-page').innerText()];
    assert.equal(await pages.locator('pre.answer-page').count(), 1, 'one page in the DOM');
    assert.equal(await pages.locator('.answer-prev').isDisabled(), true);
    await pages.getByRole('button', { name: 'Copy this page' }).click();
    assert.equal(await clipboard(), full.slice(0, 32768));
    // The first "Next page" by mouse, then from the keyboard: focus stays
    // on the control across the redraw.
    await pages.locator('.answer-next').click();
    await where.filter({ hasText: 'page 2' }).waitFor();
    texts.push(await pages.locator('pre.answer-page').innerText());
    for (let n = 3; n <= 4; n++) {
      assert.equal(await page.evaluate(() => document.activeElement.dataset.key), 'next');
      await page.keyboard.press('Enter');
      await where.filter({ hasText: `page ${n}` }).waitFor();
      texts.push(await pages.locator('pre.answer-page').innerText());
    }
    // At the end the disabled "End of answer" gives the focus to the page.
    assert.equal(await page.evaluate(() => document.activeElement.classList.contains('answer-page')), true);
    assert.equal(texts.join(''), full, 'the pages hold every byte of the answer, in order');
    assert.equal(await pages.locator('.answer-next').innerText(), 'End of answer');
    assert.equal(await pages.locator('.answer-next').isDisabled(), true);
    await shots(page, 'answer-pages', pages);
    await pages.locator('.answer-prev').click();
    await where.filter({ hasText: 'bytes 65,536–98,304 of 100,000 · page 3' }).waitFor();
    assert.equal(await pages.locator('pre.answer-page').innerText(), full.slice(65536, 98304));
    await pages.getByRole('button', { name: 'Close' }).click();
    await pages.getByRole('button', { name: 'Read complete answer' }).waitFor();
    assert.deepEqual(seen.errors, []);
  });

  it('refuses pages that fail the identity checks and says why', async () => {
    const pages = page.locator('.msg.assistant .answer-pages').last();
    // A reply for another offset, then one whose answer changed shape.
    let mode = 'offset';
    await page.route('**/api/sessions/md/answer', async (route) => {
      const req = JSON.parse(route.request().postData());
      const res = await route.fetch();
      const body = await res.json();
      if (mode === 'offset') body.offset = req.offset + 1;
      if (mode === 'shape' && req.offset > 0) body.total_parts = 2;
      await route.fulfill({ response: res, json: body });
    });
    await pages.getByRole('button', { name: 'Read complete answer' }).click();
    const error = pages.locator('.answer-error');
    await error.waitFor();
    assert.match(await error.innerText(), /The page was not shown: the page is not at the requested part and offset/);
    assert.equal(await pages.locator('pre.answer-page').count(), 0);
    mode = 'shape';
    await pages.getByRole('button', { name: 'Try again' }).click();
    await pages.locator('.answer-where', { hasText: 'page 1' }).waitFor();
    await pages.locator('.answer-next').click();
    await error.waitFor();
    assert.match(await error.innerText(), /the answer changed between pages \(a different number of parts\)\. Start again from the beginning\./);
    assert.match(await pages.locator('.answer-where').innerText(), /page 1/, 'the last good page stays');
    await page.unroute('**/api/sessions/md/answer');
    await pages.getByRole('button', { name: 'Close' }).click();
  });

  it('keeps the answer source of a response too large for the hub’s transcript', async () => {
    await sendMessage(page, '/big 300000');
    // Live, the panel holds the whole response (its own 8 MiB budget).
    const live = page.locator('.msg.assistant', { has: page.locator('.answer-where', { hasText: 'of 300,000' }) });
    await live.waitFor();
    assert.match(await live.locator('.answer-window .answer-where').innerText(), /section 1 of 10/);
    // The hub kept an omission record: a reload replays it, with the source.
    await page.reload();
    await page.locator('#session-title', { hasText: 'md' }).waitFor();
    const omitted = page.locator('.generic.omitted', { hasText: 'model_response' });
    await omitted.waitFor();
    assert.match(await omitted.innerText(), /omitted from display/);
    const pages = omitted.locator('.answer-pages');
    await pages.getByRole('button', { name: 'Read complete answer' }).click();
    await pages.locator('.answer-where', { hasText: 'bytes 0–32,768 of 300,000' }).waitFor();
    assert.equal((await pages.locator('pre.answer-page').innerText()).length, 32768);
    await pages.locator('.answer-next').click();
    await pages.locator('.answer-where', { hasText: 'bytes 32,768–65,536 of 300,000 · page 2' }).waitFor();
    await shots(page, 'answer-omitted', omitted);
    await pages.getByRole('button', { name: 'Close' }).click();
  });

  it('says plainly when the complete answer cannot be read', async () => {
    // No usable source: an explicit preview note, no control.
    const none = await page.evaluate(async () => {
      const { answerAccess } = await import('/answers.js');
      const shortened = answerAccess('md', { worker_id: 'w', turn: 0 }, { shortened: true });
      const whole = answerAccess('md', null, { shortened: false });
      return { text: shortened.textContent, button: shortened.querySelector('button') !== null, whole };
    });
    assert.match(none.text, /complete text is unavailable: the worker gave no usable answer source/);
    assert.equal(none.button, false);
    assert.equal(none.whole, null, 'a complete response without a source shows nothing');
    // The worker stops: the hub answers 409 not_connected.
    await workerAction(page, 'Stop');
    await page.locator('#session-header .badge', { hasText: 'no worker' }).waitFor();
    const pages = page.locator('.msg.assistant .answer-pages').last();
    await pages.getByRole('button', { name: 'Read complete answer' }).click();
    const error = pages.locator('.answer-error');
    await error.waitFor();
    assert.match(await error.innerText(), /Complete answer unavailable: no worker is connected to this session/);
    await shots(page, 'answer-unavailable', pages);
    // A restarted worker no longer has the old answer: the worker's refusal.
    await workerAction(page, 'Start');
    await page.locator('#session-header .badge', { hasText: 'worker attached' }).waitFor();
    await waitFor(async () => {
      await pages.getByRole('button', { name: 'Try again' }).click();
      return /could not serve it|no longer|worker_error/.test(await error.innerText());
    }, { what: 'the worker refusal', timeout: SOON });
    assert.match(await error.innerText(), /Complete answer unavailable: the worker could not serve it \(.+\)/);
    const texts = await page.evaluate(async () => {
      const { unavailableText } = await import('/answers.js');
      const of = (status, body) => unavailableText({ status, body });
      return [
        of(409, { error: 'answer_unavailable', reason: 'unsupported' }),
        of(409, { error: 'answer_unavailable', reason: 'disconnected' }),
        of(409, { error: 'answer_unavailable', reason: 'timeout' }),
        of(429, { error: 'too_many_queries' }),
        of(400, { error: 'invalid_arguments', message: 'source.turn must be an integer' }),
      ];
    });
    assert.match(texts[0], /does not offer answer pages/);
    assert.match(texts[1], /connection changed/);
    assert.match(texts[2], /within 10 s/);
    assert.match(texts[3], /Too many answer reads/);
    assert.match(texts[4], /refused this answer source: source\.turn must be an integer/);
  });

  it('stays fast on hostile input (1 MiB)', async () => {
    const out = await page.evaluate(async () => {
      const { markdown } = await import('/markdown.js');
      const { tokens } = await import('/highlight.js');
      const { parseToolOutput } = await import('/toolout.js');
      const MiB = 1024 * 1024;
      const fill = (s) => s.repeat(Math.ceil(MiB / s.length)).slice(0, MiB);
      const inputs = {
        stars: fill('*a '),
        unclosed: fill('**x _y `z [w ~~v '),
        brackets: fill('['),
        backticks: fill('`` ` '),
        links: fill('[a](http://x.y/('),
        urls: fill('http://'),
        table: `| a | b |\n|---|---|\n${fill('| x | y |\n')}`,
        nested: fill('> - '),
        fences: fill('```\n'),
      };
      const times = {};
      for (const [name, text] of Object.entries(inputs)) {
        let t0 = performance.now();
        const el = markdown(text, { maxChars: MiB });
        times[name] = [Math.round(performance.now() - t0), el.querySelectorAll('*').length];
        // The transcript formats at most 64 Ki characters (beyond: the window).
        t0 = performance.now();
        markdown(text.slice(0, 65536));
        times[`${name}-64k`] = [Math.round(performance.now() - t0), 0];
      }
      for (const lang of ['json', 'yaml', 'shell', 'rust', 'python', 'javascript', 'cpp', 'diff']) {
        const t0 = performance.now();
        tokens(fill('"\'`/*#[$\\{ r#"\'a '), lang);
        tokens(fill('a').slice(0, 65536), lang);
        times[`hl-${lang}`] = [Math.round(performance.now() - t0), 0];
      }
      const t0 = performance.now();
      parseToolOutput(`[[a]]: 1\n\n${fill('stdout (99 bytes):\n\n\n')}`);
      times.toolout = [Math.round(performance.now() - t0), 0];
      return times;
    });
    for (const [name, [ms, nodes]] of Object.entries(out)) {
      assert.ok(ms < (name.endsWith('-64k') ? 1000 : 5000), `${name}: ${ms} ms`);
      assert.ok(nodes <= 20010, `${name}: ${nodes} elements`);
    }
    console.log(`hostile 1 MiB timings (ms, elements): ${JSON.stringify(out)}`);
  });

  it('has no HTML sink in the panel’s code', () => {
    const sinks = /\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|\beval\s*\(|new Function\s*\(|createContextualFragment|parseFromString|setHTMLUnsafe|\.srcdoc\b/;
    const dir = path.join(ROOT, 'static');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.js'));
    assert.ok(files.includes('markdown.js') && files.includes('highlight.js') && files.includes('answers.js'));
    for (const f of files) {
      const text = fs.readFileSync(path.join(dir, f), 'utf8');
      const m = sinks.exec(text);
      assert.equal(m, null, `${f} uses ${m && m[0]}`);
    }
  });
});
