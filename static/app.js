// Minimal panel shell: reads hub metadata, then lists sessions through the
// JSON API. The full operator panel replaces this file. Text is always set
// with textContent, never parsed as HTML.

const statusEl = document.getElementById('status');
const listEl = document.getElementById('sessions');

async function main() {
  const meta = await fetch('/api/meta').then((r) => r.json());
  statusEl.textContent = `${meta.protocol.name} v${meta.protocol.version}`;
  const res = await fetch('/api/sessions', { credentials: 'same-origin' });
  if (res.status === 401) {
    statusEl.textContent = 'token required: open the URL with ?token=…';
    return;
  }
  const body = await res.json();
  listEl.replaceChildren(
    ...body.sessions.map((s) => {
      const li = document.createElement('li');
      li.textContent = s.session_id;
      return li;
    }),
  );
}

main().catch((err) => {
  statusEl.textContent = `error: ${err.message}`;
});
