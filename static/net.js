// The network side: the panel token (cookie), JSON API calls with a
// deadline, and the panel WebSocket with reconnect backoff.

export const TOKEN_COOKIE = 'simplex_hub_token';

let memoryToken = null;

export function readTokenCookie() {
  for (const part of document.cookie.split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (name === TOKEN_COOKIE) {
      try {
        return decodeURIComponent(rest.join('='));
      } catch {
        return null;
      }
    }
  }
  return null;
}

/** Remembers the token: cookie `simplex_hub_token`, SameSite=Strict, Path=/. */
export function storeToken(token) {
  memoryToken = token;
  const secure = location.protocol === 'https:' ? '; Secure' : '';
  document.cookie = `${TOKEN_COOKIE}=${encodeURIComponent(token)}; Path=/; SameSite=Strict${secure}`;
}

export function forgetToken() {
  memoryToken = null;
  document.cookie = `${TOKEN_COOKIE}=; Path=/; SameSite=Strict; Max-Age=0`;
}

/**
 * Accepts `?token=` once: stores it in the cookie and strips it from the
 * address bar (history.replaceState), so it is not left in the URL.
 */
export function takeTokenFromUrl() {
  const url = new URL(location.href);
  if (!url.searchParams.has('token')) return false;
  const token = url.searchParams.get('token');
  url.searchParams.delete('token');
  history.replaceState(history.state, '', `${url.pathname}${url.search}${url.hash}`);
  if (token) storeToken(token);
  return Boolean(token);
}

function authHeaders() {
  const token = memoryToken ?? readTokenCookie();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/**
 * A JSON API call. Resolves `{status, ok, body}` (body parsed when JSON);
 * rejects on a network failure or when `timeoutMs` passes.
 */
export async function api(method, path, body, { timeoutMs = 8000 } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const headers = { Accept: 'application/json', ...authHeaders() };
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store', signal: controller.signal };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    let parsed = null;
    const text = await res.text();
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = { error: 'bad_response', message: text.slice(0, 200) };
      }
    }
    return { status: res.status, ok: res.ok, body: parsed };
  } finally {
    clearTimeout(timer);
  }
}

const INITIAL_BACKOFF = 1000;
const MAX_BACKOFF = 30000;
/** A connection that stayed open this long resets the backoff. */
const STABLE_MS = 10000;

/**
 * The panel socket. States: `connecting`, `open`, `waiting` (a reconnect
 * is scheduled; `retryAt` says when), `rejected` (the token was refused;
 * no automatic retry), `stopped`.
 */
export class PanelSocket {
  constructor({ onMessage, onState, checkAuth }) {
    this.onMessage = onMessage;
    this.onState = onState;
    this.checkAuth = checkAuth;
    this.ws = null;
    this.state = 'stopped';
    this.backoff = INITIAL_BACKOFF;
    this.timer = null;
    this.retryAt = 0;
    this.attempt = 0;
    this.openedAt = 0;
  }

  url() {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    return `${scheme}://${location.host}/panel/ws`;
  }

  setState(state, detail) {
    this.state = state;
    this.onState(state, detail);
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.ws) {
      this.ws.onclose = null;
      try {
        this.ws.close();
      } catch {
        /* already closed */
      }
    }
    this.attempt += 1;
    this.setState('connecting');
    let ws;
    try {
      ws = new WebSocket(this.url());
    } catch (err) {
      this.scheduleRetry(String(err));
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.openedAt = Date.now();
      this.setState('open');
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data !== 'string') return;
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (msg && typeof msg === 'object') this.onMessage(msg, ev.data.length);
    };
    ws.onclose = async (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (opened && Date.now() - this.openedAt >= STABLE_MS) this.backoff = INITIAL_BACKOFF;
      if (!opened) {
        // The upgrade failed: a browser does not expose the status, so
        // ask the API whether the token is the reason.
        let refused = false;
        try {
          refused = await this.checkAuth();
        } catch {
          refused = false;
        }
        if (refused) {
          this.setState('rejected');
          return;
        }
      }
      this.scheduleRetry(opened ? `closed (${ev.code})` : 'could not connect');
    };
  }

  scheduleRetry(reason) {
    const delay = this.backoff;
    this.backoff = Math.min(MAX_BACKOFF, this.backoff * 2);
    this.retryAt = Date.now() + delay;
    this.setState('waiting', reason);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  /** Connects now, keeping the current backoff for the next failure. */
  retryNow() {
    if (this.state === 'open' || this.state === 'connecting') return;
    this.connect();
  }

  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify({ v: 1, ...msg }));
    return true;
  }

  isOpen() {
    return Boolean(this.ws && this.ws.readyState === WebSocket.OPEN);
  }
}
