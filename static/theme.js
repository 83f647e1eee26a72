// The colour theme: light, dark, or the system's preference (the default).
// The choice is kept in localStorage. The dark colours are one style sheet
// (dark.css); choosing a theme only changes that sheet's media query, so
// no rule is duplicated and nothing is styled inline (the CSP forbids it).

export const THEMES = ['light', 'dark', 'system'];
const KEY = 'simplex-hub:theme';
const MEDIA = { light: 'not all', dark: 'all', system: '(prefers-color-scheme: dark)' };
const LABEL = { light: 'Light', dark: 'Dark', system: 'System' };
const system = window.matchMedia('(prefers-color-scheme: dark)');

let current = 'system';
const listeners = new Set();

function stored() {
  try {
    const v = localStorage.getItem(KEY);
    return THEMES.includes(v) ? v : 'system';
  } catch {
    return 'system';
  }
}

/** The stored choice: `light`, `dark` or `system`. */
export function theme() {
  return current;
}

/** What is shown now: `light` or `dark` (the system's answer for `system`). */
export function effectiveTheme() {
  if (current === 'system') return system.matches ? 'dark' : 'light';
  return current;
}

export function themeLabel(t) {
  return LABEL[t] || t;
}

function apply() {
  const sheet = document.getElementById('theme-dark');
  if (sheet) sheet.media = MEDIA[current];
  document.documentElement.dataset.theme = current;
  const button = document.getElementById('theme-toggle');
  if (button) {
    const next = THEMES[(THEMES.indexOf(current) + 1) % THEMES.length];
    button.textContent = `Theme: ${LABEL[current]}`;
    button.title = `Colour theme: ${LABEL[current].toLowerCase()}${current === 'system' ? ` (now ${effectiveTheme()})` : ''}. Press for ${LABEL[next].toLowerCase()}.`;
  }
  for (const fn of listeners) fn(current);
}

/** Stores and applies a theme. */
export function setTheme(t) {
  if (!THEMES.includes(t)) return;
  current = t;
  try {
    if (t === 'system') localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, t);
  } catch {
    /* private mode: the choice lasts for this page only */
  }
  apply();
}

/** Light → dark → system → light. */
export function cycleTheme() {
  setTheme(THEMES[(THEMES.indexOf(current) + 1) % THEMES.length]);
}

/** Applies the stored theme and binds the header button; `onChange` after each change. */
export function wireTheme(onChange) {
  current = stored();
  if (onChange) listeners.add(onChange);
  document.getElementById('theme-toggle')?.addEventListener('click', cycleTheme);
  system.addEventListener('change', apply);
  // Another tab changed it.
  window.addEventListener('storage', (e) => {
    if (e.key === KEY || e.key === null) {
      current = stored();
      apply();
    }
  });
  apply();
}
