// The query editor: a textarea over a highlighted copy of its text (the copy is built with DOM
// calls from a small tokenizer of SQL and PPL), scrolled together.

import { h } from './dom.js';

const SQL_KEYWORDS = new Set(`ADD ALL ALTER ANALYZE AND ANTI ARRAY AS ASC AUTO_REFRESH BETWEEN BLOOM_FILTER BY CACHE CASE CAST
CATALOG CREATE CROSS CURRENT DATABASE DATABASES DEFAULT DELETE DESC DESCRIBE DISTINCT DROP ELSE END EXCEPT EXISTS EXPLAIN
EXTENDED FALSE FETCH FILTER FIRST FLINT FOLLOWING FOR FROM FULL FUNCTION GROUP HAVING IF IN INDEX INDEXES INNER INSERT
INTERSECT INTERVAL INTO IS JOIN LAST LATERAL LEFT LIKE LIMIT MAP MATERIALIZED MIN_MAX NOT NULL NULLS OFFSET ON OR ORDER
OUTER OVER OVERWRITE PARTITION PARTITIONED PRECEDING RANGE RECOVER REFRESH RIGHT RLIKE ROW ROWS SCHEMAS SELECT SEMI SET
SHOW SKIPPING STRUCT TABLE TABLES TBLPROPERTIES TEMPORARY THEN TRUE UNBOUNDED UNION UPDATE USING VACUUM VALUES VALUE_SET
VIEW VIEWS WHEN WHERE WINDOW WITH JOB`.split(/\s+/));
const PPL_KEYWORDS = new Set(`SOURCE SEARCH WHERE FIELDS STATS BY SORT HEAD TAIL EVAL RENAME DEDUP TOP RARE PARSE GROK
PATTERNS LOOKUP JOIN FILLNULL EXPAND FLATTEN TRENDLINE EVENTSTATS APPEND SPAN AS AND OR NOT XOR IN LIKE BETWEEN IS NULL TRUE
FALSE DESCRIBE SHOW DATASOURCES EXPLAIN LIMIT FROM COUNT SUM AVG MIN MAX DISTINCT_COUNT`.split(/\s+/));

const TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^'\\]|\\[\s\S]|'')*'?|"(?:[^"\\]|\\[\s\S])*"?)|(`(?:[^`]|``)*`?)|(\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-zA-Z]*\b)|([A-Za-z_][A-Za-z0-9_]*)|([=<>!|+\-*/%,;().]+)/g;

export function tokens(text, lang) {
  const keywords = lang === 'ppl' ? PPL_KEYWORDS : SQL_KEYWORDS;
  const out = [];
  let last = 0;
  for (const match of text.matchAll(TOKEN)) {
    if (match.index > last) out.push([null, text.slice(last, match.index)]);
    const [whole, comment, string, quoted, number, word] = match;
    let kind = 'op';
    if (comment) kind = 'comment';
    else if (string) kind = 'string';
    else if (quoted) kind = 'ident';
    else if (number) kind = 'number';
    else if (word) kind = keywords.has(word.toUpperCase()) ? 'keyword' : (text[match.index + word.length] === '(' ? 'fn' : null);
    out.push([kind, whole]);
    last = match.index + whole.length;
  }
  if (last < text.length) out.push([null, text.slice(last)]);
  return out;
}

export class Editor {
  constructor({ onRun }) {
    this.lang = 'sql';
    this.code = h('code');
    this.shade = h('pre', { class: 'editor-shade', 'aria-hidden': 'true' }, this.code);
    this.input = h('textarea', {
      id: 'editor', class: 'editor-input', spellcheck: 'false', autocomplete: 'off',
      autocapitalize: 'off', 'aria-label': 'Query text', placeholder: 'SELECT …   (Ctrl+Enter runs)',
    });
    this.root = h('div', { class: 'editor' }, this.shade, this.input);
    this.input.addEventListener('input', () => this.paint());
    this.input.addEventListener('scroll', () => this.follow());
    this.input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        onRun();
      } else if (event.key === 'Tab' && !event.shiftKey) {
        event.preventDefault();
        this.input.setRangeText('  ', this.input.selectionStart, this.input.selectionEnd, 'end');
        this.paint();
      }
    });
    this.paint();
  }

  get value() { return this.input.value; }

  set(text, lang) {
    if (lang) this.lang = lang;
    this.input.value = text;
    this.paint();
    this.input.focus();
  }

  setLang(lang) { this.lang = lang; this.paint(); }

  paint() {
    const parts = tokens(this.input.value, this.lang).map(([kind, text]) => (kind ? h('span', { class: `tok-${kind}` }, text) : text));
    this.code.replaceChildren(...parts, '\n');
    this.follow();
  }

  follow() {
    this.shade.scrollTop = this.input.scrollTop;
    this.shade.scrollLeft = this.input.scrollLeft;
  }
}
