// Every request the page makes: same origin, the login cookie sent by the browser, the CSRF
// token in a header on every state-changing request.

const csrf = document.querySelector('meta[name="aq-csrf"]')?.getAttribute('content') || '';
const listeners = { unauthorized: [] };

export class ApiError extends Error {
  constructor(status, body, text) {
    const error = body && body.error ? body.error : null;
    super(error ? `${error.reason}: ${error.details}` : `HTTP ${status} ${text || ''}`.trim());
    this.status = status;
    this.reason = error ? error.reason : '';
    this.details = error ? error.details : (text || '');
  }
}

export function onUnauthorized(listener) { listeners.unauthorized.push(listener); }

// Numbers JavaScript cannot hold exactly (big integers, long decimals) keep their JSON text.
export class ExactNumber {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
  toJSON() { return this.text; }
}

function exact(key, value, context) {
  if (typeof value === 'number' && context && typeof context.source === 'string' && String(value) !== context.source) {
    return new ExactNumber(context.source);
  }
  return value;
}

export async function api(method, path, { body, headers = {}, quiet = false } = {}) {
  const init = { method, headers: { ...headers }, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET' && method !== 'HEAD') init.headers['X-CSRF-Token'] = csrf;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const reply = await fetch(`/console/api${path}`, init);
  if (reply.status === 204) return null;
  const text = await reply.text();
  let data = null;
  try { data = text ? JSON.parse(text, exact) : null; } catch { data = null; }
  if (!reply.ok) {
    if (reply.status === 401 && !quiet) listeners.unauthorized.forEach((listener) => listener());
    throw new ApiError(reply.status, data, text);
  }
  return data;
}

export function basicHeader(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = '';
  bytes.forEach((b) => { binary += String.fromCharCode(b); });
  return `Basic ${btoa(binary)}`;
}
