// The recipe visualiser (/ui/recipe): a request rendered into the exact prompt (POST /v1/render),
// raw model output parsed into every protocol's response and SSE events (POST /v1/parse).
import { apiJson, ApiError, el, initPage, loadServedModel } from './common.js';
import { OUTPUT_EXAMPLES, REQUEST_EXAMPLES } from './examples.js';

const $ = (id) => document.getElementById(id);
const PROTOCOLS = ['chat', 'responses', 'messages'];
// Spellings of control tokens (DeepSeek's full-width bars, ChatML's <|...|>, <think>): in text a
// user typed they are look-alikes, marked so that they cannot be mistaken for the real thing.
const LOOKALIKE = /<｜[^｜<>\n]{1,48}｜>|<\|[A-Za-z_]{2,24}\|>|<\/?think>/g;

let servedModel = null;
let lastTokens = null;  // the last render's tokens, for hovering and for Generate
let parsed = {};    // protocol -> /v1/parse answer
let replay = { events: [], next: 0, timer: null };

function showRejected(box, message) {
  box.textContent = message;
  box.hidden = !message;
}

function readRequest() {
  try {
    const request = JSON.parse($('request').value);
    if (request === null || typeof request !== 'object' || Array.isArray(request)) {
      throw new Error('it must be a JSON object');
    }
    return request;
  } catch (error) {
    showRejected($('render-rejected'), `The request is not valid JSON: ${error.message}`);
    return null;
  }
}

function textWithLookalikes(text) {
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(LOOKALIKE)) {
    if (match.index > last) nodes.push(text.slice(last, match.index));
    nodes.push(el('span', { class: 'lookalike', title: 'typed text: not a control token', text: match[0] }));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

function showPrompt(spans) {
  const pre = $('prompt');
  pre.replaceChildren(...spans.flatMap((span) => (span.special
    ? [el('span', { class: 'special', title: 'control token', text: span.text })]
    : textWithLookalikes(span.text))));
}

function hexBytes(hex) {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; ++i) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

// How a token's bytes read: their text with white space made visible, or \x escapes where the
// bytes are part of a UTF-8 sequence another token completes.
function tokenLabel(token) {
  const bytes = hexBytes(token.bytes);
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return text.replaceAll(' ', '·').replaceAll('\n', '↵').replaceAll('\t', '→') || '∅';
  } catch (_) {
    return Array.from(bytes, (b) => `\\x${b.toString(16).padStart(2, '0')}`).join('');
  }
}

function describeToken(token, index) {
  const spaced = token.bytes.match(/../g)?.join(' ') ?? '';
  return `#${index} · id ${token.id} · ${token.special ? 'control token' : 'text'} · ` +
    `vocabulary ${JSON.stringify(token.text)} · bytes ${spaced || '(none)'}`;
}

function showTokens(tokens) {
  const box = $('tokens');
  if (!tokens) {
    box.replaceChildren();
    return;
  }
  box.replaceChildren(...tokens.map((token, index) => el('span', {
    class: token.special ? 'tok special' : 'tok', tabindex: '0',
    title: `id ${token.id} · bytes ${token.bytes.match(/../g)?.join(' ') ?? ''}`,
    dataset: { id: token.id, index }, text: tokenLabel(token),
  })));
}

function tokenHover(event) {
  const chip = event.target.closest('.tok');
  if (!chip || !lastTokens) return;
  $('token-info').textContent = describeToken(lastTokens[Number(chip.dataset.index)], chip.dataset.index);
}

async function render() {
  const request = readRequest();
  if (!request) return;
  showRejected($('render-rejected'), '');
  const body = { protocol: $('protocol').value, encoding: $('encoding').value, request };
  let answer;
  try {
    answer = await apiJson('/v1/render', { method: 'POST', body });
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    showRejected($('render-rejected'), `The server could not render: ${error.message}`);
    return;
  }
  if (answer.rejected) {
    showRejected($('render-rejected'),
      `The recipe refuses this request (the server would answer ${answer.rejected.status}):\n${answer.rejected.message}`);
    $('prompt').replaceChildren();
    showTokens(null);
    $('render-stats').textContent = '';
    lastTokens = null;
    return;
  }
  showPrompt(answer.spans);
  lastTokens = answer.tokens;
  showTokens(answer.tokens);
  const specials = answer.spans.filter((s) => s.special).length;
  const bytes = new TextEncoder().encode(answer.prompt).length;
  const tokenPart = answer.tokens
    ? `${answer.tokens.length} tokens (${answer.tokens.filter((t) => t.special).length} control)`
    : answer.tokens_unavailable;
  $('render-stats').textContent = `${answer.format} · ${bytes} bytes · ${specials} control-token spans · ${tokenPart}`;
  $('render-stats').dataset.tokens = answer.tokens ? answer.tokens.length : '';
}

// --- The request in other protocols, for parsing: its tools and thinking mode carried over. ---

function toolsOf(protocol, request) {
  const tools = Array.isArray(request.tools) ? request.tools : [];
  return tools.map((tool) => {
    if (protocol === 'chat' && tool.function) return tool.function;
    if (protocol === 'messages') return { name: tool.name, description: tool.description, parameters: tool.input_schema };
    return { name: tool.name, description: tool.description, parameters: tool.parameters };
  }).filter((tool) => tool && tool.name);
}

// true, false, or undefined (the format's default).
function thinkingOf(protocol, request) {
  if (protocol === 'responses') {
    const effort = request.reasoning && request.reasoning.effort;
    return effort === undefined ? undefined : effort !== 'none';
  }
  const type = request.thinking && request.thinking.type;
  if (type === 'disabled') return false;
  if (type === 'enabled' || type === 'adaptive' || request.reasoning_effort) return true;
  return undefined;
}

function requestFor(target, source, request) {
  if (target === source) return request;
  const tools = toolsOf(source, request);
  const thinking = thinkingOf(source, request);
  const model = request.model || servedModel || 'deepseek-v4';
  if (target === 'chat') {
    const out = { model, messages: [{ role: 'user', content: 'hi' }] };
    if (tools.length) out.tools = tools.map((f) => ({ type: 'function', function: f }));
    if (thinking !== undefined) out.thinking = { type: thinking ? 'enabled' : 'disabled' };
    return out;
  }
  if (target === 'responses') {
    const out = { model, input: 'hi' };
    if (tools.length) out.tools = tools.map((f) => ({ type: 'function', ...f }));
    if (thinking === false) out.reasoning = { effort: 'none' };
    return out;
  }
  const out = { model, max_tokens: 1024, messages: [{ role: 'user', content: 'hi' }] };
  if (tools.length) out.tools = tools.map((f) => ({ name: f.name, description: f.description, input_schema: f.parameters }));
  if (thinking !== undefined) out.thinking = thinking ? { type: 'enabled', budget_tokens: 1024 } : { type: 'disabled' };
  return out;
}

// --- What each protocol's response says, in a few lines. ---

function part(kind, label, text) {
  return el('div', { class: `part ${kind}` }, el('b', { text: `${label}: ` }), text);
}

function toolCallPart(name, args) {
  return el('div', { class: 'part tool-call' }, el('b', { text: 'tool call: ' }),
    el('code', { class: 'tool-name', text: name }), ` ${typeof args === 'string' ? args : JSON.stringify(args)}`);
}

function summarize(protocol, body) {
  const parts = [];
  if (protocol === 'chat') {
    const choice = body.choices[0];
    const m = choice.message;
    if (m.reasoning_content) parts.push(part('reasoning', 'reasoning', m.reasoning_content));
    if (m.content) parts.push(part('text', 'text', m.content));
    for (const call of m.tool_calls || []) parts.push(toolCallPart(call.function.name, call.function.arguments));
    parts.push(part('finish', 'finish_reason', String(choice.finish_reason)));
  } else if (protocol === 'responses') {
    for (const item of body.output || []) {
      if (item.type === 'reasoning') {
        const text = (item.content || item.summary || []).map((c) => c.text).join('');
        parts.push(part('reasoning', 'reasoning', text));
      } else if (item.type === 'message') {
        parts.push(part('text', 'text', (item.content || []).map((c) => c.text || '').join('')));
      } else if (item.type === 'function_call') {
        parts.push(toolCallPart(item.name, item.arguments));
      }
    }
    parts.push(part('finish', 'status', String(body.status)));
  } else {
    for (const block of body.content || []) {
      if (block.type === 'thinking') parts.push(part('reasoning', 'thinking', block.thinking));
      else if (block.type === 'text') parts.push(part('text', 'text', block.text));
      else if (block.type === 'tool_use') parts.push(toolCallPart(block.name, block.input));
    }
    parts.push(part('finish', 'stop_reason', String(body.stop_reason)));
  }
  return parts;
}

async function parseOutput() {
  const request = readRequest();
  if (!request) return;
  showRejected($('parse-rejected'), '');
  const source = $('protocol').value;
  const chunk = Math.max(0, Number($('chunk').value) || 0);
  const problems = [];
  parsed = {};
  await Promise.all(PROTOCOLS.map(async (protocol) => {
    const card = $(`parsed-${protocol}`).querySelector('.parts');
    const body = { protocol, encoding: $('encoding').value, request: requestFor(protocol, source, request),
      output: $('output').value, chunk };
    try {
      const answer = await apiJson('/v1/parse', { method: 'POST', body });
      if (answer.rejected) {
        problems.push(`${protocol}: ${answer.rejected.message}`);
        card.replaceChildren(el('div', { class: 'part', text: 'request refused' }));
        return;
      }
      parsed[protocol] = answer;
      card.replaceChildren(...summarize(protocol, answer.body),
        el('details', {}, el('summary', { text: 'response JSON' }), el('pre', { text: JSON.stringify(answer.body, null, 2) })));
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      problems.push(`${protocol}: ${error.message}`);
    }
  }));
  showRejected($('parse-rejected'), problems.join('\n'));
  resetReplay();
}

// --- SSE replay: the events the server would send, one at a time. ---

function deltaText(protocol, data) {
  if (!data || typeof data !== 'object') return '';
  if (protocol === 'chat') {
    const delta = data.choices && data.choices[0] && data.choices[0].delta;
    if (!delta) return '';
    const calls = (delta.tool_calls || []).map((c) => (c.function ? (c.function.name || '') + (c.function.arguments || '') : ''));
    return (delta.reasoning_content || '') + (delta.content || '') + calls.join('');
  }
  if (protocol === 'responses') return typeof data.delta === 'string' ? data.delta : '';
  const d = data.delta;
  if (!d) return '';
  return d.text || d.thinking || d.partial_json || '';
}

function stopTimer() {
  if (replay.timer) clearInterval(replay.timer);
  replay.timer = null;
  $('sse-play').textContent = 'Play';
}

function resetReplay() {
  stopTimer();
  const answer = parsed[$('sse-protocol').value];
  replay = { events: answer ? answer.events : [], next: 0, timer: null };
  $('events').replaceChildren();
  $('replay-text').textContent = '';
  showPosition();
}

function showPosition() {
  $('sse-position').textContent = `${replay.next} / ${replay.events.length} events`;
}

function step() {
  if (replay.next >= replay.events.length) {
    stopTimer();
    return;
  }
  const protocol = $('sse-protocol').value;
  const event = replay.events[replay.next++];
  const data = typeof event.data === 'string' ? event.data : JSON.stringify(event.data);
  const item = el('li', {}, event.event ? el('span', { class: 'name', text: event.event }) : null, data);
  $('events').append(item);
  item.scrollIntoView({ block: 'nearest' });
  $('replay-text').textContent += deltaText(protocol, event.data);
  showPosition();
}

function togglePlay() {
  if (replay.timer) {
    stopTimer();
    return;
  }
  if (replay.next >= replay.events.length) resetReplay();
  replay.timer = setInterval(step, 150);
  $('sse-play').textContent = 'Pause';
}

async function generate() {
  if (!lastTokens || $('encoding').value !== 'model') return;
  const button = $('generate');
  button.disabled = true;
  try {
    const answer = await apiJson('/v1/completions', { method: 'POST', body: {
      model: servedModel, prompt: lastTokens.map((t) => t.id), max_tokens: 160, temperature: 0.7 } });
    $('output').value = answer.choices[0].text;
    await parseOutput();
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    showRejected($('parse-rejected'), `Generation failed: ${error.message}`);
  } finally {
    updateGenerate();
  }
}

function updateGenerate() {
  const ok = $('encoding').value === 'model' && lastTokens !== null;
  $('generate').disabled = !ok;
  $('generate').title = ok ? 'Generate the output from the served model'
    : 'Only in the served model\'s format: its token ids are what the model reads';
}

function loadExample() {
  const example = REQUEST_EXAMPLES[Number($('example').value)];
  $('protocol').value = example.protocol;
  $('request').value = JSON.stringify(example.request, null, 2);
}

async function start() {
  initPage('/ui/recipe');
  $('example').replaceChildren(...REQUEST_EXAMPLES.map((e, i) => el('option', { value: i, text: e.name })));
  $('output-example').replaceChildren(...OUTPUT_EXAMPLES.map((e, i) => el('option', { value: i, text: e.name })));
  $('output').value = OUTPUT_EXAMPLES[0].output;
  loadExample();
  $('example').addEventListener('change', () => { loadExample(); render().then(updateGenerate); });
  $('output-example').addEventListener('change', () => {
    $('output').value = OUTPUT_EXAMPLES[Number($('output-example').value)].output;
    parseOutput();
  });
  for (const id of ['protocol', 'encoding']) $(id).addEventListener('change', () => render().then(updateGenerate));
  $('render').addEventListener('click', () => render().then(updateGenerate));
  $('parse').addEventListener('click', parseOutput);
  $('generate').addEventListener('click', generate);
  $('tokens').addEventListener('mouseover', tokenHover);
  $('tokens').addEventListener('focusin', tokenHover);
  $('sse-protocol').addEventListener('change', resetReplay);
  $('sse-step').addEventListener('click', () => { stopTimer(); step(); });
  $('sse-play').addEventListener('click', togglePlay);
  $('sse-reset').addEventListener('click', resetReplay);
  document.addEventListener('api-key-changed', () => { loadServedModel(); render().then(updateGenerate); });
  updateGenerate();
  servedModel = await loadServedModel();
  if (servedModel === null) return;  // the key form is open; the page renders once a key is given
  await render();
  updateGenerate();
  await parseOutput();
  document.body.dataset.ready = 'true';
}

start();
