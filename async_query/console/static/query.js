// The query page: editor, datasource and language, Run and Cancel with the status as it moves
// (and Spark's progress), the result one page at a time, downloads, and the session kept per
// datasource as OpenSearch Dashboards keeps it.

import { api, ApiError, ExactNumber } from './api.js';
import { h, clear, statusBadge } from './dom.js';
import { Editor } from './editor.js';

export const PAGE_ROWS = 100;
const TERMINAL = new Set(['SUCCESS', 'FAILED', 'CANCELLED', 'TIMEOUT']);
const NUMERIC = /^(byte|short|integer|long|float|double|decimal)/;
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Whether a failed request may succeed when asked again: no answer at all (the network, a
// restart), too many requests, or the service's own trouble (5xx). Anything else is the answer.
function transient(error) {
  return !(error instanceof ApiError) || error.status === 429 || error.status >= 500;
}

function cellText(value) {
  if (value === null || value === undefined) return h('span', { class: 'null' }, 'null');
  if (value instanceof ExactNumber) return value.text;
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

export class QueryPage {
  constructor(me, datasources) {
    this.me = me;
    this.generation = 0;
    this.queryId = null;
    this.editor = new Editor({ onRun: () => this.run() });
    this.datasource = h('select', { id: 'datasource', 'aria-label': 'Datasource', onchange: () => this.datasourceChanged() },
      datasources.map((ds) => h('option', { value: ds.name }, ds.name)));
    const remembered = localStorage.getItem(this.key('datasource'));
    if (remembered && datasources.some((ds) => ds.name === remembered)) this.datasource.value = remembered;
    this.lang = h('select', { id: 'lang', 'aria-label': 'Language', onchange: () => this.editor.setLang(this.lang.value) },
      h('option', { value: 'sql' }, 'SQL'), h('option', { value: 'ppl' }, 'PPL'));
    this.runButton = h('button', { id: 'run', class: 'primary', onclick: () => this.run() }, 'Run');
    this.cancelButton = h('button', { id: 'cancel', disabled: true, onclick: () => this.cancel() }, 'Cancel');
    this.sessionText = h('code', { id: 'session-id', class: 'muted' });
    this.newSession = h('button', { id: 'new-session', title: 'Forget this datasource\'s session: the next query starts a new one', onclick: () => this.forgetSession() }, 'New session');
    this.status = h('span', { id: 'status', class: 'status' });
    this.progress = h('progress', { id: 'progress', max: 1, value: 0, hidden: true });
    this.progressText = h('span', { id: 'progress-text', class: 'muted' });
    this.elapsed = h('span', { id: 'elapsed', class: 'muted' });
    this.error = h('div', { id: 'error', class: 'error', role: 'alert', hidden: true });
    this.results = h('section', { id: 'results', class: 'results', hidden: true });
    this.root = h('section', { id: 'page-query', class: 'page' },
      h('div', { class: 'toolbar' }, h('label', {}, 'Datasource ', this.datasource), h('label', {}, 'Language ', this.lang),
        this.runButton, this.cancelButton, h('span', { class: 'spacer' }), h('span', { class: 'muted' }, 'Session '),
        this.sessionText, this.newSession),
      this.editor.root,
      h('div', { class: 'statusline' }, this.status, this.progress, this.progressText, this.elapsed),
      this.error, this.results);
    this.showSession();
  }

  key(what) { return `aq.${what}.${this.me.user}`; }

  sessionKey() { return this.key(`session.${this.datasource.value}`); }

  datasourceChanged() {
    localStorage.setItem(this.key('datasource'), this.datasource.value);
    this.showSession();
  }

  showSession() {
    const id = localStorage.getItem(this.sessionKey());
    this.sessionText.textContent = id || '(new)';
  }

  forgetSession() {
    localStorage.removeItem(this.sessionKey());
    this.showSession();
  }

  // Put a statement in the editor (from the history or the catalog), and run it if asked.
  load(text, lang, datasource, run = false) {
    if (datasource && [...this.datasource.options].some((o) => o.value === datasource)) {
      this.datasource.value = datasource;
      this.datasourceChanged();
    }
    this.lang.value = lang || 'sql';
    this.editor.set(text, this.lang.value);
    if (run) this.run();
  }

  async run() {
    const query = this.editor.value.trim();
    if (!query || !this.datasource.value) return;
    const generation = ++this.generation;
    this.reset();
    this.setStatus('SUBMITTING');
    const body = { datasource: this.datasource.value, lang: this.lang.value, query };
    const session = localStorage.getItem(this.sessionKey());
    if (session) body.sessionId = session;
    let reply;
    try {
      reply = await api('POST', '/queries', { body });
    } catch (error) {
      if (generation === this.generation) { this.setStatus(''); this.showError(error.details || error.message); }
      return;
    }
    if (reply.sessionId) {
      localStorage.setItem(this.sessionKey(), reply.sessionId);
      this.showSession();
    }
    this.watch(reply.queryId, generation);
  }

  // Follow a query (just submitted, or opened from the history) until it ends.
  async watch(queryId, generation = ++this.generation) {
    this.queryId = queryId;
    this.root.dataset.queryId = queryId;
    const started = Date.now();
    this.cancelButton.disabled = false;
    // Every 100 ms for the first seconds (a warm query answers in well under a second), then
    // less and less often, up to once a second.
    let delay = 100;
    let failures = 0;
    while (generation === this.generation) {
      let reply;
      try {
        reply = await api('GET', `/queries/${encodeURIComponent(queryId)}?offset=0&size=${PAGE_ROWS}`);
      } catch (error) {
        if (generation !== this.generation) return;
        if (!transient(error)) { this.showError(error.details || error.message); this.cancelButton.disabled = true; return; }
        // A busy or unreachable service: the query goes on there, so the page keeps asking.
        failures += 1;
        this.showError(`Could not reach the service; trying again (${failures}): ${error.details || error.message}`);
        await sleep(Math.min(5000, 500 * failures));
        continue;
      }
      if (generation !== this.generation) return;
      if (failures) { failures = 0; this.error.hidden = true; }
      this.elapsed.textContent = `${((Date.now() - started) / 1000).toFixed(1)} s`;
      this.setStatus(reply.status, reply.progress);
      if (TERMINAL.has(reply.status)) {
        this.cancelButton.disabled = true;
        if (reply.status === 'SUCCESS') this.showPage(reply);
        else if (reply.error) this.showError(reply.error);
        return;
      }
      await sleep(delay);
      if (Date.now() - started > 3000) delay = Math.min(1000, delay * 1.5);
    }
  }

  async cancel() {
    if (!this.queryId) return;
    this.cancelButton.disabled = true;
    try {
      await api('DELETE', `/queries/${encodeURIComponent(this.queryId)}`);
    } catch (error) {
      this.showError(error.details || error.message);
    }
  }

  reset() {
    this.queryId = null;
    this.error.hidden = true;
    this.results.hidden = true;
    clear(this.results);
    this.progress.hidden = true;
    this.progressText.textContent = '';
    this.elapsed.textContent = '';
  }

  setStatus(status, progress) {
    clear(this.status, status ? statusBadge(status) : '');
    this.root.dataset.status = status || '';
    if (progress && progress.tasksTotal) {
      this.progress.hidden = false;
      this.progress.max = progress.tasksTotal;
      this.progress.value = progress.tasksCompleted || 0;
      this.progressText.textContent = `stages ${progress.stagesCompleted || 0}/${progress.stagesTotal || 0} · tasks ${progress.tasksCompleted || 0}/${progress.tasksTotal}`;
    } else if (status !== 'RUNNING') {
      this.progress.hidden = true;
      this.progressText.textContent = '';
    }
  }

  showError(text) {
    this.error.hidden = false;
    const split = /(?<=\.)\s|: /.exec(String(text));
    const reason = split ? String(text).slice(0, split.index) : String(text);
    const details = split ? String(text).slice(split.index + split[0].length) : '';
    clear(this.error, h('strong', {}, reason), details ? h('div', { class: 'details' }, details) : '');
    this.error.title = String(text);
    this.error.dataset.text = String(text);
  }

  async goto(offset) {
    const queryId = this.queryId;
    const reply = await api('GET', `/queries/${encodeURIComponent(queryId)}?offset=${offset}&size=${PAGE_ROWS}`);
    if (queryId === this.queryId) this.showPage(reply);
  }

  showPage(reply) {
    const rows = reply.datarows || [];
    const offset = reply.offset || 0;
    const total = reply.resultRows ?? reply.total ?? rows.length;
    const last = Math.max(0, Math.floor((total - 1) / PAGE_ROWS) * PAGE_ROWS);
    const id = encodeURIComponent(this.queryId);
    const button = (label, idName, target, disabled) => h('button', { id: idName, disabled, onclick: () => this.goto(target) }, label);
    const info = total ? `rows ${offset + 1}–${offset + rows.length} of ${total}${reply.truncated ? ' (cut at the cap)' : ''}` : 'no rows';
    const schema = reply.schema || [];
    const numeric = schema.map((c) => (NUMERIC.test(c.type) ? 'num' : null));
    const table = h('table', { id: 'result-table' },
      h('thead', {}, h('tr', {}, schema.map((c, i) => h('th', { title: c.type, class: numeric[i] }, c.name, h('span', { class: 'type' }, c.type))))),
      h('tbody', {}, rows.map((row) => h('tr', {}, row.map((value, i) => h('td', { class: numeric[i] }, cellText(value)))))));
    clear(this.results,
      h('div', { class: 'toolbar' },
        button('« First', 'first-page', 0, offset === 0), button('‹ Prev', 'prev-page', Math.max(0, offset - PAGE_ROWS), offset === 0),
        h('span', { id: 'page-info' }, info),
        button('Next ›', 'next-page', offset + PAGE_ROWS, offset + rows.length >= total),
        button('Last »', 'last-page', last, offset + rows.length >= total),
        h('span', { class: 'spacer' }),
        h('a', { id: 'download-csv', class: 'button', href: `/console/api/queries/${id}/download?format=csv`, download: '' }, 'Download CSV'),
        h('a', { id: 'download-json', class: 'button', href: `/console/api/queries/${id}/download?format=json`, download: '' }, 'Download JSON')),
      h('div', { class: 'scroll' }, table));
    this.results.hidden = false;
    this.results.dataset.offset = String(offset);
  }
}
