// Token usage of the latest model request, shown above the composer.
//
// Where the figures come from: a worker's `model_response` carries an
// optional `cost` {prompt, generated, cache_hit} (provider-reported;
// `cache_hit` counts tokens inside `prompt`; absence means "not reported",
// not zero). The worker protocol carries no context size: neither the
// status object nor the options reply has one. A worker that states it in
// its options reply, as a positive integer `context_window` among the
// current model values, gets a request-size meter against it; otherwise
// no meter is drawn, because any other number would be invented.

import { $, h, setChildren } from './dom.js';
import { state } from './state.js';
import { detailsShown } from './statusbar.js';

/** `cost` as three non-negative integers, or null when absent or malformed. */
export function parseCost(cost) {
  if (!cost || typeof cost !== 'object' || Array.isArray(cost)) return null;
  const names = ['prompt', 'generated', 'cache_hit'];
  if (!names.some((n) => cost[n] !== undefined)) return null;
  for (const n of names) {
    const x = cost[n];
    if (x !== undefined && !(typeof x === 'number' && Number.isFinite(x) && x >= 0)) return null;
  }
  return { prompt: cost.prompt ?? null, generated: cost.generated ?? null, cacheHit: cost.cache_hit ?? null };
}

/** 950, 1.2K, 34K, 1.5M: decimal units, at most one decimal, no trailing ".0". */
export function fmtTokens(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '?';
  const units = [
    [1e9, 'B'],
    [1e6, 'M'],
    [1e3, 'K'],
  ];
  for (const [scale, unit] of units) {
    if (n >= scale) {
      const v = n / scale;
      const text = v >= 100 ? Math.round(v).toString() : v.toFixed(1).replace(/\.0$/, '');
      return `${text}${unit}`;
    }
  }
  return String(Math.round(n));
}

/** The context size the current worker states, or null (see the file comment). */
export function contextWindow(v) {
  const cur = v && v.options && v.options.model && v.options.model.current;
  const raw = cur && typeof cur === 'object' ? cur.context_window : undefined;
  const n = typeof raw === 'string' && /^[0-9]{1,12}$/.test(raw) ? Number(raw) : raw;
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

const latestCache = new WeakMap();

/**
 * The latest `model_response` of the view that reports a cost:
 * `{usage, at, workerId}` or null. Scans back from the newest entry and
 * remembers the answer until the view's transcript changes.
 */
export function latestUsage(v) {
  if (!v) return null;
  const key = `${v.entries.length}|${v.cursor}|${v.structure}`;
  const hit = latestCache.get(v);
  if (hit && hit.key === key) return hit.value;
  let value = null;
  for (let i = v.entries.length - 1; i >= 0; i--) {
    const e = v.entries[i];
    if (!e || e.event !== 'model_response' || !e.data) continue;
    const usage = parseCost(e.data.cost);
    if (usage) {
      value = { usage, at: e.received_at, workerId: e.worker_id };
      break;
    }
  }
  latestCache.set(v, { key, value });
  return value;
}

function pct(part, whole) {
  if (!(whole > 0) || typeof part !== 'number') return null;
  const p = Math.min(100, (part / whole) * 100);
  return p >= 10 || p === 0 ? `${Math.round(p)}%` : `${p.toFixed(1)}%`;
}

let sig = null;

/** Draws #token-usage for the selected session (nothing when no figure is known). */
export function renderTokens() {
  const box = $('token-usage');
  const v = state.selected ? state.views.get(state.selected) : null;
  const latest = latestUsage(v);
  const ctx = contextWindow(v);
  const details = detailsShown();
  const now = JSON.stringify([state.selected, latest, ctx, details]);
  if (now === sig) return;
  sig = now;
  if (!latest) {
    box.hidden = true;
    box.replaceChildren();
    return;
  }
  box.hidden = false;
  const { prompt, generated, cacheHit } = latest.usage;
  const exact = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : 'not reported');
  const parts = [h('span', { class: 'tok-label', text: 'Latest request' })];
  const figure = (name, n, extra) =>
    h('span', { class: 'tok-fig', dataset: { figure: name }, title: `${name}: ${exact(n)} tokens` }, `${name} `, h('strong', { text: fmtTokens(n) }), extra || null, details ? h('span', { class: 'muted', text: ` (${exact(n)})` }) : null);
  if (prompt !== null) parts.push(figure('prompt', prompt));
  if (generated !== null) parts.push(figure('generated', generated));
  if (cacheHit !== null) {
    const share = pct(cacheHit, prompt);
    parts.push(figure('cache hit', cacheHit, share ? h('span', { class: 'muted', text: ` (${share} of prompt)` }) : null));
  }
  const size = (prompt || 0) + (generated || 0);
  if (ctx) {
    const meter = h('meter', {
      id: 'token-meter',
      min: '0',
      max: String(ctx),
      value: String(Math.min(size, ctx)),
      low: String(Math.round(ctx * 0.6)),
      high: String(Math.round(ctx * 0.85)),
      optimum: '0',
      'aria-label': 'Latest request size against the model’s context',
      'aria-valuetext': `${exact(size)} of ${exact(ctx)} tokens (${pct(size, ctx)})`,
    });
    parts.push(h('span', { class: 'tok-meter' }, h('span', { text: 'request size ' }), meter, h('span', { class: 'tok-meter-text', text: ` ${fmtTokens(size)} / ${fmtTokens(ctx)} (${pct(size, ctx)})` })));
  }
  setChildren(box, parts);
  box.title = ctx ? `Figures reported by the provider for the latest model request; the meter compares prompt plus generated tokens with the ${exact(ctx)}-token context the worker states.` : 'Figures reported by the provider for the latest model request. The worker does not state its model’s context size, so there is no meter.';
}
