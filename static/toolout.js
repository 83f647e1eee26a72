// Reads the structure of a tool result's text, for display only. Process
// tools (the real worker's and the built-in worker's run_command) write
// `[[name]]: value` field lines, a blank line, then one block per stream:
//
//   name (N bytes):          N bytes of output follow
//   name (truncated, first N bytes):
//   name: (empty)
//   name: (empty, truncated)
//
// with a blank line between blocks. A block's body is taken by its byte
// count when the text agrees with it, so output that itself looks like a
// block header stays inside its block; otherwise the body runs to a blank
// line that precedes a header. Text in neither form is kept verbatim
// (`rest`); text with no fields and no blocks is plain text. Nothing here
// decides success or safety: it only labels what the tool printed. Pure.

/** Longest field or block name that is recognised. */
const NAME_MAX = 64;

/** `{name, value}` for a `[[name]]: value` line, or null. */
function field(line) {
  if (!line.startsWith('[[')) return null;
  const close = line.indexOf(']]:', 2);
  if (close < 3 || close - 2 > NAME_MAX) return null;
  const name = line.slice(2, close);
  if (name.includes('[') || name.includes(']')) return null;
  let value = line.slice(close + 3);
  if (value.startsWith(' ')) value = value.slice(1);
  return { name, value };
}

/** `{name, bytes, truncated, empty}` for a block header line, or null. */
export function blockHeader(line) {
  if (line.length > NAME_MAX + 40 || line === '' || line[0] === ' ') return null;
  if (line.endsWith(': (empty)') || line.endsWith(': (empty, truncated)')) {
    const truncated = line.endsWith('truncated)');
    const name = line.slice(0, line.length - (truncated ? ': (empty, truncated)'.length : ': (empty)'.length));
    return name && !name.includes(':') ? { name, bytes: 0, truncated, empty: true } : null;
  }
  if (!line.endsWith(' bytes):')) return null;
  const open = line.lastIndexOf(' (');
  if (open < 1) return null;
  const name = line.slice(0, open);
  let inner = line.slice(open + 2, line.length - ' bytes):'.length);
  let truncated = false;
  if (inner.startsWith('truncated, first ')) {
    truncated = true;
    inner = inner.slice('truncated, first '.length);
  }
  if (!/^\d{1,12}$/.test(inner) || name.includes(':')) return null;
  return { name, bytes: Number(inner), truncated, empty: false };
}

/** The index in `text` after `bytes` UTF-8 bytes from `start`, or -1. */
function afterBytes(text, start, bytes) {
  let n = 0;
  let i = start;
  while (n < bytes && i < text.length) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      n += 4;
      i++;
    } else n += 3;
    i++;
  }
  return n === bytes ? i : -1;
}

/**
 * Parses a tool result's text: `{kind: 'document', fields, blocks, rest}`
 * (blocks: `{name, text, bytes, truncated, empty}`) or `{kind: 'text', text}`.
 */
export function parseToolOutput(raw) {
  const text = typeof raw === 'string' ? raw : '';
  const fields = [];
  const blocks = [];
  const rest = [];
  let i = 0;
  const n = text.length;
  const lineAt = (p) => {
    const e = text.indexOf('\n', p);
    return e < 0 ? [text.slice(p), n] : [text.slice(p, e), e + 1];
  };
  while (i < n) {
    const [line, next] = lineAt(i);
    const f = field(line);
    if (!f) break;
    fields.push(f);
    i = next;
  }
  while (i < n) {
    const [line, next] = lineAt(i);
    if (line === '' || line === '---') {
      i = next;
      continue;
    }
    const head = blockHeader(line);
    if (!head) {
      rest.push(text.slice(i));
      break;
    }
    i = next;
    if (head.empty) {
      blocks.push({ ...head, text: '' });
      continue;
    }
    // By the byte count: the body, then a line break or the end.
    const end = afterBytes(text, i, head.bytes);
    if (end >= 0 && (end === n || text[end] === '\n' || text[end - 1] === '\n')) {
      let body = text.slice(i, end);
      if (body.endsWith('\n')) body = body.slice(0, -1);
      blocks.push({ ...head, text: body });
      i = end < n && text[end] === '\n' && !text.slice(i, end).endsWith('\n') ? end + 1 : end;
      continue;
    }
    // Otherwise up to a blank line followed by a header (or the end).
    let j = i;
    for (;;) {
      const blank = text.indexOf('\n\n', j);
      if (blank < 0) {
        j = n;
        break;
      }
      const [following] = lineAt(blank + 2);
      if (blockHeader(following) || following === '---') {
        j = blank + 1;
        break;
      }
      j = blank + 1;
    }
    let body = text.slice(i, j);
    if (body.endsWith('\n')) body = body.slice(0, -1);
    blocks.push({ ...head, text: body });
    i = j;
  }
  if (!fields.length && !blocks.length) return { kind: 'text', text };
  return { kind: 'document', fields, blocks, rest: rest.join('') };
}

/**
 * The exit status a result reports: from the worker's `extras` (exit_code,
 * signal, timed_out, truncated), else from the output's fields.
 * `{code, signal, timedOut, truncated}` with nulls for what is unknown.
 */
export function exitStatus(result, doc) {
  const x = result && typeof result.extras === 'object' && result.extras ? result.extras : {};
  const get = (name) => {
    if (!doc || doc.kind !== 'document') return null;
    const f = doc.fields.find((v) => v.name === name);
    return f ? f.value.trim() : null;
  };
  const int = (v) => (typeof v === 'number' && Number.isInteger(v) ? v : typeof v === 'string' && /^-?\d{1,10}$/.test(v) ? Number(v) : null);
  const code = int(x.exit_code) ?? int(get('exit_code'));
  const signal = x.signal !== undefined && x.signal !== null ? String(x.signal) : get('signal');
  const timedOut = x.timed_out === true || get('timed_out') === 'true';
  return { code, signal: signal || null, timedOut, truncated: x.truncated === true };
}
