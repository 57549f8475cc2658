// The operators' page (admins): live sessions and jobs with their owners and ages, the warm
// pools, health, and the figures /metrics carries. Refreshed every few seconds while shown.

import { api } from './api.js';
import { h, clear, age, statusBadge, table } from './dom.js';

export class OpsPage {
  constructor() {
    this.timer = null;
    this.health = h('div', { id: 'ops-health' });
    this.sessions = h('div', { id: 'ops-sessions', class: 'scroll' });
    this.pool = h('div', { id: 'ops-pool', class: 'scroll' });
    this.filter = h('input', { id: 'metrics-filter', type: 'search', placeholder: 'Filter metrics…', 'aria-label': 'Filter metrics', oninput: () => this.paintMetrics() });
    this.metrics = h('div', { id: 'ops-metrics', class: 'scroll' });
    this.families = [];
    this.root = h('section', { id: 'page-ops', class: 'page', hidden: true },
      h('div', { class: 'toolbar' }, h('button', { id: 'ops-refresh', onclick: () => this.refresh() }, 'Refresh'), h('span', { class: 'muted', id: 'ops-updated' })),
      h('h2', {}, 'Health'), this.health,
      h('h2', {}, 'Live sessions and jobs'), this.sessions,
      h('h2', {}, 'Warm pool'), this.pool,
      h('h2', {}, 'Metrics'), this.filter, this.metrics);
  }

  shown(visible) {
    clearInterval(this.timer);
    this.timer = visible ? setInterval(() => this.refresh(), 5000) : null;
    if (visible) this.refresh();
  }

  async refresh() {
    let ops;
    try {
      ops = await api('GET', '/ops');
    } catch (error) {
      clear(this.health, h('p', { class: 'error' }, error.details || error.message));
      return;
    }
    document.getElementById('ops-updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
    clear(this.health, h('p', {}, statusBadge(ops.health.serving ? 'SERVING' : 'NOT SERVING')),
      table([
        { title: 'Check', cell: ([name]) => name },
        { title: 'OK', cell: ([, c]) => (c.ok ? '✔' : '✘') },
        { title: 'Details', cell: ([, c]) => c.details || Object.entries(c).filter(([k]) => k !== 'ok' && k !== 'details').map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`).join('; ') },
      ], Object.entries(ops.health.checks), { id: 'health-table' }));
    clear(this.sessions, ops.sessions.length ? table([
      { title: 'Session', cell: (s) => h('code', {}, s.sessionId) },
      { title: 'Owner', class: 'owner', cell: (s) => s.submittedBy || '—' },
      { title: 'Datasource', cell: (s) => s.dataSourceName },
      { title: 'Type', cell: (s) => s.sessionType },
      { title: 'State', cell: (s) => statusBadge(String(s.state).toUpperCase()) },
      { title: 'Age', cell: (s) => age(s.jobStartTime) },
      { title: 'Last beat', cell: (s) => `${age(s.lastUpdateTime)} ago` },
      { title: 'Job', cell: (s) => h('code', {}, s.jobId || '') },
      { title: 'Running', cell: (s) => (s.runningStatements || []).map((r) => h('div', {}, h('code', {}, r.queryId), r.progress ? ` tasks ${r.progress.tasksCompleted}/${r.progress.tasksTotal}` : '', ` for ${age(r.startTime)}`)) },
    ], ops.sessions, { id: 'sessions-table' }) : h('p', { class: 'muted' }, 'No live sessions.'));
    clear(this.pool, ops.poolJobs.length ? table([
      { title: 'Slot', cell: (p) => h('code', {}, p.slotId) },
      { title: 'Pool', cell: (p) => p.poolKey },
      { title: 'Engine', cell: (p) => p.engine },
      { title: 'State', cell: (p) => statusBadge(String(p.state).toUpperCase()) },
      { title: 'Age', cell: (p) => age(p.jobStartTime) },
      { title: 'Last beat', cell: (p) => `${age(p.lastUpdateTime)} ago` },
      { title: 'Session', cell: (p) => p.sessionId || '' },
    ], ops.poolJobs, { id: 'pool-table' }) : h('p', { class: 'muted' }, 'No warm pool jobs.'));
    this.families = ops.metrics;
    this.paintMetrics();
  }

  paintMetrics() {
    const needle = this.filter.value.trim().toLowerCase();
    const rows = [];
    for (const family of this.families) {
      if (needle && !family.name.toLowerCase().includes(needle)) continue;
      for (const sample of family.samples) rows.push({ family, sample });
    }
    clear(this.metrics, table([
      { title: 'Metric', cell: (r) => h('code', { title: r.family.help }, r.sample.name) },
      { title: 'Labels', cell: (r) => Object.entries(r.sample.labels).map(([k, v]) => `${k}=${v}`).join(', ') },
      { title: 'Value', class: 'num', cell: (r) => (Number.isInteger(r.sample.value) ? String(r.sample.value) : (typeof r.sample.value === 'number' ? r.sample.value.toPrecision(6) : String(r.sample.value))) },
    ], rows.slice(0, 1000), { id: 'metrics-table' }));
  }
}
