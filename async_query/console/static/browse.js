// The catalog page: a datasource's schemas, tables and columns (from the service's catalog read
// model) and its Flint indexes; a table's menu writes a statement into the editor.

import { api } from './api.js';
import { h, clear, when, table } from './dom.js';

const NUMERIC = /^(tinyint|smallint|int|integer|bigint|long|short|byte|float|double|real|decimal|date|timestamp)/i;

function quoted(name) { return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : `\`${name.replaceAll('`', '``')}\``; }

export class BrowsePage {
  constructor(me, datasources, queryPage, show) {
    this.queryPage = queryPage;
    this.show = show;
    this.datasource = h('select', { id: 'browse-datasource', 'aria-label': 'Datasource', onchange: () => this.refresh() },
      datasources.map((ds) => h('option', { value: ds.name }, ds.name)));
    this.tree = h('ul', { id: 'catalog-tree', class: 'tree' });
    this.indexes = h('div', { id: 'index-list', class: 'scroll' });
    this.menu = h('div', { id: 'table-menu', class: 'menu', role: 'menu', hidden: true });
    document.addEventListener('click', () => { this.menu.hidden = true; });
    document.addEventListener('keydown', (event) => { if (event.key === 'Escape') this.menu.hidden = true; });
    this.root = h('section', { id: 'page-browse', class: 'page', hidden: true },
      h('div', { class: 'toolbar' }, h('label', {}, 'Datasource ', this.datasource), h('button', { id: 'browse-refresh', onclick: () => this.refresh() }, 'Refresh')),
      h('div', { class: 'columns' },
        h('div', { class: 'pane' }, h('h2', {}, 'Tables'), this.tree),
        h('div', { class: 'pane wide' }, h('h2', {}, 'Flint indexes'), this.indexes)),
      this.menu);
  }

  async refresh() {
    const ds = this.datasource.value;
    if (!ds) return;
    clear(this.tree, h('li', { class: 'muted' }, 'Loading…'));
    this.loadIndexes(ds);
    try {
      const { schemas } = await api('GET', `/catalog/${encodeURIComponent(ds)}/schemas`);
      clear(this.tree, schemas.map((schema) => this.schemaNode(ds, schema)));
    } catch (error) {
      clear(this.tree, h('li', { class: 'error' }, error.details || error.message));
    }
  }

  schemaNode(ds, schema) {
    const children = h('ul', { hidden: true });
    const node = h('li', { class: 'schema' },
      h('button', { class: 'node', onclick: async () => {
        children.hidden = !children.hidden;
        if (!children.hidden && !children.childElementCount) {
          try {
            const { tables } = await api('GET', `/catalog/${encodeURIComponent(ds)}/schemas/${encodeURIComponent(schema)}/tables`);
            clear(children, tables.length ? tables.map((t) => this.tableNode(ds, schema, t)) : h('li', { class: 'muted' }, 'no tables'));
          } catch (error) {
            clear(children, h('li', { class: 'error' }, error.details || error.message));
          }
        }
      } }, schema), children);
    node.dataset.schema = schema;
    return node;
  }

  tableNode(ds, schema, name) {
    const columns = h('ul', { class: 'columns-list', hidden: true });
    const load = async () => {
      if (!columns.childElementCount) {
        const found = await api('GET', `/catalog/${encodeURIComponent(ds)}/schemas/${encodeURIComponent(schema)}/tables/${encodeURIComponent(name)}/columns`);
        columns.found = found.columns;
        clear(columns, found.columns.map((c) => h('li', { class: 'column' }, c.name, ' ', h('span', { class: 'type' }, c.type))));
      }
      return columns.found;
    };
    const openMenu = async (event) => {
      event.preventDefault();
      event.stopPropagation();
      const full = `${quoted(ds)}.${quoted(schema)}.${quoted(name)}`;
      clear(this.menu,
        h('button', { role: 'menuitem', class: 'menu-select', onclick: () => this.write(`SELECT * FROM ${full} LIMIT 10`) }, 'SELECT * … LIMIT 10'),
        h('button', { role: 'menuitem', class: 'menu-skipping', onclick: async () => this.write(skipping(full, await load())) }, 'CREATE SKIPPING INDEX …'));
      node.append(this.menu);
      this.menu.hidden = false;
    };
    const node = h('li', { class: 'table' },
      h('button', { class: 'node', oncontextmenu: openMenu, onclick: async () => {
        columns.hidden = !columns.hidden;
        if (!columns.hidden) {
          try { await load(); } catch (error) { clear(columns, h('li', { class: 'error' }, error.details || error.message)); }
        }
      } }, name),
      h('button', { class: 'more', title: 'Write a statement about this table', 'aria-label': `Statements about ${name}`, onclick: openMenu }, '⋯'),
      columns);
    node.dataset.table = name;
    return node;
  }

  write(text) {
    this.menu.hidden = true;
    this.show('query');
    this.queryPage.load(text, 'sql', this.datasource.value);
  }

  async loadIndexes(ds) {
    clear(this.indexes, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const { indexes } = await api('GET', `/catalog/${encodeURIComponent(ds)}/indexes`);
      const columns = [
        { title: 'Index', cell: (i) => h('code', { title: i.indexName }, i.name || i.indexName) },
        { title: 'Kind', cell: (i) => i.kind },
        { title: 'Table', cell: (i) => [i.database, i.table].filter(Boolean).join('.') },
        { title: 'State', cell: (i) => h('span', { class: `badge state-${i.state}` }, i.state) },
        { title: 'Refresh', cell: (i) => [i.refreshMode, i.incremental ? 'incremental' : '', i.schedulerMode || ''].filter(Boolean).join(', ') },
        { title: 'Interval', cell: (i) => i.refreshInterval || '' },
        { title: 'Last refresh', cell: (i) => when(i.lastRefreshComplete || i.lastRefreshStart) },
        { title: 'Schedule and more', cell: (i) => Object.entries(i.more || {}).map(([k, v]) => h('div', {}, `${k}: ${v}`)) },
        { title: 'Error', cell: (i) => i.error || '' },
      ];
      clear(this.indexes, indexes.length ? table(columns, indexes, { id: 'index-table' }) : h('p', { class: 'muted' }, 'No Flint indexes.'));
    } catch (error) {
      clear(this.indexes, h('p', { class: 'error' }, error.details || error.message));
    }
  }
}

export function skipping(full, columns) {
  const picked = (columns || []).slice(0, 4).map((c) => `  ${quoted(c.name)} ${NUMERIC.test(c.type) ? 'MIN_MAX' : 'VALUE_SET'}`);
  return `CREATE SKIPPING INDEX ON ${full} (\n${picked.join(',\n') || '  <column> VALUE_SET'}\n)`;
}
