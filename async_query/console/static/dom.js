// The page is built with DOM calls only: no HTML is ever parsed from a string (the
// Content-Security-Policy enforces it with Trusted Types), no style attribute is written.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (typeof value !== 'string' && key in el) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function when(millis) {
  if (!millis) return '';
  const d = new Date(millis);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function age(millis) {
  if (!millis) return '';
  let s = Math.max(0, Math.round((Date.now() - millis) / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60); s %= 60;
  if (m < 60) return `${m}m ${s}s`;
  const hours = Math.floor(m / 60);
  return hours < 48 ? `${hours}h ${m % 60}m` : `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function statusBadge(status) {
  return h('span', { class: `badge status-${String(status || '').toLowerCase()}` }, status || '');
}

// A table of plain rows: columns are [{title, cell(row) -> Node|string, class?}].
export function table(columns, rows, props = {}) {
  return h('table', props,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.class || null }, c.title)))),
    h('tbody', {}, rows.map((row) => h('tr', {}, columns.map((c) => h('td', { class: c.class || null }, c.cell(row)))))));
}
