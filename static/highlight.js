// Syntax highlighting for code blocks and command lines. The scanners are
// hand-written single passes over the text (no backtracking regular
// expressions), so their cost is linear in the input whatever it holds;
// blocks above HIGHLIGHT_MAX characters are left plain. `tokens` is pure
// (text in, [class, text] pairs out); `highlight` turns the pairs into text
// nodes and <span>s. Nothing is ever parsed as HTML.

/** Code longer than this (UTF-16 units) is shown without highlighting. */
export const HIGHLIGHT_MAX = 64 * 1024;

/** Fence info words (lower case) and the scanner each one selects. */
const ALIASES = new Map(
  Object.entries({
    json: 'json', jsonc: 'json', json5: 'json', jsonl: 'json', geojson: 'json',
    yaml: 'yaml', yml: 'yaml',
    sh: 'shell', bash: 'shell', zsh: 'shell', shell: 'shell', console: 'shell', shellsession: 'shell', ksh: 'shell', dash: 'shell',
    rust: 'rust', rs: 'rust',
    python: 'python', py: 'python', python3: 'python', py3: 'python',
    javascript: 'javascript', js: 'javascript', mjs: 'javascript', cjs: 'javascript', jsx: 'javascript', ts: 'javascript', typescript: 'javascript', tsx: 'javascript',
    c: 'c', h: 'c',
    cpp: 'cpp', 'c++': 'cpp', cc: 'cpp', cxx: 'cpp', hpp: 'cpp', hh: 'cpp', hxx: 'cpp', 'h++': 'cpp',
    diff: 'diff', patch: 'diff', udiff: 'diff',
  }),
);

/** The scanner for a fence's language word, or null (shown plain). */
export function languageOf(word) {
  if (typeof word !== 'string') return null;
  return ALIASES.get(word.trim().toLowerCase()) || null;
}

const words = (s) => new Set(s.split(' '));

const C_KEYWORDS = 'auto break case const continue default do else enum extern for goto if inline register restrict return sizeof static struct switch typedef union volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Noreturn _Static_assert _Thread_local';
const C_TYPES = 'char double float int long short signed unsigned void bool size_t ssize_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t uintptr_t intptr_t ptrdiff_t FILE';

const SPECS = {
  rust: {
    line: '//', block: true, quotes: '"', multiline: true, rust: true, capTypes: true,
    keywords: words('as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait type union unsafe use where while yield'),
    literals: words('true false None Some Ok Err'),
    types: words('bool char str u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize f32 f64 String Vec Option Result Box'),
  },
  python: {
    line: '#', quotes: '"\'', triple: true, decorators: true, prefixes: true,
    keywords: words('and as assert async await break class continue def del elif else except finally for from global if import in is lambda match case nonlocal not or pass raise return try while with yield'),
    literals: words('True False None'),
    types: words('int float str bytes bool list dict set tuple object type self cls'),
  },
  javascript: {
    line: '//', block: true, quotes: '"\'`', multilineQuote: '`', capTypes: true,
    keywords: words('async await break case catch class const continue debugger default delete do else export extends finally for from function if import in instanceof let new of return static super switch this throw try typeof var void while with yield interface type enum implements private protected public readonly declare namespace abstract as'),
    literals: words('true false null undefined NaN Infinity'),
    types: words('string number boolean any unknown never object bigint symbol'),
  },
  c: {
    line: '//', block: true, quotes: '"\'', preproc: true,
    keywords: words(C_KEYWORDS),
    literals: words('NULL true false'),
    types: words(C_TYPES),
  },
  cpp: {
    line: '//', block: true, quotes: '"\'', preproc: true, capTypes: true,
    keywords: words(`${C_KEYWORDS} alignas alignof and asm catch class concept consteval constexpr constinit co_await co_return co_yield decltype delete explicit export friend mutable namespace new noexcept not operator or override private protected public requires static_assert static_cast dynamic_cast reinterpret_cast const_cast template this thread_local throw try typeid typename using virtual final`),
    literals: words('nullptr NULL true false'),
    types: words(`${C_TYPES} std string vector map unordered_map set optional unique_ptr shared_ptr auto wchar_t char8_t char16_t char32_t`),
  },
};

const SHELL_KEYWORDS = words('if then else elif fi for while until do done case esac in function select time');
/** Keywords after which a command name may stand. */
const SHELL_LEADS = words('if then else elif while until do time');

function isDigit(c) {
  return c >= '0' && c <= '9';
}
function isIdentStart(c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_' || c === '$' || c > '\x7f';
}
function isIdent(c) {
  return isIdentStart(c) || isDigit(c);
}
function isSpace(c) {
  return c === ' ' || c === '\t' || c === '\r' || c === '\f' || c === '\v';
}

/**
 * Collects tokens, merging neighbouring unclassified text so the number of
 * nodes stays proportional to the number of highlighted tokens.
 */
class Out {
  constructor(src) {
    this.src = src;
    this.list = [];
    this.plain = 0;
  }
  /** Classifies src[start, end) as `cls`; text before `start` is plain. */
  add(cls, start, end) {
    if (end <= start) return;
    if (start > this.plain) this.list.push([null, this.src.slice(this.plain, start)]);
    this.list.push([cls, this.src.slice(start, end)]);
    this.plain = end;
  }
  done() {
    if (this.src.length > this.plain) this.list.push([null, this.src.slice(this.plain)]);
    return this.list;
  }
}

/** The end of a quoted string starting at `i` (the quote), escapes honoured. */
function stringEnd(src, i, quote, { escapes = true, multiline = false } = {}) {
  const n = src.length;
  let j = i + 1;
  while (j < n) {
    const c = src[j];
    if (escapes && c === '\\') j += 2;
    else if (c === quote) return j + 1;
    else if (c === '\n' && !multiline) return j;
    else j++;
  }
  return n;
}

function lineEnd(src, i) {
  const j = src.indexOf('\n', i);
  return j < 0 ? src.length : j;
}

/** The index of `ch` in src[from, min(from + max, end of line)), or -1. */
function findNear(src, ch, from, max) {
  const stop = Math.min(src.length, from + max);
  for (let j = from; j < stop; j++) {
    if (src[j] === ch) return j;
    if (src[j] === '\n') return -1;
  }
  return -1;
}

function numberEnd(src, i) {
  const n = src.length;
  let j = i;
  while (j < n) {
    const c = src[j];
    if (isIdent(c) && c !== '$') j++;
    else if (c === '.' && isDigit(src[j + 1] || '')) j++;
    else if ((c === '+' || c === '-') && (src[j - 1] === 'e' || src[j - 1] === 'E') && !/^0[xX]/.test(src.slice(i, i + 2)) && isDigit(src[j + 1] || '')) j++;
    else break;
  }
  return j;
}

/** Rust, Python, JavaScript, C and C++: one configurable scanner. */
function scanCode(src, spec) {
  const out = new Out(src);
  const n = src.length;
  let i = 0;
  let lineStart = true;
  while (i < n) {
    const c = src[i];
    if (c === '\n') {
      i++;
      lineStart = true;
      continue;
    }
    if (isSpace(c)) {
      i++;
      continue;
    }
    const atLineStart = lineStart;
    lineStart = false;
    if (spec.line && src.startsWith(spec.line, i)) {
      const end = lineEnd(src, i);
      out.add('hl-com', i, end);
      i = end;
      continue;
    }
    if (spec.block && c === '/' && src[i + 1] === '*') {
      const close = src.indexOf('*/', i + 2);
      const end = close < 0 ? n : close + 2;
      out.add('hl-com', i, end);
      i = end;
      continue;
    }
    if (spec.preproc && atLineStart && c === '#') {
      const end = lineEnd(src, i);
      out.add('hl-meta', i, end);
      i = end;
      continue;
    }
    if (spec.rust && c === '#' && (src[i + 1] === '[' || (src[i + 1] === '!' && src[i + 2] === '['))) {
      const close = findNear(src, ']', i, 512);
      const end = close < 0 ? lineEnd(src, i) : close + 1;
      out.add('hl-meta', i, end);
      i = end;
      continue;
    }
    if (spec.decorators && c === '@' && isIdentStart(src[i + 1] || '')) {
      let j = i + 1;
      while (j < n && (isIdent(src[j]) || src[j] === '.')) j++;
      out.add('hl-meta', i, j);
      i = j;
      continue;
    }
    if (spec.rust && c === "'") {
      // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
      if (src[i + 1] === '\\') {
        const close = findNear(src, "'", i + 2, 12);
        const end = close < 0 ? i + 2 : close + 1;
        out.add('hl-str', i, end);
        i = end;
        continue;
      }
      const step = src.codePointAt(i + 1) > 0xffff ? 2 : 1;
      if (i + 1 < n && src[i + 1 + step] === "'") {
        out.add('hl-str', i, i + 2 + step);
        i += 2 + step;
        continue;
      }
      let j = i + 1;
      while (j < n && isIdent(src[j])) j++;
      out.add('hl-meta', i, j > i + 1 ? j : i + 1);
      i = j > i + 1 ? j : i + 1;
      continue;
    }
    if (spec.quotes.includes(c)) {
      let end;
      if (spec.triple && src.startsWith(c + c + c, i)) {
        const close = src.indexOf(c + c + c, i + 3);
        end = close < 0 ? n : close + 3;
      } else {
        end = stringEnd(src, i, c, { multiline: spec.multiline || c === spec.multilineQuote });
      }
      out.add('hl-str', i, end);
      i = end;
      continue;
    }
    if (isDigit(c) || (c === '.' && isDigit(src[i + 1] || ''))) {
      const end = numberEnd(src, i);
      out.add('hl-num', i, end);
      i = end;
      continue;
    }
    if (isIdentStart(c)) {
      let j = i + 1;
      while (j < n && isIdent(src[j])) j++;
      const word = src.slice(i, j);
      const next = src[j] || '';
      // String prefixes: r"…", b'…', f"…" (Python), r#"…"#, b"…" (Rust).
      if (spec.prefixes && word.length <= 2 && /^[rRbBuUfF]+$/.test(word) && (next === '"' || next === "'")) {
        const q = next;
        let end;
        if (src.startsWith(q + q + q, j)) {
          const close = src.indexOf(q + q + q, j + 3);
          end = close < 0 ? n : close + 3;
        } else end = stringEnd(src, j, q, { escapes: !/[rR]/.test(word) });
        out.add('hl-str', i, end);
        i = end;
        continue;
      }
      if (spec.rust && (word === 'r' || word === 'br') && (next === '#' || next === '"')) {
        let k = j;
        while (k < n && src[k] === '#') k++;
        if (src[k] === '"') {
          const close = src.indexOf(`"${'#'.repeat(k - j)}`, k + 1);
          const end = close < 0 ? n : close + 1 + (k - j);
          out.add('hl-str', i, end);
          i = end;
          continue;
        }
      }
      if (spec.rust && word === 'b' && next === "'") {
        const end = stringEnd(src, j, "'");
        out.add('hl-str', i, end);
        i = end;
        continue;
      }
      let cls = null;
      if (spec.keywords.has(word)) cls = 'hl-kw';
      else if (spec.literals.has(word)) cls = 'hl-lit';
      else if (spec.types.has(word) || (spec.capTypes && word[0] >= 'A' && word[0] <= 'Z' && word.length > 1)) cls = 'hl-type';
      else if (spec.rust && next === '!' && src[j + 1] !== '=') {
        out.add('hl-fn', i, j + 1);
        i = j + 1;
        continue;
      } else if (next === '(') cls = 'hl-fn';
      if (cls) out.add(cls, i, j);
      i = j;
      continue;
    }
    i++;
  }
  return out.done();
}

/** Characters that end a shell word. */
function shellBreak(c) {
  return isSpace(c) || c === '\n' || c === ';' || c === '|' || c === '&' || c === '(' || c === ')' || c === '<' || c === '>' || c === '"' || c === "'" || c === '`' || c === '$';
}

/** The end of a `$…` expansion starting at `i`, or i when there is none. */
function shellVarEnd(src, i) {
  const n = src.length;
  const c = src[i + 1] || '';
  if (c === '{') {
    const close = findNear(src, '}', i + 2, 512);
    return close < 0 ? lineEnd(src, i) : close + 1;
  }
  if ('?#@*!$-'.includes(c) || isDigit(c)) return i + 2;
  if (isIdentStart(c) && c !== '$') {
    let j = i + 1;
    while (j < n && isIdent(src[j]) && src[j] !== '$') j++;
    return j;
  }
  return i;
}

/** Shell: comments, quotes, expansions, keywords, the command word, options. */
function scanShell(src) {
  const out = new Out(src);
  const n = src.length;
  let i = 0;
  // At a position where a command name may stand.
  let command = true;
  while (i < n) {
    const c = src[i];
    if (c === '&' && (src[i - 1] === '>' || src[i - 1] === '<')) {
      // A redirection (>&2, <&0): the descriptor is not a command.
      let j = i + 1;
      while (j < n && (isDigit(src[j]) || src[j] === '-')) j++;
      out.add('hl-meta', i - 1, j);
      i = j;
      continue;
    }
    if (c === '\n' || c === ';' || c === '|' || c === '&' || c === '(' || c === ')') {
      // A separator or an opening parenthesis starts a new command.
      command = c !== ')';
      i++;
      continue;
    }
    if (isSpace(c) || c === '<' || c === '>' || c === '\\') {
      i += c === '\\' ? 2 : 1;
      continue;
    }
    if (c === '#') {
      const end = lineEnd(src, i);
      out.add('hl-com', i, end);
      i = end;
      continue;
    }
    if (c === "'") {
      const end = stringEnd(src, i, "'", { escapes: false, multiline: true });
      out.add('hl-str', i, end);
      i = end;
      command = false;
      continue;
    }
    if (c === '"' || c === '`') {
      const end = stringEnd(src, i, c, { multiline: true });
      out.add('hl-str', i, end);
      i = end;
      command = false;
      continue;
    }
    if (c === '$') {
      if (src[i + 1] === '(') {
        out.add('hl-var', i, i + 2);
        i += 2;
        command = true;
        continue;
      }
      const end = shellVarEnd(src, i);
      if (end > i) {
        out.add('hl-var', i, end);
        i = end;
        command = false;
        continue;
      }
      i++;
      continue;
    }
    // A word: up to the next break character.
    let j = i;
    while (j < n && !shellBreak(src[j])) {
      if (src[j] === '\\') j++;
      j++;
    }
    if (j > n) j = n;
    const word = src.slice(i, j);
    if (SHELL_KEYWORDS.has(word)) {
      out.add('hl-kw', i, j);
      command = SHELL_LEADS.has(word);
    } else if (command && /^[A-Za-z_][A-Za-z0-9_]*=/.test(word)) {
      const eq = word.indexOf('=');
      out.add('hl-var', i, i + eq);
    } else if (command) {
      out.add('hl-fn', i, j);
      command = false;
    } else if (word[0] === '-' && word.length > 1) {
      out.add('hl-meta', i, j);
    } else if (/^[0-9]+$/.test(word)) {
      out.add('hl-num', i, j);
    }
    i = j > i ? j : i + 1;
  }
  return out.done();
}

/** JSON (with comments tolerated): keys, strings, numbers, literals. */
function scanJson(src) {
  const out = new Out(src);
  const n = src.length;
  let i = 0;
  while (i < n) {
    const c = src[i];
    if (c === '"') {
      const end = stringEnd(src, i, '"');
      let k = end;
      while (k < n && (isSpace(src[k]) || src[k] === '\n')) k++;
      out.add(src[k] === ':' ? 'hl-key' : 'hl-str', i, end);
      i = end;
      continue;
    }
    if (c === '/' && src[i + 1] === '/') {
      const end = lineEnd(src, i);
      out.add('hl-com', i, end);
      i = end;
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const close = src.indexOf('*/', i + 2);
      const end = close < 0 ? n : close + 2;
      out.add('hl-com', i, end);
      i = end;
      continue;
    }
    if (isDigit(c) || (c === '-' && isDigit(src[i + 1] || ''))) {
      const end = numberEnd(src, i + 1);
      out.add('hl-num', i, end);
      i = end;
      continue;
    }
    if (isIdentStart(c)) {
      let j = i + 1;
      while (j < n && isIdent(src[j])) j++;
      const word = src.slice(i, j);
      if (word === 'true' || word === 'false' || word === 'null') out.add('hl-lit', i, j);
      i = j;
      continue;
    }
    i++;
  }
  return out.done();
}

const YAML_LITERALS = words('true false null ~ yes no on off True False Null TRUE FALSE NULL Yes No');

/** Classifies one YAML value (the text after a key or a dash) in place. */
function yamlValue(out, src, i, end) {
  while (i < end) {
    const c = src[i];
    if (isSpace(c)) {
      i++;
      continue;
    }
    if (c === '#' && (i === 0 || isSpace(src[i - 1]))) {
      out.add('hl-com', i, end);
      return;
    }
    if (c === '"' || c === "'") {
      const stop = stringEnd(src, i, c, { escapes: c === '"' });
      const e = Math.min(stop, end);
      out.add('hl-str', i, e);
      i = e;
      continue;
    }
    if ((c === '&' || c === '*' || c === '!') && i + 1 < end && !isSpace(src[i + 1])) {
      let j = i + 1;
      while (j < end && !isSpace(src[j])) j++;
      out.add('hl-meta', i, j);
      i = j;
      continue;
    }
    // A plain scalar runs to a comment or the end of the line.
    let j = i;
    while (j < end && !(src[j] === '#' && isSpace(src[j - 1]))) j++;
    let k = j;
    while (k > i && isSpace(src[k - 1])) k--;
    const word = src.slice(i, k);
    if (YAML_LITERALS.has(word)) out.add('hl-lit', i, k);
    else if (/^[-+]?(\d[\d_]*(\.\d*)?([eE][-+]?\d+)?|\.\d+|0x[0-9a-fA-F]+|\.inf|\.nan)$/.test(word) && word.length < 64) out.add('hl-num', i, k);
    else if (word === '|' || word === '>' || /^[|>][-+0-9]{0,3}$/.test(word)) out.add('hl-punct', i, k);
    i = j;
  }
}

/** YAML, line by line: keys, list dashes, comments, scalars, block text. */
function scanYaml(src) {
  const out = new Out(src);
  const n = src.length;
  let i = 0;
  // Inside a block scalar (`key: |`): lines indented deeper than this.
  let blockIndent = -1;
  while (i < n) {
    const end = lineEnd(src, i);
    let p = i;
    while (p < end && src[p] === ' ') p++;
    const indent = p - i;
    if (blockIndent >= 0) {
      if (p === end || indent > blockIndent) {
        out.add('hl-str', p, end);
        i = end + 1;
        continue;
      }
      blockIndent = -1;
    }
    if ((src.startsWith('---', p) || src.startsWith('...', p)) && p === i && (p + 3 === end || isSpace(src[p + 3]))) {
      out.add('hl-meta', p, p + 3);
      yamlValue(out, src, p + 3, end);
      i = end + 1;
      continue;
    }
    if (src[p] === '#') {
      out.add('hl-com', p, end);
      i = end + 1;
      continue;
    }
    while (src[p] === '-' && (p + 1 === end || src[p + 1] === ' ')) {
      out.add('hl-punct', p, p + 1);
      p += 1;
      while (p < end && src[p] === ' ') p++;
    }
    // A key: quoted, or plain up to the first ": " (or a final ':').
    let keyEnd = -1;
    if (src[p] === '"' || src[p] === "'") {
      const close = stringEnd(src, p, src[p], { escapes: src[p] === '"' });
      if (close <= end && src[close] === ':' && (close + 1 === end || isSpace(src[close + 1]))) keyEnd = close;
    } else if (p < end && src[p] !== '#' && src[p] !== '{' && src[p] !== '[') {
      let k = p;
      while (k < end && !(src[k] === ':' && (k + 1 === end || isSpace(src[k + 1]))) && !(src[k] === '#' && isSpace(src[k - 1]))) k++;
      if (k < end && src[k] === ':') keyEnd = k;
    }
    let v = p;
    if (keyEnd > p) {
      out.add('hl-key', p, keyEnd);
      out.add('hl-punct', keyEnd, keyEnd + 1);
      v = keyEnd + 1;
    }
    yamlValue(out, src, v, end);
    let last = end;
    while (last > v && isSpace(src[last - 1])) last--;
    const tail = src.slice(Math.max(v, last - 4), last).trim();
    if (/(^|\s)[|>][-+0-9]{0,3}$/.test(` ${tail}`)) blockIndent = indent;
    i = end + 1;
  }
  return out.done();
}

/** Unified diff: file headers, hunk headers, added and removed lines. */
function scanDiff(src) {
  const out = new Out(src);
  const n = src.length;
  let i = 0;
  while (i < n) {
    const end = lineEnd(src, i);
    const c = src[i];
    let cls = null;
    if (src.startsWith('+++', i) || src.startsWith('---', i) || src.startsWith('diff ', i) || src.startsWith('index ', i)) cls = 'hl-meta';
    else if (src.startsWith('@@', i)) cls = 'hl-hunk';
    else if (c === '+') cls = 'hl-add';
    else if (c === '-') cls = 'hl-del';
    if (cls) out.add(cls, i, end);
    i = end + 1;
  }
  return out.done();
}

/**
 * `code` as [class, text] pairs for `lang` (a name `languageOf` gives);
 * one plain pair for an unknown language or a text above HIGHLIGHT_MAX.
 * The texts concatenate to `code` exactly.
 */
export function tokens(code, lang) {
  const src = typeof code === 'string' ? code : '';
  if (src.length > HIGHLIGHT_MAX || !lang) return src ? [[null, src]] : [];
  switch (lang) {
    case 'json':
      return scanJson(src);
    case 'yaml':
      return scanYaml(src);
    case 'shell':
      return scanShell(src);
    case 'diff':
      return scanDiff(src);
    default:
      return SPECS[lang] ? scanCode(src, SPECS[lang]) : [[null, src]];
  }
}

/** `code` highlighted as `lang`: a fragment of text nodes and <span>s. */
export function highlight(code, lang) {
  const frag = document.createDocumentFragment();
  for (const [cls, text] of tokens(code, lang)) {
    if (cls) {
      const span = document.createElement('span');
      span.className = cls;
      span.textContent = text;
      frag.appendChild(span);
    } else {
      frag.appendChild(document.createTextNode(text));
    }
  }
  return frag;
}
