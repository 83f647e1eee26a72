// Shared support for the browser tests: the REAL hub binary on a free
// port with a temporary data directory, and headless Chromium driven by
// playwright-core.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Generous deadline for things that should happen soon. */
export const SOON = 20000;

export function hubBinary() {
  const candidates = [process.env.SIMPLEX_HUB_BIN, path.join(ROOT, 'target/debug/simplex-hub'), path.join(ROOT, 'target/release/simplex-hub')].filter(Boolean);
  for (const c of candidates) if (fs.existsSync(c)) return c;
  throw new Error(`hub binary not found (tried ${candidates.join(', ')}); run cargo build first`);
}

let extraFlags = null;
/** Flags every test hub gets: a free tools port when the build has one. */
function defaultFlags(bin) {
  if (extraFlags === null) {
    let help = '';
    try {
      help = execFileSync(bin, ['--help'], { encoding: 'utf8' });
    } catch (err) {
      help = String(err.stdout || '');
    }
    extraFlags = help.includes('--tools-port') ? ['--tools-port', '0'] : [];
  }
  return extraFlags;
}

export function tempDir(tag) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `simplex-browser-${tag}-`));
}

export function removeDir(dir) {
  try {
    fs.rmSync(dir, { recursive: true, force: true });
  } catch {
    /* best effort */
  }
}

/** Every hub this test file started, for the failure dump below. */
const startedHubs = [];

// When a test in this file failed, print the tail of each hub's log, so a
// CI failure shows what the hub saw (HUB_LOG=1 streams it live instead).
process.on('exit', () => {
  if (!process.exitCode || process.env.HUB_LOG) return;
  for (const { dataDir, log } of startedHubs) {
    const tail = log.slice(-300);
    process.stderr.write(`--- hub log (${dataDir}), last ${tail.length} of ${log.length} lines kept ---\n`);
    for (const line of tail) process.stderr.write(`[hub] ${line}\n`);
  }
});

/**
 * Starts `simplex-hub serve --listen <listen> --data-dir <dataDir>` and
 * waits for its `panel: http://…` line on stderr.
 */
export function startHub({ dataDir, listen = '127.0.0.1:0', args = [] }) {
  const bin = hubBinary();
  const argv = ['serve', '--listen', listen, '--data-dir', dataDir, ...defaultFlags(bin), ...args];
  const proc = spawn(bin, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  const log = [];
  startedHubs.push({ dataDir, log });
  let buffer = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`hub did not print its panel URL in time:\n${log.join('\n')}`));
    }, SOON);
    const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`hub exited early (${code ?? signal}):\n${log.join('\n')}`));
    });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      buffer += chunk;
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (log.length < 5000) log.push(line);
        if (process.env.HUB_LOG) process.stderr.write(`[hub] ${line}\n`);
        const m = /panel: (http:\/\/\S+)/.exec(line);
        if (m) {
          clearTimeout(timer);
          const url = m[1].replace(/\/$/, '');
          resolve({
            url,
            port: Number(new URL(url).port),
            proc,
            log,
            dataDir,
            exited,
            /** SIGTERM, then SIGKILL after 15 s. */
            async stop() {
              if (proc.exitCode !== null || proc.signalCode !== null) return;
              proc.kill('SIGTERM');
              const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
              await exited;
              clearTimeout(t);
            },
            /** SIGKILL: the hub dies without any cleanup. */
            async kill9() {
              if (proc.exitCode !== null || proc.signalCode !== null) return;
              proc.kill('SIGKILL');
              await exited;
            },
          });
        }
      }
    });
  });
}

/** A session's description from the JSON API (`null` when it is absent). */
export async function describeSession(hub, id) {
  const res = await hubApi(hub, 'GET', `/api/sessions/${id}`);
  return res.status === 200 ? res.body.session : null;
}

/** Creates session `id` through the API, starts its worker and waits until the worker is live. */
export async function startLiveSession(hub, id) {
  assert.equal((await hubApi(hub, 'POST', '/api/sessions', { session: id })).status, 201);
  assert.equal((await hubApi(hub, 'POST', `/api/sessions/${id}/start`, {})).status, 200);
  await waitFor(async () => (await describeSession(hub, id))?.identity?.state === 'live', { what: `session ${id}'s worker` });
}

/** A JSON API call against a test hub (Node's fetch). */
export async function hubApi(hub, method, route, body, token) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(`${hub.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Headless Chromium with a new, empty profile directory. Returns the
 * persistent context and a `close()` that removes the profile.
 */
export async function launchBrowser({ viewport = { width: 1280, height: 800 }, colorScheme = 'light' } = {}) {
  const executablePath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
  const profile = tempDir('profile');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport,
    colorScheme,
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      removeDir(profile);
    },
  };
}

/**
 * A new browser with one panel page on `url`, connected to the hub:
 * `{browser, page, seen}` (`seen` as from `watch`).
 */
export async function openPanel(url) {
  const browser = await launchBrowser();
  const page = await browser.context.newPage();
  page.setDefaultTimeout(SOON);
  const seen = watch(page);
  await page.goto(url);
  await page.locator('#conn', { hasText: 'connected' }).waitFor();
  return { browser, page, seen };
}

/**
 * Records what must never happen on a panel page: uncaught errors,
 * console errors, and JavaScript dialogs (a fired alert() would mean
 * injected script ran). Dialogs are dismissed.
 */
export function watch(page) {
  const seen = { errors: [], dialogs: [] };
  page.on('pageerror', (err) => seen.errors.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/Failed to load resource|WebSocket connection/.test(msg.text())) seen.errors.push(`console: ${msg.text()}`);
  });
  page.on('dialog', (dialog) => {
    seen.dialogs.push(dialog.message());
    dialog.dismiss().catch(() => {});
  });
  return seen;
}

/**
 * Saves a screenshot to docs/screenshots when SCREENSHOTS=1 (the script's
 * --screenshots flag); otherwise does nothing.
 */
export async function shot(page, name) {
  if (process.env.SCREENSHOTS !== '1') return;
  const dir = path.join(ROOT, 'docs', 'screenshots');
  fs.mkdirSync(dir, { recursive: true });
  // Transient toasts would cover the inspector in every picture.
  await page.evaluate(() => document.getElementById('toasts')?.replaceChildren());
  await page.waitForTimeout(100);
  await page.screenshot({ path: path.join(dir, name) });
}

/**
 * With SCREENSHOTS=1: `<name>.png` (light, wide), then dark, narrow and
 * narrow dark, each with `target` scrolled into view.
 */
export async function shots(page, name, target) {
  if (process.env.SCREENSHOTS !== '1') return;
  const size = page.viewportSize();
  for (const [suffix, scheme, viewport] of [
    ['', 'light', size],
    ['-dark', 'dark', size],
    ['-narrow', 'light', { width: 420, height: 860 }],
    ['-narrow-dark', 'dark', { width: 420, height: 860 }],
  ]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize(viewport);
    await target.scrollIntoViewIfNeeded();
    await shot(page, `${name}${suffix}.png`);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize(size);
}

export async function waitFor(fn, { timeout = SOON, interval = 100, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

// ---------------------------------------------------------------------------
// Panel actions, as an operator performs them
// ---------------------------------------------------------------------------

export async function createSession(page, id) {
  await page.getByRole('button', { name: 'New session' }).click();
  await page.locator('#create-id').fill(id);
  await page.locator('#create-ok').click();
  await page.locator('#session-title', { hasText: id }).waitFor();
}

export async function selectSession(page, id) {
  await page.locator(`.session-item[data-session="${id}"]`).click();
  await page.locator('#session-title', { hasText: id }).waitFor();
}

/** Clicks a session header action and confirms its dialog. */
export async function workerAction(page, name) {
  await page.locator('#session-header .actions button', { hasText: new RegExp(`^${name}$`) }).click();
  const dialog = page.locator('#dlg-confirm');
  await dialog.waitFor({ state: 'visible' });
  const body = await page.locator('#confirm-body').innerText();
  await page.locator('#confirm-ok').click();
  await dialog.waitFor({ state: 'hidden' });
  return body;
}

export async function sendMessage(page, text) {
  await page.locator('#message').fill(text);
  await page.locator('#message').press('Enter');
}

/**
 * Creates session `session` and starts and stops the built-in worker in
 * it once: its first start writes the worker configuration holding the
 * session's endpoints and token, which is returned (parsed; the file is
 * JSON, which is YAML).
 */
export async function sessionWorkerConfig(hub, dataDir, session) {
  assert.equal((await hubApi(hub, 'POST', '/api/sessions', { session })).status, 201);
  assert.equal((await hubApi(hub, 'POST', `/api/sessions/${session}/start`, {})).status, 200);
  await waitFor(async () => (await hubApi(hub, 'GET', `/api/sessions/${session}`)).body.session.connected, { what: 'worker connected' });
  assert.equal((await hubApi(hub, 'POST', `/api/sessions/${session}/stop`)).status, 200);
  return JSON.parse(fs.readFileSync(path.join(dataDir, 'sessions', session, 'config', 'config.yaml'), 'utf8'));
}

/**
 * A scripted worker for session `session`: a page at the hub's origin
 * (so the hub's origin check passes) opens the session's event socket
 * with the endpoint from the generated worker configuration `config` and
 * sends hand-written envelopes. Returns the page; in it,
 * `window.scripted.open()` connects, `close()` disconnects,
 * `send(event, data, {run, request, skip})` sends one event with the next
 * sequence number (`skip` leaves that many out), and `confirm(call, run)`
 * asks the hub for a confirmation on a one-shot socket, keeping the
 * hub's answer in `window.scripted.answer`.
 */
export async function scriptedWorker(context, hubUrl, config, session, workerId) {
  const page = await context.newPage();
  await page.goto(`${hubUrl}/favicon.svg`);
  await page.evaluate(
    ({ events, confirm, session, workerId }) => {
      window.scripted = {
        seq: 0,
        received: [],
        answer: null,
        open() {
          return new Promise((resolve, reject) => {
            const ws = new WebSocket(events);
            ws.onopen = () => resolve();
            ws.onerror = () => reject(new Error('event socket failed'));
            ws.onmessage = (m) => window.scripted.received.push(JSON.parse(m.data));
            window.scripted.ws = ws;
          });
        },
        close() {
          window.scripted.ws.close();
        },
        send(event, data, { run = '', request = '', skip = 0 } = {}) {
          window.scripted.seq += 1 + skip;
          window.scripted.ws.send(JSON.stringify({ type: 'event', event, session_id: session, worker_id: workerId, request_id: request, run_id: run, sequence: window.scripted.seq, data }));
        },
        confirm(call, run) {
          const ws = new WebSocket(confirm);
          window.scripted.answer = null;
          ws.onopen = () =>
            ws.send(JSON.stringify({ type: 'confirmation_request', data: { worker_id: workerId, session_id: session, run_id: run, confirmation_id: `cf-${Date.now()}`, call } }));
          ws.onmessage = (m) => {
            window.scripted.answer = JSON.parse(m.data);
            ws.close();
          };
        },
      };
    },
    { events: config.client.endpoint, confirm: config.security.confirmation.endpoint, session, workerId },
  );
  return page;
}
