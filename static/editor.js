// A source editor for configuration files: a plain <textarea> with a
// line-number gutter and a syntax-highlighting layer drawn behind it. The
// layer is built from DOM text nodes in <span>s (never HTML), re-drawn on
// each edit, and skipped for very large texts. JSON (JSONC) and YAML.

import { h } from './dom.js';

/** Texts longer than this are shown without highlighting. */
const HIGHLIGHT_MAX = 256 * 1024;

/** Splits JSONC text into [class, text] tokens. */
export function jsonTokens(text) {
  const out = [];
  const re = /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)|"(?:\\.|[^"\\\n])*"?|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\b(?:true|false|null)\b|[{}[\]:,]|\s+|[^\s{}[\]:,"/]+|\//g;
  let m;
  while ((m = re.exec(text)) !== null) {
    const t = m[0];
    let cls = null;
    if (t.startsWith('//') || t.startsWith('/*')) cls = 'tok-comment';
    else if (t.startsWith('"')) {
      const rest = text.slice(re.lastIndex);
      cls = /^\s*:/.test(rest) ? 'tok-key' : /\{[a-z_]+\}/.test(t) ? 'tok-ph' : 'tok-string';
    } else if (/^-?\d/.test(t)) cls = 'tok-number';
    else if (t === 'true' || t === 'false' || t === 'null') cls = 'tok-literal';
    else if (/^[{}[\]:,]$/.test(t)) cls = 'tok-punct';
    out.push([cls, t]);
  }
  return out;
}

/** Splits YAML text into [class, text] tokens, line by line. */
export function yamlTokens(text) {
  const out = [];
  for (const line of text.split(/(\n)/)) {
    if (line === '\n') {
      out.push([null, line]);
      continue;
    }
    const key = /^(\s*(?:-\s+)?)([^\s#'"{[][^:#]*?|'[^']*'|"[^"]*")(:)(?=\s|$)/.exec(line);
    let rest = line;
    if (key) {
      out.push([null, key[1]], ['tok-key', key[2]], ['tok-punct', key[3]]);
      rest = line.slice(key[0].length);
    } else {
      const dash = /^(\s*)(-)(?=\s|$)/.exec(line);
      if (dash) {
        out.push([null, dash[1]], ['tok-punct', dash[2]]);
        rest = line.slice(dash[0].length);
      }
    }
    const re = /(^|\s)#.*$|\{\{[^}\n]*\}\}|\$\{[A-Za-z_][A-Za-z0-9_]*\}|'(?:''|[^'])*'?|"(?:\\.|[^"\\])*"?|\s+|[^\s'"#{$]+|./g;
    let m;
    while ((m = re.exec(rest)) !== null) {
      const t = m[0];
      let cls = null;
      if (m[1] !== undefined) cls = 'tok-comment';
      else if (t.startsWith('{{') || t.startsWith('${')) cls = 'tok-ph';
      else if (t.startsWith("'") || t.startsWith('"')) cls = /\{\{|\$\{/.test(t) ? 'tok-ph' : 'tok-string';
      else if (/^-?\d+(\.\d+)?$/.test(t)) cls = 'tok-number';
      else if (/^(true|false|null|~)$/.test(t)) cls = 'tok-literal';
      out.push([cls, t]);
    }
  }
  return out;
}

/**
 * An editor inside `container`: `{textarea, value (get/set), setLanguage,
 * onInput(fn), focus()}`. `label` names the text area for assistive tech.
 */
export function createEditor(container, { label, language = 'json' } = {}) {
  const gutter = h('div', { class: 'code-gutter', 'aria-hidden': 'true' });
  const code = h('code');
  const layer = h('pre', { class: 'code-layer', 'aria-hidden': 'true' }, code);
  const textarea = h('textarea', {
    class: 'code-input',
    spellcheck: 'false',
    autocomplete: 'off',
    autocapitalize: 'off',
    wrap: 'off',
    'aria-label': label || 'Source',
  });
  const area = h('div', { class: 'code-area' }, layer, textarea);
  const root = h('div', { class: 'code-editor' }, gutter, area);
  container.replaceChildren(root);
  let lang = language;
  const listeners = [];

  const redraw = () => {
    const text = textarea.value;
    const lines = text.split('\n').length;
    if (gutter.childElementCount !== lines) {
      const numbers = [];
      for (let i = 1; i <= lines; i++) numbers.push(h('div', { text: String(i) }));
      gutter.replaceChildren(...numbers);
    }
    if (text.length > HIGHLIGHT_MAX) {
      code.replaceChildren(document.createTextNode(text));
    } else {
      const tokens = lang === 'yaml' ? yamlTokens(text) : jsonTokens(text);
      code.replaceChildren(...tokens.map(([cls, t]) => (cls ? h('span', { class: cls, text: t }) : document.createTextNode(t))));
    }
    // A final newline needs a line of its own in the layer.
    code.appendChild(document.createTextNode('\n'));
    sync();
  };
  const sync = () => {
    layer.scrollTop = textarea.scrollTop;
    layer.scrollLeft = textarea.scrollLeft;
    gutter.scrollTop = textarea.scrollTop;
  };
  textarea.addEventListener('input', () => {
    redraw();
    for (const fn of listeners) fn();
  });
  textarea.addEventListener('scroll', sync);
  textarea.addEventListener('keydown', (e) => {
    // Tab indents with two spaces instead of leaving the editor; Escape
    // then Tab still moves focus (the browser's default for Shift+Tab too).
    if (e.key === 'Tab' && !e.shiftKey && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.preventDefault();
      const { selectionStart: s, selectionEnd: end } = textarea;
      textarea.setRangeText('  ', s, end, 'end');
      textarea.dispatchEvent(new Event('input'));
    }
  });
  redraw();
  return {
    textarea,
    get value() {
      return textarea.value;
    },
    set value(text) {
      textarea.value = text;
      textarea.scrollTop = 0;
      redraw();
    },
    setLanguage(next) {
      lang = next;
      redraw();
    },
    onInput(fn) {
      listeners.push(fn);
    },
    focus() {
      textarea.focus();
    },
  };
}
