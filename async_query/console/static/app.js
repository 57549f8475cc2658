// The console's entry: who is calling (or the login form), then the pages.

import { api, ApiError, basicHeader, onUnauthorized } from './api.js';
import { h, clear } from './dom.js';
import { QueryPage } from './query.js';
import { HistoryPage } from './history.js';
import { BrowsePage } from './browse.js';
import { OpsPage } from './ops.js';

const main = document.getElementById('main');
const tabs = document.getElementById('tabs');
const who = document.getElementById('who');

function loginForm(message) {
  clear(tabs);
  clear(who);
  const user = h('input', { id: 'login-user', name: 'username', autocomplete: 'username', required: true });
  const password = h('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const problem = h('p', { id: 'login-error', class: 'error', role: 'alert', hidden: !message }, message || '');
  const form = h('form', { id: 'login', class: 'login' },
    h('h1', {}, 'Sign in'),
    h('label', {}, 'User', user), h('label', {}, 'Password', password),
    h('button', { id: 'login-submit', class: 'primary', type: 'submit' }, 'Sign in'), problem);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    problem.hidden = true;
    try {
      const me = await api('POST', '/session', { headers: { Authorization: basicHeader(user.value, password.value) }, quiet: true });
      password.value = '';
      start(me);
    } catch (error) {
      problem.hidden = false;
      problem.textContent = error.status === 401 ? 'The user or password was not accepted.' : (error.details || error.message);
    }
  });
  clear(main, form);
  user.focus();
}

async function start(me) {
  const { datasources } = await api('GET', '/datasources');
  const pages = {};
  const show = (name) => {
    for (const [key, page] of Object.entries(pages)) {
      page.root.hidden = key !== name;
      if (page.shown) page.shown(key === name);
    }
    for (const tab of tabs.children) tab.setAttribute('aria-current', tab.dataset.page === name ? 'page' : 'false');
    if (name === 'history') pages.history.refresh();
    if (name === 'browse' && !pages.browse.loaded) { pages.browse.loaded = true; pages.browse.refresh(); }
    if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  };
  pages.query = new QueryPage(me, datasources);
  pages.history = new HistoryPage(me, pages.query, show);
  pages.browse = new BrowsePage(me, datasources, pages.query, show);
  if (me.admin) pages.ops = new OpsPage();
  const titles = { query: 'Query', history: 'History', browse: 'Catalog', ops: 'Operators' };
  clear(tabs, Object.keys(pages).map((name) => {
    const tab = h('button', { id: `tab-${name}`, class: 'tab', onclick: () => show(name) }, titles[name]);
    tab.dataset.page = name;
    return tab;
  }));
  const logout = me.auth === 'none' ? null : h('button', { id: 'logout', onclick: async () => {
    try { await api('DELETE', '/session', { quiet: true }); } finally { loginForm(); }
  } }, 'Sign out');
  clear(who, h('span', { id: 'user-name' }, me.user), me.admin ? h('span', { class: 'badge' }, 'admin') : '', logout);
  clear(main, Object.values(pages).map((page) => page.root));
  if (!datasources.length) pages.query.showError('No datasource you may query: ask an admin for a role in a datasource\'s allowedRoles.');
  const wanted = location.hash.slice(1);
  show(pages[wanted] ? wanted : 'query');
  document.body.dataset.ready = 'true';
  if (!pages[wanted] || wanted === 'query') pages.query.editor.input.focus();
}

async function boot() {
  onUnauthorized(() => loginForm('Your session ended: sign in again.'));
  try {
    await start(await api("GET", "/me", { quiet: true }));
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) loginForm();
    else clear(main, h('p', { class: 'error' }, error.details || error.message));
  }
}

boot();
