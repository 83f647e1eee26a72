// A Markdown renderer that builds DOM nodes (no HTML is ever parsed): ATX
// and setext headings, paragraphs, block quotes, nested lists with GFM task
// items, GFM tables, fenced code with a language label, highlighting and a
// copy button, indented code, rules; inline code, strong, emphasis,
// strikethrough, links and autolinks. Only http(s) links become <a>
// elements (opened in a new tab, rel="noopener noreferrer"); any other
// target is shown as text. Images are never loaded: they are shown as
// their text and address. Raw HTML stays literal text.
//
// Bounded on hostile input: every scan is a hand-written pass over the
// text (no backtracking regular expressions), nesting is limited, and a
// document that would need more than MAX_NODES elements is shown as plain
// text instead.

import { h, clip, copyButton } from './dom.js';
import { highlight, languageOf } from './highlight.js';

/** Block nesting (quotes, list items) beyond which text stays literal. */
const MAX_DEPTH = 8;
/** Inline nesting (emphasis in links in strong ...) beyond which it is literal. */
const MAX_INLINE_DEPTH = 6;
/** Elements one document may create before it falls back to plain text. */
export const MAX_NODES = 20000;
/** Table columns at most; a wider "table" stays a paragraph. */
const MAX_COLUMNS = 64;

class TooBig extends Error {}

/** The http(s) address `url` names, or null for anything else. */
export function safeUrl(url) {
  if (typeof url !== 'string' || !/^https?:\/\//i.test(url)) return null;
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
/** Characters at which inline parsing looks closer. */
const SPECIAL_CHARS = '\\\n`*_~[!<hH';

function isSpaceChar(c) {
  return c === undefined || c === ' ' || c === '\t' || c === '\n' || c === '\r';
}
function isAlnum(c) {
  return c !== undefined && /[\p{L}\p{N}]/u.test(c);
}

/** Inline parsing state shared by one document. */
class Ctx {
  constructor(length) {
    this.nodes = 0;
    // Characters that link and address scans may look at in this document
    // (each scan is bounded, and so is their sum: a text full of '[' or
    // "http://" stays linear). Spent, links are no longer recognised.
    this.scans = 4 * length + 65536;
  }
  /** Takes `n` characters of scanning; false once the budget is spent. */
  scan(n) {
    this.scans -= n;
    return this.scans >= 0;
  }
  el(tag, attrs, ...children) {
    if (++this.nodes > MAX_NODES) throw new TooBig();
    return h(tag, attrs, ...children);
  }
}

/**
 * Inline content of `text` as nodes. `fail` memoizes searches that reached
 * the end without a closer (keyed by delimiter), so no closer is searched
 * for twice past the same point: the scan stays near-linear.
 */
function inline(text, ctx, depth = 0, noLinks = false) {
  const nodes = [];
  const n = text.length;
  const fail = new Map();
  let plain = '';
  const flush = () => {
    if (plain) {
      nodes.push(document.createTextNode(plain));
      plain = '';
    }
  };
  const push = (node) => {
    flush();
    nodes.push(node);
  };
  const failed = (key, at) => fail.has(key) && fail.get(key) <= at;
  // Ordinary text is taken up to the next character that may start
  // something (a one-character class: no backtracking).
  const special = /[\\\n`*_~[!<hH]/g;
  let i = 0;
  while (i < n) {
    const c = text[i];
    if (!SPECIAL_CHARS.includes(c)) {
      special.lastIndex = i;
      const m = special.exec(text);
      const next = m ? m.index : n;
      plain += text.slice(i, next);
      i = next;
      continue;
    }
    if (c === '\\' && i + 1 < n) {
      const d = text[i + 1];
      if (d === '\n') {
        push(ctx.el('br'));
        i += 2;
        continue;
      }
      if (PUNCT.includes(d)) {
        plain += d;
        i += 2;
        continue;
      }
    }
    if (c === '\n') {
      // Two trailing spaces before a line break: a hard break.
      if (plain.endsWith('  ')) {
        let end = plain.length;
        while (end > 0 && plain[end - 1] === ' ') end--;
        plain = plain.slice(0, end);
        push(ctx.el('br'));
      } else plain += '\n';
      i++;
      continue;
    }
    if (c === '`') {
      let len = 1;
      while (text[i + len] === '`') len++;
      const key = `\`${len}`;
      let close = -1;
      if (!failed(key, i)) {
        let j = i + len;
        for (;;) {
          const k = text.indexOf('`', j);
          if (k < 0) break;
          let run = 1;
          while (text[k + run] === '`') run++;
          if (run === len) {
            close = k;
            break;
          }
          j = k + run;
        }
        if (close < 0) fail.set(key, i);
      }
      if (close < 0) {
        plain += text.slice(i, i + len);
        i += len;
        continue;
      }
      let code = text.slice(i + len, close).replace(/\n/g, ' ');
      if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ' && code.trim() !== '') code = code.slice(1, -1);
      push(ctx.el('code', { text: code }));
      i = close + len;
      continue;
    }
    if ((c === '*' || c === '_' || c === '~') && depth < MAX_INLINE_DEPTH) {
      let len = 1;
      while (text[i + len] === c) len++;
      const after = text[i + len];
      const before = text[i - 1];
      const opens = !isSpaceChar(after) && (c !== '_' || !isAlnum(before)) && (c !== '~' || len === 2) && len <= 3;
      let close = -1;
      const key = `${c}${len}`;
      if (opens && !failed(key, i)) {
        let j = i + len;
        for (;;) {
          const k = text.indexOf(c, j);
          if (k < 0) break;
          let run = 1;
          while (text[k + run] === c) run++;
          if (run === len && !isSpaceChar(text[k - 1]) && (c !== '_' || !isAlnum(text[k + run]))) {
            close = k;
            break;
          }
          j = k + run;
        }
        if (close < 0) fail.set(key, i);
      }
      if (close < 0) {
        plain += text.slice(i, i + len);
        i += len;
        continue;
      }
      const inner = inline(text.slice(i + len, close), ctx, depth + 1, noLinks);
      let node;
      if (c === '~') node = ctx.el('del', null, inner);
      else if (len === 1) node = ctx.el('em', null, inner);
      else if (len === 2) node = ctx.el('strong', null, inner);
      else node = ctx.el('strong', null, ctx.el('em', null, inner));
      push(node);
      i = close + len;
      continue;
    }
    if ((c === '[' || (c === '!' && text[i + 1] === '[')) && depth < MAX_INLINE_DEPTH) {
      const image = c === '!';
      const start = image ? i + 1 : i;
      const link = noLinks && !image ? null : linkAt(text, start, fail, ctx);
      if (link) {
        const label = inline(link.label, ctx, depth + 1, true);
        if (image) {
          push(ctx.el('span', { class: 'md-image' }, `[image: ${link.label || 'no description'}]`, ctx.el('span', { class: 'md-url', text: ` (${link.url})` })));
        } else {
          const href = safeUrl(link.url);
          if (href) push(ctx.el('a', { href, target: '_blank', rel: 'noopener noreferrer', class: 'md-a' }, label));
          else push(ctx.el('span', { class: 'md-link' }, label, ctx.el('span', { class: 'md-url', text: ` (${link.url} — not opened)` })));
        }
        i = link.end;
        continue;
      }
      plain += text.slice(i, start + 1);
      i = start + 1;
      continue;
    }
    if (c === '<') {
      // <https://…> is a link; anything else (raw HTML) stays text.
      let k = i + 1;
      const stop = Math.min(n, i + 2048);
      while (k < stop && text[k] !== '>' && text[k] !== '<' && !isSpaceChar(text[k])) k++;
      const href = text[k] === '>' && !noLinks ? safeUrl(text.slice(i + 1, k)) : null;
      if (href) {
        push(ctx.el('a', { href, target: '_blank', rel: 'noopener noreferrer', class: 'md-a', text: text.slice(i + 1, k) }));
        i = k + 1;
        continue;
      }
      plain += c;
      i++;
      continue;
    }
    if ((c === 'h' || c === 'H') && !noLinks && !isAlnum(text[i - 1]) && /^https?:\/\//i.test(text.slice(i, i + 8))) {
      // A bare address (GFM autolink): up to white space or '<', without
      // trailing punctuation or an unbalanced ')'.
      let k = i;
      const stop = Math.min(n, i + 2048);
      while (k < stop && !isSpaceChar(text[k]) && text[k] !== '<') k++;
      if (!ctx.scan(k - i)) {
        plain += c;
        i++;
        continue;
      }
      let end = k;
      while (end > i && '?!.,:;*_~\'"'.includes(text[end - 1])) end--;
      let url = text.slice(i, end);
      while (url.endsWith(')') && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
      const href = safeUrl(url);
      if (href && url.length > 8) {
        push(ctx.el('a', { href, target: '_blank', rel: 'noopener noreferrer', class: 'md-a', text: url }));
        i += url.length;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
  return nodes;
}

/**
 * A `[label](url "title")` at `i` (the '['): {label, url, end}, or null.
 * The label runs to the first ']'; the address may hold balanced parentheses.
 */
function linkAt(text, i, fail, ctx) {
  // The first ']' after a '[' is shared by every '[' before it: remember
  // it, so a run of '[' does not search the same stretch again.
  const known = fail.get(']');
  let close;
  if (known && known.from <= i + 1 && (known.at < 0 || known.at >= i + 1)) close = known.at;
  else {
    close = text.indexOf(']', i + 1);
    fail.set(']', { from: i + 1, at: close });
  }
  if (close < 0 || text[close + 1] !== '(') return null;
  const n = text.length;
  let k = close + 2;
  while (text[k] === ' ') k++;
  let url;
  if (text[k] === '<') {
    const gt = scanTo(text, '>', k + 1, 4096);
    if (gt < 0) return null;
    url = text.slice(k + 1, gt);
    k = gt + 1;
  } else {
    const start = k;
    let depth = 0;
    while (k < n && !isSpaceChar(text[k]) && k - start < 4096) {
      if (text[k] === '(') depth++;
      else if (text[k] === ')') {
        if (depth === 0) break;
        depth--;
      }
      k++;
    }
    url = text.slice(start, k);
  }
  if (!ctx.scan(k - close)) return null;
  while (text[k] === ' ') k++;
  if (text[k] === '"' || text[k] === "'") {
    const end = scanTo(text, text[k], k + 1, 1024);
    if (end < 0) return null;
    k = end + 1;
    while (text[k] === ' ') k++;
  }
  if (text[k] !== ')') return null;
  return { label: text.slice(i + 1, close), url, end: k + 1 };
}

/** The index of `ch` within `max` characters from `from` on one line, or -1. */
function scanTo(text, ch, from, max) {
  const stop = Math.min(text.length, from + max);
  for (let j = from; j < stop; j++) {
    if (text[j] === ch) return j;
    if (text[j] === '\n') return -1;
  }
  return -1;
}

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

/** Leading spaces of `line` (a tab counts to the next multiple of 4). */
function indentOf(line) {
  let w = 0;
  for (const c of line) {
    if (c === ' ') w++;
    else if (c === '\t') w += 4 - (w % 4);
    else break;
  }
  return w;
}

/** `line` without its first `cols` columns of indentation. */
function dedent(line, cols) {
  let w = 0;
  let i = 0;
  while (i < line.length && w < cols) {
    if (line[i] === ' ') w++;
    else if (line[i] === '\t') w += 4 - (w % 4);
    else break;
    i++;
  }
  return (w > cols ? ' '.repeat(w - cols) : '') + line.slice(i);
}

function isBlank(line) {
  return line.trim() === '';
}

/** `{char, len, info, indent}` for a fence opening line, or null. */
function fenceOpen(line) {
  const indent = indentOf(line);
  if (indent > 3) return null;
  const s = line.trimStart();
  const ch = s[0];
  if (ch !== '`' && ch !== '~') return null;
  let len = 0;
  while (s[len] === ch) len++;
  if (len < 3) return null;
  const info = s.slice(len).trim();
  if (ch === '`' && info.includes('`')) return null;
  return { char: ch, len, info, indent };
}

function fenceCloses(line, fence) {
  if (indentOf(line) > 3) return false;
  const s = line.trim();
  if (s.length < fence.len) return false;
  for (const c of s) if (c !== fence.char) return false;
  return true;
}

/** `{level, text}` for an ATX heading line, or null. */
function atxHeading(line) {
  if (indentOf(line) > 3) return null;
  const s = line.trimStart();
  let level = 0;
  while (s[level] === '#') level++;
  if (level < 1 || level > 6) return null;
  if (s.length > level && s[level] !== ' ' && s[level] !== '\t') return null;
  let text = s.slice(level).trim();
  // An optional closing run of '#' preceded by a space.
  let end = text.length;
  while (end > 0 && text[end - 1] === '#') end--;
  if (end === 0) text = '';
  else if (end < text.length && (text[end - 1] === ' ' || text[end - 1] === '\t')) text = text.slice(0, end).trimEnd();
  return { level, text };
}

function isRule(line) {
  if (indentOf(line) > 3) return false;
  const s = line.replace(/[ \t]/g, '');
  if (s.length < 3) return false;
  const c = s[0];
  if (c !== '-' && c !== '*' && c !== '_') return false;
  for (const d of s) if (d !== c) return false;
  return true;
}

function isQuote(line) {
  return indentOf(line) <= 3 && line.trimStart().startsWith('>');
}

/** `{ordered, start, marker, indent, content, body}` for a list item line. */
function listItem(line) {
  const indent = indentOf(line);
  const s = line.trimStart();
  let k = 0;
  let ordered = false;
  let start = 1;
  if (s[0] === '-' || s[0] === '*' || s[0] === '+') k = 1;
  else {
    while (k < s.length && k < 9 && s[k] >= '0' && s[k] <= '9') k++;
    if (k === 0 || (s[k] !== '.' && s[k] !== ')')) return null;
    ordered = true;
    start = parseInt(s.slice(0, k), 10);
    k++;
  }
  const marker = s.slice(0, k);
  const rest = s.slice(k);
  if (rest !== '' && rest[0] !== ' ' && rest[0] !== '\t') return null;
  const spaces = indentOf(rest);
  const pad = rest.trim() === '' ? 1 : spaces > 4 ? 1 : spaces;
  return { ordered, start, marker, indent, content: indent + marker.length + pad, body: dedent(rest, pad) };
}

/** Cells of a table row (outer pipes dropped, `\|` kept as '|'). */
function tableCells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') {
      cur += '|';
      i++;
    } else if (s[i] === '|') {
      cells.push(cur.trim());
      cur = '';
    } else cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

/** Column alignments of a delimiter row, or null when it is not one. */
function tableAlign(line) {
  if (!line.includes('-') || indentOf(line) > 3) return null;
  const cells = tableCells(line);
  const out = [];
  for (const c of cells) {
    let s = c;
    const left = s.startsWith(':');
    const right = s.endsWith(':');
    if (left) s = s.slice(1);
    if (right && s.length) s = s.slice(0, -1);
    if (s.length === 0) return null;
    for (const d of s) if (d !== '-') return null;
    out.push(left && right ? 'center' : right ? 'right' : left ? 'left' : null);
  }
  return out;
}

/** Whether `line` starts a block that ends a paragraph. */
function interrupts(line) {
  if (fenceOpen(line) || atxHeading(line) || isRule(line) || isQuote(line)) return true;
  const item = listItem(line);
  return Boolean(item && item.body.trim() !== '' && (!item.ordered || item.start === 1));
}

function codeBlock(ctx, code, info) {
  const word = info ? info.split(/\s/, 1)[0] : '';
  const lang = languageOf(word);
  const codeEl = ctx.el('code');
  codeEl.appendChild(highlight(code, lang));
  ctx.nodes += 2 * Math.min(codeEl.childNodes.length, MAX_NODES);
  if (ctx.nodes > MAX_NODES) throw new TooBig();
  return ctx.el(
    'div',
    { class: 'md-codeblock' },
    ctx.el('div', { class: 'md-code-head' }, ctx.el('span', { class: 'md-lang', text: word || 'text' }), copyButton(() => code, { label: 'Copy', what: `${word || 'text'} code` })),
    ctx.el('pre', { class: 'md-code', dataset: word ? { lang: word } : undefined }, codeEl),
  );
}

function table(ctx, header, align, rows) {
  const cols = header.length;
  const cell = (tag, text, col) => ctx.el(tag, { class: align[col] ? `al-${align[col]}` : null, scope: tag === 'th' ? 'col' : null }, inline(text, ctx));
  const head = ctx.el('tr', null, header.map((t, c) => cell('th', t, c)));
  const body = rows.map((r) => {
    const cells = [];
    for (let c = 0; c < cols; c++) cells.push(cell('td', r[c] ?? '', c));
    return ctx.el('tr', null, cells);
  });
  return ctx.el('div', { class: 'md-table-wrap' }, ctx.el('table', { class: 'md-table' }, ctx.el('thead', null, head), body.length ? ctx.el('tbody', null, body) : null));
}

/** Parses `lines` into block elements appended to `parent`. */
function blocks(lines, parent, ctx, depth) {
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) {
      parent.appendChild(ctx.el('p', null, inline(para.join('\n').trim(), ctx)));
      para = [];
    }
  };
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      flush();
      i++;
      continue;
    }
    const fence = fenceOpen(line);
    if (fence) {
      flush();
      const body = [];
      i++;
      while (i < lines.length && !fenceCloses(lines[i], fence)) body.push(dedent(lines[i++], fence.indent));
      i++;
      parent.appendChild(codeBlock(ctx, body.join('\n'), fence.info));
      continue;
    }
    if (para.length && /^ {0,3}(=+|-+)[ \t]*$/.test(line)) {
      // A setext underline turns the paragraph into a heading.
      const level = line.trim()[0] === '=' ? 1 : 2;
      parent.appendChild(ctx.el(`h${level + 2}`, { class: 'md-h' }, inline(para.join('\n').trim(), ctx)));
      para = [];
      i++;
      continue;
    }
    const heading = atxHeading(line);
    if (heading) {
      flush();
      parent.appendChild(ctx.el(`h${Math.min(6, heading.level + 2)}`, { class: 'md-h' }, inline(heading.text, ctx)));
      i++;
      continue;
    }
    if (isRule(line)) {
      flush();
      parent.appendChild(ctx.el('hr'));
      i++;
      continue;
    }
    if (isQuote(line)) {
      flush();
      const body = [];
      while (i < lines.length && isQuote(lines[i])) {
        const s = lines[i].trimStart().slice(1);
        body.push(s.startsWith(' ') ? s.slice(1) : s);
        i++;
      }
      const quote = ctx.el('blockquote');
      if (depth < MAX_DEPTH) blocks(body, quote, ctx, depth + 1);
      else quote.appendChild(ctx.el('p', { text: body.join('\n') }));
      parent.appendChild(quote);
      continue;
    }
    const item = listItem(line);
    if (item && (para.length === 0 || (item.body.trim() !== '' && (!item.ordered || item.start === 1)))) {
      flush();
      i = list(lines, i, parent, ctx, depth);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length) {
      const align = tableAlign(lines[i + 1]);
      const header = align ? tableCells(line) : null;
      if (header && header.length === align.length && header.length <= MAX_COLUMNS) {
        flush();
        const rows = [];
        i += 2;
        while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|') && !interrupts(lines[i])) rows.push(tableCells(lines[i++]));
        parent.appendChild(table(ctx, header, align, rows));
        continue;
      }
    }
    if (para.length === 0 && indentOf(line) >= 4) {
      const body = [];
      while (i < lines.length && (indentOf(lines[i]) >= 4 || isBlank(lines[i]))) body.push(dedent(lines[i++], 4));
      while (body.length && isBlank(body[body.length - 1])) body.pop();
      parent.appendChild(codeBlock(ctx, body.join('\n'), ''));
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
}

/**
 * A list starting at `lines[start]`; returns the index after it. Items
 * hold the lines indented to their content column (and lazy paragraph
 * continuations), parsed as blocks one level deeper.
 */
function list(lines, start, parent, ctx, depth) {
  const first = listItem(lines[start]);
  const el = ctx.el(first.ordered ? 'ol' : 'ul', { class: 'md-list' });
  if (first.ordered && first.start !== 1) el.setAttribute('start', String(first.start));
  parent.appendChild(el);
  let i = start;
  let loose = false;
  const items = [];
  while (i < lines.length) {
    const item = listItem(lines[i]);
    if (!item || item.ordered !== first.ordered || item.indent > first.indent + 3 || item.marker.slice(-1) !== first.marker.slice(-1)) break;
    const body = [item.body];
    i++;
    let blankBefore = false;
    while (i < lines.length) {
      const line = lines[i];
      if (isBlank(line)) {
        blankBefore = true;
        body.push('');
        i++;
        continue;
      }
      if (indentOf(line) >= item.content) {
        if (blankBefore) loose = loose || !isBlank(body[0]);
        body.push(dedent(line, item.content));
        blankBefore = false;
        i++;
        continue;
      }
      if (!blankBefore && !interrupts(line) && !listItem(line)) {
        // A lazy continuation of the item's paragraph.
        body.push(line.trim());
        i++;
        continue;
      }
      break;
    }
    while (body.length > 1 && isBlank(body[body.length - 1])) body.pop();
    items.push(body);
    if (blankBefore && i < lines.length && listItem(lines[i])) loose = true;
    if (blankBefore && (i >= lines.length || !listItem(lines[i]))) break;
  }
  for (const body of items) {
    const li = ctx.el('li');
    const task = /^\[([ xX])\][ \t]+/.exec(body[0]);
    if (task) {
      li.classList.add('task');
      const box = ctx.el('input', { type: 'checkbox', disabled: true, class: 'task-box', 'aria-label': task[1] === ' ' ? 'not done' : 'done' });
      box.checked = task[1] !== ' ';
      li.appendChild(box);
      body[0] = body[0].slice(task[0].length);
    }
    if (depth < MAX_DEPTH) blocks(body, li, ctx, depth + 1);
    else li.appendChild(document.createTextNode(body.join('\n')));
    if (!loose) {
      // A tight list shows its paragraphs without paragraph spacing.
      for (const p of [...li.children]) {
        if (p.tagName === 'P') p.replaceWith(...p.childNodes);
      }
    }
    el.appendChild(li);
  }
  return i;
}

/**
 * Renders Markdown `text` as a <div class="md">. Above `maxChars` the
 * rest is cut with a visible note; a document needing more than MAX_NODES
 * elements is shown as plain text (with a note) instead.
 */
export function markdown(text, { maxChars = 200000 } = {}) {
  let src = typeof text === 'string' ? text : '';
  let cut = false;
  if (src.length > maxChars) {
    src = clip(src, maxChars);
    cut = true;
  }
  const root = h('div', { class: 'md' });
  const ctx = new Ctx(src.length);
  try {
    blocks(src.split(/\r?\n/), root, ctx, 0);
  } catch (err) {
    if (!(err instanceof TooBig)) throw err;
    const plain = h('div', { class: 'md md-plain' });
    plain.appendChild(h('p', null, h('mark', { class: 'trunc', text: '⟨shown as plain text: too many elements to format⟩' })));
    plain.appendChild(h('pre', { class: 'text', text: src }));
    return plain;
  }
  if (cut) root.appendChild(h('p', null, h('mark', { class: 'trunc', text: `⟨shown up to ${maxChars} characters⟩` })));
  return root;
}
