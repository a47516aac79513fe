// The chat playground (/ui/chat): a streamed conversation with the served model over
// POST /v1/chat/completions, with reasoning folded, tool calls and their results, structured
// output, and per-message usage, time to first token and decode speed. Stop aborts the fetch:
// the server sees its client go and cancels the request.
import { apiFetch, apiJson, ApiError, el, fmt, initPage, loadServedModel, sseEvents } from './common.js';

const $ = (id) => document.getElementById(id);
const WEATHER_TOOL = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const EXAMPLE_SCHEMA = { type: 'object', properties: { answer: { type: 'string' }, confidence: { type: 'number' } },
  required: ['answer', 'confidence'], additionalProperties: false };

let servedModel = null;
let history = [];        // the API's messages so far (no system prompt: it is read at each send)
let controller = null;   // the request in flight

function showError(message) {
  $('chat-error').textContent = message;
  $('chat-error').hidden = !message;
}

function parseJsonField(id, what) {
  const text = $(id).value.trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${what} is not valid JSON: ${error.message}`);
  }
}

function requestBody() {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...history);
  const body = { model: servedModel, messages, stream: true, stream_options: { include_usage: true } };
  const number = (id) => ($(id).value === '' ? undefined : Number($(id).value));
  body.temperature = number('temperature');
  body.top_p = number('top_p');
  body.max_tokens = number('max_tokens');
  body.seed = number('seed');
  if ($('ignore_eos').checked) body.ignore_eos = true;
  if (!$('thinking').disabled) body.thinking = { type: $('thinking').checked ? 'enabled' : 'disabled' };
  const tools = parseJsonField('tools', 'Tools');
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw new Error('Tools must be a JSON array');
    if (tools.length) body.tools = tools;
  }
  const format = $('format').value;
  if (format === 'json_object') body.response_format = { type: 'json_object' };
  if (format === 'json_schema') {
    body.response_format = { type: 'json_schema',
      json_schema: { name: 'answer', strict: true, schema: parseJsonField('schema', 'The schema') } };
  }
  return body;
}

function addMessage(role, text) {
  const node = el('div', { class: `message ${role}` }, el('div', { class: 'role', text: role }),
    el('div', { class: 'content', text: text || '' }));
  $('messages').append(node);
  node.scrollIntoView({ block: 'end' });
  return node;
}

// The view of one streamed answer, updated delta by delta.
class AssistantView {
  constructor() {
    this.node = addMessage('assistant', '');
    this.reasoningText = el('div');
    this.reasoningSummary = el('summary', { text: 'Reasoning' });
    this.reasoning = el('details', { class: 'reasoning', hidden: true }, this.reasoningSummary, this.reasoningText);
    this.content = this.node.querySelector('.content');
    this.node.insertBefore(this.reasoning, this.content);
    this.calls = el('div', { class: 'tool-calls' });
    this.meta = el('div', { class: 'meta' });
    this.node.append(this.calls, this.meta);
  }

  addReasoning(text) {
    this.reasoning.hidden = false;
    this.reasoningText.textContent += text;
    this.reasoningSummary.textContent = `Reasoning (${this.reasoningText.textContent.length} characters)`;
  }

  addContent(text) {
    this.content.textContent += text;
    this.node.scrollIntoView({ block: 'end' });
  }

  showCalls(calls, onResult) {
    this.calls.replaceChildren(...calls.map((call) => {
      const input = el('input', { type: 'text', placeholder: `result of ${call.function.name}`, 'aria-label': 'Tool result' });
      const send = el('button', { type: 'button', class: 'secondary', text: 'Send result' });
      const form = el('div', { class: 'tool-result' }, input, send);
      send.addEventListener('click', () => {
        form.replaceChildren(el('span', { class: 'hint', text: `result: ${input.value}` }));
        onResult(call, input.value);
      });
      return el('div', { class: 'part tool-call' }, el('b', { text: 'tool call: ' }),
        el('code', { class: 'tool-name', text: call.function.name }), ` ${call.function.arguments}`, form);
    }));
  }
}

function metaLine(stats) {
  const parts = [];
  if (stats.usage) {
    const u = stats.usage;
    const cached = u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : 0;
    parts.push(`${u.prompt_tokens} prompt tokens${cached ? ` (${cached} cached)` : ''}`, `${u.completion_tokens} completion tokens`);
  }
  if (stats.ttft !== null) parts.push(`TTFT ${fmt(stats.ttft * 1000)} ms`);
  const n = stats.usage ? stats.usage.completion_tokens : stats.chunks;
  if (stats.ttft !== null && n > 1 && stats.end > stats.first) {
    parts.push(`${fmt((n - 1) / ((stats.end - stats.first) / 1000))} tokens/s`);
  }
  if (stats.finish) parts.push(`finish: ${stats.finish}`);
  return parts.join(' · ');
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

async function send() {
  showError('');
  let body;
  try {
    body = requestBody();
  } catch (error) {
    showError(error.message);
    return;
  }
  const view = new AssistantView();
  const stats = { ttft: null, first: 0, end: 0, usage: null, finish: null, chunks: 0 };
  const calls = [];
  let content = '';
  let reasoning = '';
  const started = performance.now();
  controller = new AbortController();
  setBusy(true);
  view.node.dataset.state = 'streaming';
  try {
    const response = await apiFetch('/v1/chat/completions', { method: 'POST', body, signal: controller.signal });
    for await (const event of sseEvents(response)) {
      const data = event.data;
      if (data === '[DONE]') break;
      if (data && data.error) throw new ApiError(500, data.error.message);
      if (data.usage) stats.usage = data.usage;
      const choice = data.choices && data.choices[0];
      if (!choice) continue;
      const delta = choice.delta || {};
      const got = delta.content || delta.reasoning_content || delta.tool_calls;
      if (got) {
        const now = performance.now();
        if (stats.ttft === null) {
          stats.ttft = (now - started) / 1000;
          stats.first = now;
        }
        stats.end = now;
        stats.chunks += 1;
      }
      if (delta.reasoning_content) {
        reasoning += delta.reasoning_content;
        view.addReasoning(delta.reasoning_content);
      }
      if (delta.content) {
        content += delta.content;
        view.addContent(delta.content);
      }
      for (const part of delta.tool_calls || []) {
        const call = calls[part.index] || (calls[part.index] = { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (part.id) call.id = part.id;
        if (part.function && part.function.name) call.function.name += part.function.name;
        if (part.function && part.function.arguments) call.function.arguments += part.function.arguments;
      }
      if (choice.finish_reason) stats.finish = choice.finish_reason;
      view.meta.textContent = metaLine(stats);
    }
    view.node.dataset.state = 'done';
  } catch (error) {
    if (error.name === 'AbortError') {
      stats.finish = 'stopped';
      view.node.dataset.state = 'stopped';
    } else {
      view.node.dataset.state = 'error';
      showError(error.message);
    }
  } finally {
    controller = null;
    setBusy(false);
  }
  view.meta.textContent = metaLine(stats);
  if (view.node.dataset.state === 'error') return;
  const message = { role: 'assistant', content };
  if (reasoning) message.reasoning_content = reasoning;
  if (calls.length) message.tool_calls = calls;
  history.push(message);
  if (calls.length) {
    let pending = calls.length;
    view.showCalls(calls, (call, result) => {
      history.push({ role: 'tool', tool_call_id: call.id, content: result });
      if (--pending === 0) send();
    });
  }
}

function stop() {
  if (controller) controller.abort();
}

function submit(event) {
  event.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || controller) return;
  $('prompt').value = '';
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  send();
}

async function start() {
  initPage('/ui/chat');
  $('composer').addEventListener('submit', submit);
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) submit(event);
  });
  $('stop').addEventListener('click', stop);
  $('clear').addEventListener('click', () => {
    stop();
    history = [];
    $('messages').replaceChildren();
    showError('');
  });
  $('tools-example').addEventListener('click', () => { $('tools').value = JSON.stringify(WEATHER_TOOL, null, 2); });
  $('format').addEventListener('change', () => {
    $('schema').hidden = $('format').value !== 'json_schema';
    if (!$('schema').value) $('schema').value = JSON.stringify(EXAMPLE_SCHEMA, null, 2);
  });
  const load = async () => {
    servedModel = await loadServedModel();
    if (servedModel === null) return;
    const info = await apiJson('/v1/info');
    const deepseek = info.prompt_format.startsWith('DeepSeek');
    $('thinking').disabled = !deepseek;
    $('thinking').checked = deepseek;
    $('thinking').parentElement.title = deepseek ? '' : `${info.prompt_format}: the model has no thinking stage`;
    document.body.dataset.ready = 'true';
  };
  document.addEventListener('api-key-changed', load);
  await load();
}

start();
