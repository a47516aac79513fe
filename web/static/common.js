// What every page shares: the header and its API-key form, calls to the server's API (same
// origin only: the Content-Security-Policy forbids any other), and reading server-sent events.
//
// The API key lives in sessionStorage: asked for once, kept for this browser tab's session,
// never sent anywhere but this server, and gone when the tab closes.

const KEY_NAME = 'deepinfer.api_key';

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME) || '';
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_NAME, key);
  else sessionStorage.removeItem(KEY_NAME);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The server's error message: OpenAI's {"error": {"message"}} or Anthropic's {"error": {...}}.
async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON: the text itself */ }
  return text || response.statusText;
}

// fetch() of this server's `path` with the key; a non-2xx answer throws an ApiError carrying
// the server's message. A 401 also opens the key form with the reason.
export async function apiFetch(path, { method = 'GET', body, signal } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit', cache: 'no-store',
  });
  if (response.ok) return response;
  const message = await errorMessage(response);
  if (response.status === 401) {
    showAuthProblem(key
      ? 'The server refused this API key (401). Enter the key it was started with (--api-key).'
      : 'This server needs an API key (it was started with --api-key). Enter it to continue.');
  }
  throw new ApiError(response.status, message);
}

export async function apiJson(path, options) {
  const response = await apiFetch(path, options);
  return response.json();
}

// The events of an SSE response as {event, data} (data parsed as JSON where it is JSON).
export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { event: null, data: null };
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event.event = line.slice(7);
        else if (line.startsWith('data: ')) event.data = line.slice(6);
      }
      if (event.data === null) continue;
      try { event.data = JSON.parse(event.data); } catch (_) { /* "[DONE]" */ }
      yield event;
    }
  }
}

// Creates an element: el('div', {class: 'x', text: 'hi'}, child, ...). Text is always set as
// text, never as HTML, so that nothing the server or a user wrote can become markup.
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') node.textContent = value;
    else if (name === 'class') node.className = value;
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

const PAGES = [['/ui', 'Dashboard'], ['/ui/recipe', 'Recipe'], ['/ui/chat', 'Chat']];

function showAuthProblem(message) {
  const bar = document.getElementById('auth-message');
  if (!bar) return;
  bar.textContent = message;
  bar.hidden = false;
  const form = document.getElementById('key-form');
  form.hidden = false;
  form.querySelector('input').focus();
}

// The header: the pages, the served model, and the key form (shown when a call needs a key).
export function initPage(current) {
  const nav = el('nav', { 'aria-label': 'Pages' },
    PAGES.map(([href, name]) => el('a', { href, 'aria-current': href === current ? 'page' : null, text: name })));
  const input = el('input', { type: 'password', name: 'api_key', autocomplete: 'off', placeholder: 'API key',
    'aria-label': 'API key' });
  const form = el('form', { id: 'key-form', class: 'key-form', hidden: true },
    input, el('button', { type: 'submit', text: 'Use key' }),
    el('button', { type: 'button', class: 'secondary', text: 'Forget', onclick: () => {
      setApiKey('');
      input.value = '';
    } }));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    setApiKey(input.value.trim());
    input.value = '';
    document.getElementById('auth-message').hidden = true;
    form.hidden = true;
    document.dispatchEvent(new CustomEvent('api-key-changed'));
  });
  const keyButton = el('button', { type: 'button', class: 'secondary key-toggle', text: 'API key',
    onclick: () => { form.hidden = !form.hidden; if (!form.hidden) input.focus(); } });
  const header = el('header', { class: 'top' },
    el('a', { class: 'brand', href: '/ui', text: 'deepinfer' }), nav,
    el('span', { id: 'served-model', class: 'served-model' }), keyButton, form);
  const bar = el('div', { id: 'auth-message', class: 'alert', role: 'alert', hidden: true });
  document.body.prepend(header, bar);
}

// Formats a number for a tile or a table: 3 significant digits, '–' for none.
export function fmt(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  if (value === 0) return '0';
  const abs = Math.abs(value);
  if (abs >= 1000) return Math.round(value).toLocaleString('en-US');
  return Number(value.toPrecision(digits)).toString();
}

// The served model's name (from /v1/models), shown in the header; null when the call failed
// (a missing key: the key form says so).
export async function loadServedModel() {
  try {
    const list = await apiJson('/v1/models');
    const model = list.data && list.data[0] ? list.data[0].id : null;
    document.getElementById('served-model').textContent = model ? `serving ${model}` : '';
    return model;
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return null;
  }
}
