// The composer's skill picker (docs/skills.md): lists the hub's
// predefined skills, and a chosen skill's instruction text is expanded
// into the ordinary message content before it is sent. The documents
// fetched are kept until the operator asks for a refresh, so a skill does
// not change between choosing it and sending. Text is shown with
// textContent only.

import { $, h, setChildren } from './dom.js';
import { api } from './net.js';

export const INPUT_MARKER = '{{input}}';

const skills = {
  /** The list as last fetched: `{skills, errors}`, or null. */
  list: null,
  /** Documents fetched, by id, kept until a refresh. */
  docs: new Map(),
  /** The chosen skill's document, or null. */
  chosen: null,
  onChange: () => {},
};

/**
 * The message text for skill text `skill` and what was typed: the typed
 * text in place of `{{input}}`, else after a blank line (or the skill text
 * alone when nothing was typed).
 */
export function composeMessage(skill, typed) {
  const at = skill.indexOf(INPUT_MARKER);
  if (at >= 0) return skill.slice(0, at) + typed + skill.slice(at + INPUT_MARKER.length);
  return typed.trim() === '' ? skill : `${skill}\n\n${typed}`;
}

/** The chosen skill's document, or null. */
export function chosenSkill() {
  return skills.chosen;
}

/** Forgets the chosen skill (after a send, or on request). */
export function clearSkill() {
  skills.chosen = null;
  renderChip();
  skills.onChange();
}

function renderChip() {
  const chip = $('skill-chip');
  if (!skills.chosen) {
    chip.hidden = true;
    return;
  }
  chip.hidden = false;
  $('skill-chip-text').textContent = `Skill: ${skills.chosen.title} (${skills.chosen.name})`;
}

function matches(s, query) {
  if (!query) return true;
  const q = query.toLowerCase();
  return [s.name, s.title, s.description, ...(s.keywords || [])].some((t) => String(t || '').toLowerCase().includes(q));
}

function renderList() {
  const status = $('skill-status');
  const list = skills.list;
  if (!list) {
    setChildren($('skill-list'));
    return;
  }
  const query = $('skill-search').value.trim();
  const shown = list.skills.filter((s) => matches(s, query));
  status.textContent = list.skills.length ? `${shown.length} of ${list.skills.length} skills` : 'No skills yet: add YAML files to the hub’s skills folder (docs/skills.md).';
  setChildren(
    $('skill-list'),
    shown.map((s) =>
      h(
        'li',
        null,
        h(
          'button',
          { type: 'button', class: 'skill-item', dataset: { id: s.id }, onclick: () => choose(s.id) },
          h('span', { class: 'skill-title', text: s.title }),
          h('span', { class: 'skill-name muted small', text: s.name }),
          s.description ? h('span', { class: 'skill-desc small', text: s.description }) : null,
        ),
      ),
    ),
  );
  const errors = list.errors || [];
  $('skill-errors').hidden = errors.length === 0;
  $('skill-errors-summary').textContent = `${errors.length} skill file${errors.length === 1 ? '' : 's'} could not be read`;
  setChildren(
    $('skill-errors-list'),
    errors.map((e) => h('li', null, h('code', { text: e.id }), ' ', h('span', { text: e.message }))),
  );
}

async function fetchList() {
  $('skill-status').textContent = 'Loading…';
  let res = null;
  try {
    res = await api('GET', '/api/skills');
  } catch {
    res = null;
  }
  if (!res || !res.ok || !res.body) {
    skills.list = { skills: [], errors: [] };
    renderList();
    $('skill-status').textContent = (res && res.body && res.body.message) || 'The skill list could not be read.';
    return;
  }
  skills.list = { skills: res.body.skills || [], errors: res.body.errors || [] };
  renderList();
}

async function choose(id) {
  let doc = skills.docs.get(id);
  if (!doc) {
    let res = null;
    try {
      res = await api('GET', `/api/skills/${encodeURIComponent(id)}`);
    } catch {
      res = null;
    }
    if (!res || !res.ok || !res.body) {
      $('skill-status').textContent = (res && res.body && res.body.message) || 'The skill could not be read.';
      return;
    }
    doc = res.body;
    skills.docs.set(id, doc);
  }
  skills.chosen = doc;
  renderChip();
  closePicker();
  $('message').focus();
  skills.onChange();
}

function openPicker() {
  $('skill-picker').hidden = false;
  $('skills-open').setAttribute('aria-expanded', 'true');
  if (!skills.list) fetchList();
  else renderList();
  $('skill-search').focus();
}

function closePicker() {
  $('skill-picker').hidden = true;
  $('skills-open').setAttribute('aria-expanded', 'false');
}

/** Wires the picker; `onChange` runs when the chosen skill changes. */
export function wireSkills(onChange) {
  skills.onChange = onChange;
  $('skills-open').addEventListener('click', () => ($('skill-picker').hidden ? openPicker() : closePicker()));
  $('skill-close').addEventListener('click', () => {
    closePicker();
    $('skills-open').focus();
  });
  $('skill-search').addEventListener('input', renderList);
  $('skill-search').addEventListener('keydown', (e) => {
    if (e.key === 'Escape') {
      e.preventDefault();
      closePicker();
      $('skills-open').focus();
    }
  });
  $('skill-refresh').addEventListener('click', () => {
    // An explicit refresh: the list and every kept document are fetched again.
    skills.docs.clear();
    fetchList();
  });
  $('skill-clear').addEventListener('click', () => {
    clearSkill();
    $('message').focus();
  });
}
