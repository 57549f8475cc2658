// The history page: the caller's queries (everyone's for an admin), newest first, searchable,
// each one opened or run again in the query page.

import { api } from './api.js';
import { h, clear, when, statusBadge, table } from './dom.js';

export class HistoryPage {
  constructor(me, queryPage, show) {
    this.me = me;
    this.queryPage = queryPage;
    this.show = show;
    this.search = h('input', { id: 'history-search', type: 'search', placeholder: 'Search text, datasource, status…', 'aria-label': 'Search the history' });
    let timer = null;
    this.search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => this.refresh(), 250); });
    this.list = h('div', { id: 'history-list', class: 'scroll' });
    this.root = h('section', { id: 'page-history', class: 'page', hidden: true },
      h('div', { class: 'toolbar' }, this.search, h('button', { id: 'history-refresh', onclick: () => this.refresh() }, 'Refresh'),
        h('span', { class: 'muted' }, me.admin ? 'Everyone\'s queries (admin)' : 'Your queries')),
      this.list);
  }

  async refresh() {
    let reply;
    try {
      reply = await api('GET', `/history?size=100&q=${encodeURIComponent(this.search.value)}`);
    } catch (error) {
      clear(this.list, h('div', { class: 'error' }, error.details || error.message));
      return;
    }
    const columns = [
      { title: 'Submitted', cell: (q) => when(q.submitTime) },
      ...(reply.everyone ? [{ title: 'User', cell: (q) => q.submittedBy || '' }] : []),
      { title: 'Datasource', cell: (q) => q.datasource },
      { title: 'Lang', cell: (q) => q.lang },
      { title: 'Query', class: 'query-text', cell: (q) => h('code', { title: q.query }, q.query.length > 160 ? `${q.query.slice(0, 160)}…` : q.query) },
      { title: 'Status', cell: (q) => h('span', { title: q.error || '' }, statusBadge(q.status)) },
      { title: 'Ended', cell: (q) => when(q.endTime) },
      { title: 'Rows', class: 'num', cell: (q) => (q.rows ?? '') },
      { title: '', cell: (q) => h('span', { class: 'actions' },
        h('button', { class: 'open', onclick: () => { this.show('query'); this.queryPage.load(q.query, q.lang, q.datasource); this.queryPage.watch(q.queryId); } }, 'Open'),
        h('button', { class: 'rerun', onclick: () => { this.show('query'); this.queryPage.load(q.query, q.lang, q.datasource, true); } }, 'Re-run')) },
    ];
    const rows = reply.queries;
    clear(this.list, rows.length ? table(columns, rows, { id: 'history-table' }) : h('p', { class: 'muted', id: 'history-empty' }, 'No queries yet.'));
  }
}
