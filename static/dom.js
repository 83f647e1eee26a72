// DOM helpers. Everything that shows data builds nodes with createElement
// and textContent: untrusted text (model output, tool output, logs, ids) is
// never parsed as HTML, and nothing here uses innerHTML or eval.

/** The panel's element with this id. */
export const $ = (id) => document.getElementById(id);

/**
 * Creates an element. `attrs` keys: `class`, `text`, `dataset` (object),
 * `on<Event>` (listener), boolean `hidden`/`disabled`, anything else through
 * setAttribute. Children: nodes, strings (as text), arrays, null/false.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'class') el.className = value;
      else if (key === 'text') el.textContent = String(value);
      else if (key === 'dataset') Object.assign(el.dataset, value);
      else if (key.startsWith('on') && typeof value === 'function') {
        el.addEventListener(key.slice(2).toLowerCase(), value);
      } else if (key === 'hidden' || key === 'disabled' || key === 'open') {
        el[key] = Boolean(value);
      } else if (key === 'value') el.value = value;
      else el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces all children of `el`. */
export function setChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** A visually hidden text for screen readers. */
export function srOnly(text) {
  return h('span', { class: 'sr-only', text });
}

/** Bytes of `s` encoded as UTF-8, without allocating. */
export function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** A prefix of `s` of at most `max` UTF-16 units, never splitting a pair. */
export function clip(s, max) {
  if (s.length <= max) return s;
  let end = max;
  const c = s.charCodeAt(end - 1);
  if (c >= 0xd800 && c < 0xdc00) end -= 1;
  return s.slice(0, end);
}

export function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '?';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleTimeString();
}

export function fmtDateTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString();
}

export function shortId(id) {
  if (typeof id !== 'string') return '';
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

/** A random UUID v4 (crypto.randomUUID needs a secure context). */
export function uuid() {
  if (typeof crypto.randomUUID === 'function' && window.isSecureContext) {
    return crypto.randomUUID();
  }
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** The text of content parts (type and modality text); other parts named. */
export function partsText(parts) {
  if (!Array.isArray(parts)) return '';
  return parts
    .map((p) => {
      if (!p || typeof p !== 'object') return '';
      if (typeof p.raw === 'string' && (p.modality === 'text' || p.modality === undefined)) {
        return p.raw;
      }
      return `[${p.modality || 'part'} ${p.type || ''}${typeof p.raw === 'string' ? `, ${fmtBytes(utf8Length(p.raw))}` : ''}]`;
    })
    .filter((t) => t !== '')
    .join('\n');
}

// ---------------------------------------------------------------------------
// JSON as text, with the hub's display markers made visible
// ---------------------------------------------------------------------------

function isMarker(v) {
  return v && typeof v === 'object' && !Array.isArray(v) && (v.display_truncated === true || v.display_omitted === true);
}

/**
 * A <pre> showing `value` as indented JSON text. Display markers
 * (`{"display_truncated": true, "bytes": N, "preview": "…"}` and
 * `{"display_omitted": true}`) are shown as the preview followed by a
 * highlighted "truncated: N bytes" note. Output is cut at `maxChars`.
 */
export function jsonBlock(value, { maxChars = 65536, maxString = 4096, cls = 'json' } = {}) {
  const pre = h('pre', { class: cls });
  const state = { chars: 0, cut: false, text: '' };
  const flush = () => {
    if (state.text) {
      pre.appendChild(document.createTextNode(state.text));
      state.text = '';
    }
  };
  const out = (s) => {
    if (state.cut) return;
    if (state.chars + s.length > maxChars) {
      state.text += clip(s, Math.max(0, maxChars - state.chars));
      state.cut = true;
      return;
    }
    state.chars += s.length;
    state.text += s;
  };
  const mark = (s) => {
    if (state.cut) return;
    flush();
    pre.appendChild(h('mark', { class: 'trunc', text: s }));
    state.chars += s.length;
  };
  // Long strings are clipped one by one, so what follows them (keys, the
  // hub's own truncation markers) stays visible.
  const str = (s) => {
    if (s.length <= maxString) return out(JSON.stringify(s));
    out(JSON.stringify(clip(s, maxString)).slice(0, -1));
    mark(`…⟨${s.length - clip(s, maxString).length} more characters not shown here⟩`);
    out('"');
  };
  const walk = (v, indent) => {
    if (state.cut) return;
    if (typeof v === 'string') return str(v);
    if (isMarker(v)) {
      if (v.display_truncated) {
        str(typeof v.preview === 'string' ? v.preview : '');
        mark(` ⟨truncated for display: ${typeof v.bytes === 'number' ? `${fmtBytes(v.bytes)} (${v.bytes} bytes)` : 'size unknown'} in the original⟩`);
      } else {
        mark(`⟨omitted from display${typeof v.bytes === 'number' ? `: ${v.bytes} bytes` : ''}⟩`);
      }
      return;
    }
    if (Array.isArray(v)) {
      if (v.length === 0) return out('[]');
      out('[\n');
      v.forEach((item, i) => {
        out(`${indent}  `);
        walk(item, `${indent}  `);
        out(i + 1 < v.length ? ',\n' : '\n');
      });
      out(`${indent}]`);
      return;
    }
    if (v && typeof v === 'object') {
      const keys = Object.keys(v);
      if (keys.length === 0) return out('{}');
      out('{\n');
      keys.forEach((k, i) => {
        out(`${indent}  ${JSON.stringify(k)}: `);
        if (k === 'omitted_items' && typeof v[k] === 'number') {
          mark(String(v[k]));
          out(` (items omitted from display)`);
        } else {
          walk(v[k], `${indent}  `);
        }
        out(i + 1 < keys.length ? ',\n' : '\n');
      });
      out(`${indent}}`);
      return;
    }
    out(JSON.stringify(v) ?? 'null');
  };
  walk(value, '');
  flush();
  if (state.cut) pre.appendChild(h('mark', { class: 'trunc', text: `\n⟨display cut at ${maxChars} characters⟩` }));
  return pre;
}

/** A collapsed JSON view: <details><summary>label</summary><pre>…</pre>. */
export function jsonDetails(label, value, opts) {
  const details = h('details', { class: 'json-details' }, h('summary', { text: label }));
  // Built lazily on first open: large values cost nothing until looked at.
  let built = false;
  details.addEventListener('toggle', () => {
    if (details.open && !built) {
      built = true;
      details.appendChild(jsonBlock(value, opts));
    }
  });
  return details;
}

/** Text in a <pre>, cut at `max` characters with a visible note. */
export function textBlock(text, { max = 65536, cls = 'text' } = {}) {
  const s = typeof text === 'string' ? text : String(text ?? '');
  const pre = h('pre', { class: cls });
  if (s.length > max) {
    pre.appendChild(document.createTextNode(clip(s, max)));
    pre.appendChild(h('mark', { class: 'trunc', text: `\n⟨showing the first ${max} of ${s.length} characters⟩` }));
  } else {
    pre.textContent = s;
  }
  return pre;
}

// ---------------------------------------------------------------------------
// Copying to the clipboard
// ---------------------------------------------------------------------------

/**
 * Copies `text`; resolves to whether it worked. The asynchronous clipboard
 * needs a secure context (127.0.0.1 and localhost are); elsewhere a hidden
 * text area and the copy command are tried.
 */
export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    /* fall back below */
  }
  const area = h('textarea', { class: 'copy-buffer', readonly: true, 'aria-hidden': 'true', tabindex: '-1' });
  area.value = text;
  document.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

/**
 * A button that copies `getText()` and says, for a moment, whether that
 * worked ("Copied" / "Copy failed"). `what` names the content for screen
 * readers ("Copy JSON code").
 */
export function copyButton(getText, { label = 'Copy', what = '' } = {}) {
  const button = h('button', { type: 'button', class: 'link small copy', 'aria-label': what ? `${label} ${what}` : label, text: label });
  let timer = 0;
  button.addEventListener('click', async () => {
    const ok = await copyText(getText());
    button.textContent = ok ? 'Copied' : 'Copy failed';
    button.dataset.copied = ok ? 'yes' : 'no';
    clearTimeout(timer);
    timer = setTimeout(() => {
      button.textContent = label;
      delete button.dataset.copied;
    }, 1500);
  });
  return button;
}
