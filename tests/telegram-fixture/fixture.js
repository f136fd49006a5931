#!/usr/bin/env node
/*
 * Nexbot's Telegram test fixture: a Bot API with Telegram's semantics, in front of the
 * third-party emulator `telegram-test-api` (4.2.1), for the end-to-end tests only.
 *
 * Usage: `node fixture.js` (run `npm ci` here first). It starts the emulator (its
 * `TelegramServer` class) on a free port of 127.0.0.1 and this fixture's own HTTP server on
 * another, prints ONE JSON line on stdout when both are ready:
 *
 *     {"api_url":"http://127.0.0.1:PORT","emulator":"http://127.0.0.1:PORT2"}
 *
 * and exits when its stdin closes, so a test that dies never leaves it running.
 * Environment: FIXTURE_BOT_USERNAME (default `nexbot_test_bot`), FIXTURE_BOT_FIRST_NAME.
 *
 * Why a fixture and not the emulator alone: the emulator's getMe lacks fields teloxide
 * requires, its getUpdates ignores offset/limit/timeout, sendMessage answers a date in ms and
 * no `from`, edit/delete answer `result: null`, unknown methods answer 500 without `ok`, and it
 * matches method names case-sensitively. The fixture keeps Telegram's semantics itself and
 * uses the emulator where it works: user messages go in through its client API
 * (`/sendMessage`, `/sendCommand`, `/sendCallback`) and are pulled out with its bot-side
 * getUpdates, then completed (date in seconds, entities, chat, file objects, replies); the
 * bot's sendMessage / editMessageText / deleteMessage are forwarded so it records them.
 *
 * ---------------------------------------------------------------------------------------------
 * Bot API: <api_url>/bot<TOKEN>/<method>   (GET or POST; JSON, form-urlencoded or multipart;
 * method names are case-insensitive). Files: GET <api_url>/file/bot<TOKEN>/<file_path>
 * (a user's file sent with `download_delay_ms` arrives that much later).
 *   - any token is valid except the literal `invalid` and tokens marked invalid (401).
 *   - getMe: a complete User (id = the token's digits before `:`).
 *   - getUpdates: per-token queue, increasing update_id; `offset` confirms every update with
 *     a smaller id (negative: keep only the last -offset); `limit` (1..100, default 100);
 *     `timeout` seconds of long polling. A second getUpdates while one is held open ends the
 *     older with 409 Conflict, as Telegram does; getUpdates while a webhook is set -> 409.
 *   - sendMessage / editMessageText: parse_mode HTML is parsed like Telegram (only its tags,
 *     properly nested; &lt; &gt; &amp; &quot; and numeric entities; an unknown named entity is
 *     an error here, a bare `&` is literal); the visible text is trimmed, 1..4096 UTF-16 units.
 *     Errors: 400 `Bad Request: can't parse entities: ...`, `message is too long`, `message text
 *     is empty`, `message to edit not found`, `message is not modified: ...`.
 *     parse_mode Markdown/MarkdownV2 are NOT parsed (the text is taken as is); others -> 400.
 *   - deleteMessage -> true (400 `message to delete not found` for an unknown id).
 *   - sendDocument / sendPhoto / sendVoice / sendAudio / sendVideo / sendAnimation: the file
 *     (multipart upload — under the field's name or as `attach://<part>` —, or a file_id / URL
 *     string) is recorded by name and size; the answer is
 *     a Message with the matching field; caption <= 1024.
 *   - editMessageReplyMarkup -> the Message; getFile -> a File for files users sent;
 *     getChat -> the Chat; getWebhookInfo -> {url, has_custom_certificate:false,
 *     pending_update_count}; getMyCommands -> what setMyCommands stored; answerCallbackQuery
 *     -> true once per press a user made (/__fixture/callbacks), 400 `query is too old ...`
 *     for a second answer or an unknown id, 400 `MESSAGE_TOO_LONG` for a text over 200
 *     characters; every other method (sendChatAction, setMyCommands, deleteMyCommands,
 *     setWebhook, deleteWebhook, unknown ones) -> {ok:true, result:true}.
 *   - every call is recorded: {method (lower case), token, params, time_ms (since start),
 *     status (0 when the connection was cut)}; multipart files are recorded as
 *     {file_name, size, mime_type} in place of their contents.
 *
 * Control API: <api_url>/__fixture/... (JSON in, JSON out; 400 {error} on bad input)
 *   GET  /__fixture/health                                  -> {ok:true}
 *   POST /__fixture/messages  {token, chat_id, user_id, chat_type?: "private"|"group"|
 *        "supergroup", first_name?, last_name?, username?, chat_title?, text?,
 *        reply_to_message_id?, kind?: "text"|"photo"|"document"|"voice", file_name?,
 *        mime_type?, file_base64?, duration?}                -> {update_id, message_id}
 *        (a user's message; for non-text kinds `text` becomes the caption)
 *   POST /__fixture/callbacks {token, chat_id, user_id, message_id, data, first_name?}
 *                                                          -> {update_id, callback_query_id}
 *   GET  /__fixture/bot_messages?chat_id=N[&token=T]        -> [BotMessage]
 *        BotMessage = {message_id, chat_id, token, kind: "text"|"document"|"photo"|..., text
 *        (current visible text, caption for files), raw (as sent), parse_mode, entities,
 *        reply_markup, reply_to_message_id, edits: [{text, raw, parse_mode, time_ms}],
 *        deleted, date (s), time_ms, file?: {file_name, size, mime_type}}
 *   GET  /__fixture/calls[?method=M][&token=T]              -> [Call]
 *   GET  /__fixture/updates?token=T                         -> pending (unconfirmed) updates
 *   POST /__fixture/faults {method?: name or "*" (default), kind: "rate_limit"|"conflict"|
 *        "bad_json"|"server_error"|"slow", count?: N, duration_ms?: D, retry_after?: X
 *        (default 1), size?: bytes of the bad_json body (default: a short HTML page),
 *        delay_ms?: how long a "slow" call waits before it is answered as usual}
 *                                                          -> {id}
 *        The next N matching calls (or every matching call for D ms; count 1 when neither is
 *        given) answer 429 `Too Many Requests: retry after X` with parameters.retry_after,
 *        409 `Conflict: terminated by other getUpdates request; ...`, 200 with a body that is
 *        not JSON, or 500. A conflict fault on getUpdates also ends long polls held open.
 *   DELETE /__fixture/faults                                -> {ok:true}
 *   POST /__fixture/down {duration_ms}                      -> {ok:true}
 *        For that window every Bot API request has its socket destroyed without an answer,
 *        and long polls held open when it starts are cut too.
 *   POST /__fixture/tokens {token, valid: bool}             -> {ok:true}
 *   POST /__fixture/config {bot_username?, bot_first_name?, long_polling?: bool}
 *                                                          -> {ok:true}
 *        long_polling false: getUpdates ignores `timeout` and answers at once, empty or not
 *        (as the bare emulator and some Bot API servers do).
 *   POST /__fixture/reset                                   -> {ok:true}
 *        Forgets updates, messages, calls, faults, the down window, invalid tokens, webhooks
 *        and commands (message and update ids keep increasing).
 */
'use strict';

const http = require('http');
const net = require('net');
// The package's main export is the TelegramServer class itself.
const TelegramServer = require('telegram-test-api');

const START = Date.now();
const nowMs = () => Date.now() - START;
const nowS = () => Math.floor(Date.now() / 1000);

const config = {
  bot_username: process.env.FIXTURE_BOT_USERNAME || 'nexbot_test_bot',
  bot_first_name: process.env.FIXTURE_BOT_FIRST_NAME || 'Nexbot Test',
  long_polling: true,
};

let emulator = null; // TelegramServer
let emulatorUrl = '';

// ------------------------------------------------------------------------------ state

function freshState() {
  return {
    bots: new Map(), // token -> {updates, nextUpdateId, poll, webhook, commands}
    messages: new Map(), // `${token}|${message_id}` -> stored message (bot's and users')
    chats: new Map(), // `${token}|${chat_id}` -> Chat object
    files: new Map(), // file_id -> {file, content: Buffer}
    calls: [],
    faults: [],
    invalidTokens: new Set(),
    downUntil: 0,
    callbacks: new Map(), // callback_query_id -> answered (bool), for presses users made
  };
}
let state = freshState();
let nextFaultId = 1;
let nextFileId = 1;
const openBotRequests = new Set(); // {req, res} of Bot API requests not yet answered

function bot(token) {
  let b = state.bots.get(token);
  if (!b) {
    b = { updates: [], nextUpdateId: 1000, poll: null, webhook: '', commands: [] };
    state.bots.set(token, b);
  }
  return b;
}

function botUser(token) {
  const m = /^(\d+):/.exec(token);
  return {
    id: m ? Number(m[1]) : 100000,
    is_bot: true,
    first_name: config.bot_first_name,
    username: config.bot_username,
  };
}

function tokenValid(token) {
  return token !== 'invalid' && !state.invalidTokens.has(token);
}

// ------------------------------------------------------------------------------ helpers

class ApiError extends Error {
  constructor(status, description, parameters) {
    super(description);
    this.status = status;
    this.description = description;
    this.parameters = parameters;
  }
}
const badRequest = (what) => new ApiError(400, `Bad Request: ${what}`);

function toInt(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && /^-?\d+$/.test(v.trim())) return Number(v.trim());
  return v;
}

const JSON_PARAMS = new Set([
  'reply_markup', 'entities', 'caption_entities', 'reply_parameters', 'link_preview_options',
  'allowed_updates', 'commands', 'scope', 'media', 'reaction',
]);
const INT_PARAMS = new Set([
  'chat_id', 'message_id', 'offset', 'limit', 'timeout', 'reply_to_message_id',
  'message_thread_id', 'user_id', 'from_chat_id', 'cache_time', 'duration',
]);

/** Form and multipart values are strings: gives them the types JSON would have. */
function coerce(params) {
  for (const [k, v] of Object.entries(params)) {
    if (typeof v !== 'string') continue;
    if (INT_PARAMS.has(k)) params[k] = toInt(v);
    else if (JSON_PARAMS.has(k)) {
      try { params[k] = JSON.parse(v); } catch (_) { /* keep the string */ }
    } else if (v === 'true' || v === 'false') params[k] = v === 'true';
  }
  return params;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function parseMultipart(buf, boundary) {
  const fields = {};
  const files = {};
  const delim = Buffer.from(`--${boundary}`);
  const next = Buffer.from(`\r\n--${boundary}`);
  let pos = buf.indexOf(delim);
  if (pos < 0) return { fields, files };
  pos += delim.length;
  for (;;) {
    if (buf.slice(pos, pos + 2).toString() === '--') break;
    pos += 2; // CRLF after the boundary
    const headerEnd = buf.indexOf('\r\n\r\n', pos);
    if (headerEnd < 0) break;
    const headers = buf.slice(pos, headerEnd).toString('utf8');
    const end = buf.indexOf(next, headerEnd + 4);
    if (end < 0) break;
    const body = buf.slice(headerEnd + 4, end);
    const disp = /content-disposition:[^\r\n]*/i.exec(headers);
    const name = disp && /\bname="([^"]*)"/i.exec(disp[0]);
    const filename = disp && /\bfilename="([^"]*)"/i.exec(disp[0]);
    const ctype = /content-type:\s*([^\r\n;]+)/i.exec(headers);
    if (name) {
      if (filename) {
        files[name[1]] = {
          file_name: filename[1], size: body.length,
          mime_type: ctype ? ctype[1].trim() : 'application/octet-stream', content: body,
        };
      } else fields[name[1]] = body.toString('utf8');
    }
    pos = end + next.length;
  }
  return { fields, files };
}

async function parseParams(req, url) {
  const params = Object.fromEntries(url.searchParams.entries());
  let files = {};
  const body = await readBody(req);
  const type = (req.headers['content-type'] || '').toLowerCase();
  if (body.length > 0) {
    if (type.startsWith('application/json')) {
      const parsed = JSON.parse(body.toString('utf8'));
      if (parsed && typeof parsed === 'object') Object.assign(params, parsed);
    } else if (type.startsWith('multipart/form-data')) {
      const b = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(req.headers['content-type']);
      const parsed = parseMultipart(body, b ? (b[1] || b[2]).trim() : '');
      Object.assign(params, parsed.fields);
      files = parsed.files;
      // Telegram's `attach://<name>`: the file is the multipart part called <name> (how
      // teloxide uploads every file); it is then the parameter's file, as if sent under it.
      for (const [key, value] of Object.entries(params)) {
        if (typeof value !== 'string' || !value.startsWith('attach://')) continue;
        const part = value.slice('attach://'.length);
        if (files[part]) {
          files[key] = files[part];
          delete files[part];
          delete params[key];
        }
      }
    } else {
      Object.assign(params, Object.fromEntries(new URLSearchParams(body.toString('utf8'))));
    }
  }
  return { params: coerce(params), files };
}

function send(res, status, body, raw) {
  if (res.writableEnded || res.destroyed) return;
  const text = raw !== undefined ? raw : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': raw !== undefined ? 'text/html' : 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

async function emulatorPost(path, body) {
  const resp = await fetch(`${emulatorUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await resp.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: resp.status, json, text };
}

// Serialises the paths that push into the emulator and pull back out, so an update pulled
// belongs to the request that pushed it.
let emulatorChain = Promise.resolve();
function withEmulator(fn) {
  const run = emulatorChain.then(fn, fn);
  emulatorChain = run.catch(() => {});
  return run;
}

// ------------------------------------------------------------------------------ HTML

const HTML_TAGS = new Set([
  'b', 'strong', 'i', 'em', 'u', 'ins', 's', 'strike', 'del', 'span', 'tg-spoiler', 'a',
  'code', 'pre', 'blockquote', 'tg-emoji',
]);
const NAMED_ENTITIES = { lt: '<', gt: '>', amp: '&', quot: '"' };

/**
 * Parses Telegram's HTML: returns {text, entities} or throws the 400 Telegram answers.
 * Offsets and lengths are in UTF-16 code units, which is what JS string indices are.
 */
function parseHtml(src) {
  const byteAt = (i) => Buffer.byteLength(src.slice(0, i), 'utf8');
  const fail = (what) => { throw badRequest(`can't parse entities: ${what}`); };
  const decodeEntity = (i) => {
    const m = /^&(#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,8}|[a-zA-Z][a-zA-Z0-9]{0,31});/.exec(
      src.slice(i, i + 40));
    if (!m) return null; // a bare `&` is literal, as in Telegram
    const body = m[1];
    let ch;
    if (body[0] === '#') {
      const cp = body[1] === 'x' || body[1] === 'X'
        ? parseInt(body.slice(2), 16) : parseInt(body.slice(1), 10);
      if (!(cp > 0 && cp <= 0x10ffff) || (cp >= 0xd800 && cp <= 0xdfff)) {
        fail(`Invalid HTML entity "${m[0]}" at byte offset ${byteAt(i)}`);
      }
      ch = String.fromCodePoint(cp);
    } else {
      ch = NAMED_ENTITIES[body];
      if (ch === undefined) fail(`Unsupported HTML entity "${m[0]}" at byte offset ${byteAt(i)}`);
    }
    return { ch, len: m[0].length };
  };

  let out = '';
  const stack = [];
  const entities = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    if (c === '&') {
      const e = decodeEntity(i);
      if (e) { out += e.ch; i += e.len; } else { out += c; i += 1; }
      continue;
    }
    if (c !== '<') { out += c; i += 1; continue; }
    const begin = i;
    if (src[i + 1] === '/') {
      const gt = src.indexOf('>', i);
      if (gt < 0) fail(`Unclosed end tag at byte offset ${byteAt(begin)}`);
      const name = src.slice(i + 2, gt).trim().toLowerCase();
      if (stack.length === 0) fail(`Unexpected end tag at byte offset ${byteAt(begin)}`);
      const open = stack.pop();
      if (open.name !== name) {
        fail(`Unmatched end tag at byte offset ${byteAt(begin)}, expected "</${open.name}>", `
          + `found "</${name}>"`);
      }
      closeTag(open, out, stack, entities);
      i = gt + 1;
      continue;
    }
    // A start tag.
    i += 1;
    const nameMatch = /^[a-zA-Z0-9-]*/.exec(src.slice(i))[0];
    const name = nameMatch.toLowerCase();
    if (!HTML_TAGS.has(name)) fail(`Unsupported start tag "${name}" at byte offset ${byteAt(begin)}`);
    i += nameMatch.length;
    const attrs = {};
    for (;;) {
      while (i < src.length && /\s/.test(src[i])) i += 1;
      if (i >= src.length) fail(`Unclosed start tag at byte offset ${byteAt(begin)}`);
      if (src[i] === '>') { i += 1; break; }
      const attr = /^[a-zA-Z0-9_-]*/.exec(src.slice(i))[0];
      if (!attr) fail(`Empty attribute name in the tag "${name}" at byte offset ${byteAt(begin)}`);
      i += attr.length;
      while (i < src.length && /\s/.test(src[i])) i += 1;
      let value = '';
      if (src[i] === '=') {
        i += 1;
        while (i < src.length && /\s/.test(src[i])) i += 1;
        if (i >= src.length) fail(`Unclosed start tag at byte offset ${byteAt(begin)}`);
        let rawValue;
        if (src[i] === '"' || src[i] === "'") {
          const close = src.indexOf(src[i], i + 1);
          if (close < 0) fail(`Unclosed start tag at byte offset ${byteAt(begin)}`);
          rawValue = src.slice(i + 1, close);
          i = close + 1;
        } else {
          rawValue = /^[^\s>]*/.exec(src.slice(i))[0];
          i += rawValue.length;
        }
        value = rawValue.replace(/&(#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,8}|lt|gt|amp|quot);/g,
          (whole, b) => {
            if (b[0] !== '#') return NAMED_ENTITIES[b];
            const cp = b[1] === 'x' || b[1] === 'X' ? parseInt(b.slice(2), 16) : parseInt(b.slice(1), 10);
            return cp > 0 && cp <= 0x10ffff ? String.fromCodePoint(cp) : whole;
          });
      }
      attrs[attr.toLowerCase()] = value;
    }
    if (name === 'span' && attrs.class !== 'tg-spoiler') {
      fail(`Tag "span" must have class "tg-spoiler" at byte offset ${byteAt(begin)}`);
    }
    stack.push({ name, attrs, start: out.length });
  }
  if (stack.length > 0) {
    fail(`Can't find end tag corresponding to start tag "${stack[stack.length - 1].name}"`);
  }
  return { text: out, entities };
}

function closeTag(open, out, stack, entities) {
  const offset = open.start;
  const length = out.length - open.start;
  const parent = stack[stack.length - 1];
  let entity = null;
  switch (open.name) {
    case 'b': case 'strong': entity = { type: 'bold' }; break;
    case 'i': case 'em': entity = { type: 'italic' }; break;
    case 'u': case 'ins': entity = { type: 'underline' }; break;
    case 's': case 'strike': case 'del': entity = { type: 'strikethrough' }; break;
    case 'span': case 'tg-spoiler': entity = { type: 'spoiler' }; break;
    case 'a':
      if (open.attrs.href) entity = { type: 'text_link', url: open.attrs.href };
      break;
    case 'code': {
      const lang = /^language-(.+)$/.exec(open.attrs.class || '');
      if (parent && parent.name === 'pre' && lang && parent.start === offset) {
        parent.language = lang[1];
      } else entity = { type: 'code' };
      break;
    }
    case 'pre':
      entity = open.language ? { type: 'pre', language: open.language } : { type: 'pre' };
      break;
    case 'blockquote':
      entity = { type: 'expandable' in open.attrs ? 'expandable_blockquote' : 'blockquote' };
      break;
    case 'tg-emoji':
      entity = { type: 'custom_emoji', custom_emoji_id: open.attrs['emoji-id'] || '' };
      break;
    default: break;
  }
  if (entity && length > 0) entities.push({ offset, length, ...entity });
}

/** Trims the visible text like Telegram and shifts the entities with it. */
function trimFormatted({ text, entities }) {
  const lead = text.length - text.replace(/^\s+/, '').length;
  const trimmed = text.trim();
  const fixed = [];
  for (const e of entities) {
    const start = Math.max(0, e.offset - lead);
    const end = Math.min(trimmed.length, e.offset + e.length - lead);
    if (end > start) fixed.push({ ...e, offset: start, length: end - start });
  }
  fixed.sort((a, b) => a.offset - b.offset || b.length - a.length);
  return { text: trimmed, entities: fixed };
}

/** The visible text and entities of `raw` under `parseMode`, or the 400 Telegram answers. */
function formatText(raw, parseMode, explicitEntities, { limit, emptyError, longError }) {
  if (raw === undefined || raw === null) raw = '';
  raw = String(raw);
  let formatted;
  const mode = parseMode ? String(parseMode).toLowerCase() : '';
  if (mode === 'html') formatted = parseHtml(raw);
  else if (mode === '' || mode === 'markdown' || mode === 'markdownv2') {
    formatted = { text: raw, entities: Array.isArray(explicitEntities) ? explicitEntities : [] };
  } else throw badRequest('unsupported parse_mode');
  formatted = trimFormatted(formatted);
  if (emptyError && formatted.text.length === 0) throw badRequest(emptyError);
  if (formatted.text.length > limit) throw badRequest(longError);
  return formatted;
}

// ------------------------------------------------------------------------------ messages

function chatFor(token, chatId) {
  const known = state.chats.get(`${token}|${chatId}`);
  if (known) return known;
  return chatId < 0
    ? { id: chatId, type: 'group', title: 'Test group' }
    : { id: chatId, type: 'private', first_name: 'User' };
}

/** The Bot API Message object of a stored message (bot's or a user's). */
function messageJson(m, withReply = true) {
  const msg = { message_id: m.message_id, from: m.from, chat: m.chat, date: m.date };
  if (m.edit_date) msg.edit_date = m.edit_date;
  if (withReply && m.reply_to_message_id) {
    const r = state.messages.get(`${m.token}|${m.reply_to_message_id}`);
    if (r) msg.reply_to_message = messageJson(r, false);
  }
  if (m.file_field) {
    msg[m.file_field] = m.file_object;
    if (m.text) msg.caption = m.text;
    if (m.entities && m.entities.length) msg.caption_entities = m.entities;
  } else {
    msg.text = m.text;
    if (m.entities && m.entities.length) msg.entities = m.entities;
  }
  if (m.reply_markup && m.reply_markup.inline_keyboard) msg.reply_markup = m.reply_markup;
  return msg;
}

function replyToId(params) {
  if (params.reply_parameters && params.reply_parameters.message_id) {
    return toInt(params.reply_parameters.message_id);
  }
  return params.reply_to_message_id;
}

function requireChat(params) {
  if (params.chat_id === undefined || params.chat_id === '') {
    throw badRequest('chat_id is empty');
  }
  if (typeof params.chat_id !== 'number') throw badRequest('chat not found');
  return params.chat_id;
}

function storeBotMessage(token, chatId, messageId, fields) {
  const m = {
    token, chat_id: chatId, message_id: messageId, from: botUser(token),
    chat: chatFor(token, chatId), date: nowS(), time_ms: nowMs(), edits: [], deleted: false,
    by_bot: true, ...fields,
  };
  state.messages.set(`${token}|${messageId}`, m);
  return m;
}

async function sendMessage(token, params) {
  const chatId = requireChat(params);
  const f = formatText(params.text, params.parse_mode, params.entities, {
    limit: 4096, emptyError: 'message text is empty', longError: 'message is too long',
  });
  const fwd = { chat_id: chatId, text: f.text };
  if (params.reply_markup) fwd.reply_markup = params.reply_markup;
  const resp = await emulatorPost(`/bot${token}/sendMessage`, fwd);
  if (!resp.json || !resp.json.ok) {
    throw new ApiError(500, `Internal Server Error: the emulator answered ${resp.status} ${resp.text}`);
  }
  const m = storeBotMessage(token, chatId, resp.json.result.message_id, {
    kind: 'text', text: f.text, entities: f.entities, raw: String(params.text),
    parse_mode: params.parse_mode || null, reply_markup: params.reply_markup || null,
    reply_to_message_id: replyToId(params) || null,
  });
  return messageJson(m);
}

function findMessage(token, params, notFound) {
  const chatId = requireChat(params);
  const m = state.messages.get(`${token}|${params.message_id}`);
  if (!m || m.chat_id !== chatId || m.deleted) throw badRequest(notFound);
  return m;
}

async function editMessageText(token, params) {
  if (params.inline_message_id) throw badRequest('inline messages are not supported by the fixture');
  const m = findMessage(token, params, 'message to edit not found');
  if (!m.by_bot) throw badRequest("message can't be edited");
  if (m.file_field) throw badRequest('there is no text in the message to edit');
  const f = formatText(params.text, params.parse_mode, params.entities, {
    limit: 4096, emptyError: 'message text is empty', longError: 'message is too long',
  });
  const markup = params.reply_markup || null;
  if (f.text === m.text && JSON.stringify(f.entities) === JSON.stringify(m.entities)
    && JSON.stringify(markup) === JSON.stringify(m.reply_markup)) {
    throw badRequest('message is not modified: specified new message content and reply markup '
      + 'are exactly the same as a current content and reply markup of the message');
  }
  await emulatorPost(`/bot${token}/editMessageText`,
    { chat_id: m.chat_id, message_id: m.message_id, text: f.text });
  m.text = f.text;
  m.entities = f.entities;
  m.reply_markup = markup;
  m.edit_date = nowS();
  m.edits.push({
    text: f.text, raw: String(params.text), parse_mode: params.parse_mode || null,
    time_ms: nowMs(),
  });
  return messageJson(m);
}

function editMessageReplyMarkup(token, params) {
  const m = findMessage(token, params, 'message to edit not found');
  const markup = params.reply_markup || null;
  if (JSON.stringify(markup) === JSON.stringify(m.reply_markup)) {
    throw badRequest('message is not modified: specified new message content and reply markup '
      + 'are exactly the same as a current content and reply markup of the message');
  }
  m.reply_markup = markup;
  m.edit_date = nowS();
  return messageJson(m);
}

async function deleteMessage(token, params) {
  const m = findMessage(token, params, 'message to delete not found');
  await emulatorPost(`/bot${token}/deleteMessage`, { chat_id: m.chat_id, message_id: m.message_id });
  m.deleted = true;
  return true;
}

const MEDIA_METHODS = {
  senddocument: 'document', sendphoto: 'photo', sendvoice: 'voice', sendaudio: 'audio',
  sendvideo: 'video', sendanimation: 'animation',
};

function sendMedia(token, field, params, files) {
  const chatId = requireChat(params);
  const upload = files[field];
  let info;
  if (upload) info = { file_name: upload.file_name, size: upload.size, mime_type: upload.mime_type };
  else if (typeof params[field] === 'string' && params[field] !== '') {
    const known = state.files.get(params[field]);
    info = known
      ? { file_name: known.file.file_name || null, size: known.file.file_size, mime_type: known.file.mime_type || null }
      : { file_name: params[field].split('/').pop(), size: 0, mime_type: null };
  } else throw badRequest(`there is no ${field} in the request`);
  const f = formatText(params.caption, params.parse_mode, params.caption_entities, {
    limit: 1024, emptyError: null, longError: 'message caption is too long',
  });
  const file = registerFile(field, info.file_name, info.mime_type,
    upload ? upload.content : Buffer.alloc(info.size));
  let object;
  if (field === 'photo') {
    object = [{ file_id: file.file_id, file_unique_id: file.file_unique_id, width: 800, height: 600, file_size: info.size }];
  } else {
    object = { ...file };
    if (field === 'voice' || field === 'audio' || field === 'video') object.duration = 1;
  }
  const messageId = emulator.messageId++;
  const m = storeBotMessage(token, chatId, messageId, {
    kind: field, text: f.text, entities: f.entities, raw: params.caption === undefined ? '' : String(params.caption),
    parse_mode: params.parse_mode || null, reply_markup: params.reply_markup || null,
    reply_to_message_id: replyToId(params) || null, file: info, file_field: field,
    file_object: object,
  });
  return messageJson(m);
}

function registerFile(kind, fileName, mimeType, content, delayMs = 0) {
  const n = nextFileId++;
  const file = {
    file_id: `fixture-${kind}-${n}`, file_unique_id: `u${n}`, file_size: content.length,
  };
  if (fileName) file.file_name = fileName;
  if (mimeType) file.mime_type = mimeType;
  const ext = fileName && fileName.includes('.') ? fileName.split('.').pop() : 'bin';
  state.files.set(file.file_id, { file, content, path: `${kind}s/file_${n}.${ext}`, delayMs });
  return file;
}

// ------------------------------------------------------------------------------ updates

function pushUpdate(token, payload) {
  const b = bot(token);
  const update = { update_id: b.nextUpdateId++, ...payload };
  b.updates.push(update);
  if (b.poll) b.poll.wake();
  return update;
}

function commandEntities(text) {
  if (typeof text !== 'string' || !text.startsWith('/')) return [];
  const m = /^\/[a-zA-Z0-9_]+(@[a-zA-Z0-9_]+)?/.exec(text);
  return m && m[0].length > 1 ? [{ offset: 0, length: m[0].length, type: 'bot_command' }] : [];
}

async function userMessage(body) {
  const token = body.token;
  if (typeof token !== 'string' || !token) throw new ControlError('token is required');
  const chatId = toInt(body.chat_id);
  const userId = toInt(body.user_id !== undefined ? body.user_id : body.chat_id);
  if (typeof chatId !== 'number' || typeof userId !== 'number') {
    throw new ControlError('chat_id and user_id must be integers');
  }
  const chatType = body.chat_type || 'private';
  if (!['private', 'group', 'supergroup'].includes(chatType)) {
    throw new ControlError('chat_type must be private, group or supergroup');
  }
  const kind = body.kind || 'text';
  if (!['text', 'photo', 'document', 'voice'].includes(kind)) {
    throw new ControlError('kind must be text, photo, document or voice');
  }
  const from = { id: userId, is_bot: false, first_name: body.first_name || 'Test' };
  if (body.last_name) from.last_name = body.last_name;
  from.username = body.username || `user${userId}`;
  from.language_code = 'en';
  const chat = chatType === 'private'
    ? { id: chatId, type: 'private', first_name: from.first_name, username: from.username }
    : { id: chatId, type: chatType, title: body.chat_title || 'Test group' };
  if (chatType === 'private' && chatId !== userId) {
    throw new ControlError('in a private chat, chat_id must equal user_id');
  }
  const replyTo = body.reply_to_message_id !== undefined && body.reply_to_message_id !== null
    ? toInt(body.reply_to_message_id) : null;
  if (replyTo !== null) {
    const r = state.messages.get(`${token}|${replyTo}`);
    if (!r || r.chat_id !== chatId) throw new ControlError(`no message ${replyTo} in chat ${chatId}`);
  }
  state.chats.set(`${token}|${chatId}`, chat);
  const text = body.text === undefined || body.text === null ? '' : String(body.text);
  if (kind === 'text' && text.length === 0) throw new ControlError('a text message needs text');

  return withEmulator(async () => {
    // Through the emulator's client API, as a user would; then pulled back out with its
    // bot-side getUpdates, which marks it read there.
    const entities = kind === 'text' ? commandEntities(text) : [];
    const clientMsg = { botToken: token, date: nowS(), chat: { id: chatId, type: chatType }, from, text };
    if (entities.length) clientMsg.entities = entities;
    const path = entities.length ? '/sendCommand' : '/sendMessage';
    const sent = await emulatorPost(path, clientMsg);
    if (sent.status !== 200) throw new Error(`emulator ${path}: ${sent.status} ${sent.text}`);
    const pulled = await emulatorPost(`/bot${token}/getUpdates`, {});
    const got = pulled.json && pulled.json.ok ? pulled.json.result : [];
    const raw = got.find((u) => u.message && u.message.text === text && u.message.from
      && u.message.from.id === userId && u.message.chat.id === chatId);
    if (!raw) throw new Error(`the emulator did not hand back the message: ${pulled.text}`);
    const messageId = raw.message.message_id;
    const m = {
      token, chat_id: chatId, message_id: messageId, from, chat, date: nowS(), time_ms: nowMs(),
      kind, by_bot: false, deleted: false, edits: [], reply_to_message_id: replyTo,
      text, entities,
    };
    if (kind !== 'text') {
      const content = body.file_base64 ? Buffer.from(String(body.file_base64), 'base64')
        : Buffer.from(`fixture ${kind} ${messageId}\n`);
      const defaults = {
        photo: ['photo.jpg', 'image/jpeg'], document: ['document.txt', 'text/plain'],
        voice: [null, 'audio/ogg'],
      }[kind];
      const file = registerFile(kind, body.file_name || defaults[0], body.mime_type || defaults[1],
        content, toInt(body.download_delay_ms) || 0);
      m.file_field = kind;
      if (kind === 'photo') {
        m.file_object = [{ file_id: file.file_id, file_unique_id: file.file_unique_id, width: 640, height: 480, file_size: file.file_size }];
      } else if (kind === 'voice') {
        m.file_object = { file_id: file.file_id, file_unique_id: file.file_unique_id, duration: toInt(body.duration) || 1, mime_type: file.mime_type, file_size: file.file_size };
      } else m.file_object = file;
    }
    state.messages.set(`${token}|${messageId}`, m);
    const update = pushUpdate(token, { message: messageJson(m) });
    return { update_id: update.update_id, message_id: messageId };
  });
}

async function userCallback(body) {
  const token = body.token;
  if (typeof token !== 'string' || !token) throw new ControlError('token is required');
  const chatId = toInt(body.chat_id);
  const userId = toInt(body.user_id !== undefined ? body.user_id : body.chat_id);
  const m = state.messages.get(`${token}|${toInt(body.message_id)}`);
  if (!m || m.chat_id !== chatId) throw new ControlError(`no message ${body.message_id} in chat ${chatId}`);
  const from = { id: userId, is_bot: false, first_name: body.first_name || 'Test', username: `user${userId}`, language_code: 'en' };
  const data = body.data === undefined ? '' : String(body.data);
  return withEmulator(async () => {
    const sent = await emulatorPost('/sendCallback', {
      botToken: token, from, data, message: messageJson(m, false),
    });
    if (sent.status !== 200) throw new Error(`emulator /sendCallback: ${sent.status} ${sent.text}`);
    const pulled = await emulatorPost(`/bot${token}/getUpdates`, {});
    const got = pulled.json && pulled.json.ok ? pulled.json.result : [];
    const raw = got.find((u) => u.callback_query && u.callback_query.data === data);
    if (!raw) throw new Error(`the emulator did not hand back the callback: ${pulled.text}`);
    const cq = {
      id: String(raw.callback_query.id), from, message: messageJson(m),
      chat_instance: `ci${Math.abs(chatId)}`, data,
    };
    const update = pushUpdate(token, { callback_query: cq });
    state.callbacks.set(cq.id, false);
    return { update_id: update.update_id, callback_query_id: cq.id };
  });
}

/** getUpdates with Telegram's semantics, long polling included. */
function getUpdates(token, params, res) {
  const b = bot(token);
  if (b.webhook) {
    throw new ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
      + 'use deleteWebhook to delete the webhook first');
  }
  const offset = typeof params.offset === 'number' ? params.offset : 0;
  if (offset > 0) b.updates = b.updates.filter((u) => u.update_id >= offset);
  else if (offset < 0) b.updates = b.updates.slice(offset);
  let limit = typeof params.limit === 'number' ? params.limit : 100;
  if (limit < 1 || limit > 100) limit = 100;
  const timeout = config.long_polling && typeof params.timeout === 'number' && params.timeout > 0
    ? params.timeout : 0;
  const answer = () => b.updates.slice(0, limit);
  // A newer getUpdates ends the one held open (Telegram's "terminated by other" conflict).
  if (b.poll) b.poll.conflict();
  if (b.updates.length > 0 || timeout === 0) return answer();
  return new Promise((resolve, reject) => {
    const poll = {
      wake: () => { cleanup(); resolve(answer()); },
      conflict: () => { cleanup(); reject(conflictError()); },
      cut: () => { cleanup(); res.destroy(); resolve(undefined); },
    };
    const timer = setTimeout(() => poll.wake(), timeout * 1000);
    const cleanup = () => {
      clearTimeout(timer);
      if (b.poll === poll) b.poll = null;
    };
    res.on('close', cleanup); // the client gave up
    b.poll = poll;
  });
}

function conflictError() {
  return new ApiError(409, 'Conflict: terminated by other getUpdates request; make sure that '
    + 'only one bot instance is running');
}

// ------------------------------------------------------------------------------ faults

function takeFault(method) {
  const now = Date.now();
  state.faults = state.faults.filter((f) => (f.until === null || f.until > now)
    && (f.remaining === null || f.remaining > 0));
  const f = state.faults.find((x) => x.method === '*' || x.method === method);
  if (!f) return null;
  if (f.remaining !== null) f.remaining -= 1;
  return f;
}

function faultAnswer(f) {
  switch (f.kind) {
    case 'rate_limit':
      return new ApiError(429, `Too Many Requests: retry after ${f.retry_after}`,
        { retry_after: f.retry_after });
    case 'conflict': return conflictError();
    case 'server_error': return new ApiError(500, 'Internal Server Error');
    default: return null; // bad_json: handled by the caller
  }
}

// ------------------------------------------------------------------------------ Bot API

async function botApi(req, res, url, token, methodName) {
  const method = methodName.toLowerCase();
  const call = { method, token, params: {}, time_ms: nowMs(), status: 0 };
  state.calls.push(call);
  const entry = { req, res };
  openBotRequests.add(entry);
  res.on('close', () => openBotRequests.delete(entry));
  const respond = (status, body, raw) => { call.status = status; send(res, status, body, raw); };
  if (Date.now() < state.downUntil) { req.socket.destroy(); return; }
  // The fault is chosen when the request arrives, not after its body is read: a request
  // whose sender is killed mid-send must not slip past a fault cleared meanwhile.
  const fault = tokenValid(token) ? takeFault(method) : null;
  let parsed;
  try {
    parsed = await parseParams(req, url);
  } catch (err) {
    respond(400, { ok: false, error_code: 400, description: `Bad Request: can't parse request: ${err.message}` });
    return;
  }
  call.params = { ...parsed.params };
  for (const [name, f] of Object.entries(parsed.files)) {
    call.params[name] = { file_name: f.file_name, size: f.size, mime_type: f.mime_type };
  }
  if (Date.now() < state.downUntil) { req.socket.destroy(); return; }
  try {
    if (!tokenValid(token)) throw new ApiError(401, 'Unauthorized');
    if (fault && fault.kind === 'slow') {
      await new Promise((resolve) => setTimeout(resolve, fault.delay_ms));
    } else if (fault) {
      const err = faultAnswer(fault);
      if (err) throw err;
      const page = '<html><body>502 Bad Gateway</body></html>\n';
      respond(200, null, fault.size ? 'x'.repeat(fault.size) : page);
      return;
    }
    const result = await dispatch(token, method, parsed.params, parsed.files, res);
    if (result === undefined) return; // the connection was cut
    respond(200, { ok: true, result });
  } catch (err) {
    if (err instanceof ApiError) {
      const body = { ok: false, error_code: err.status, description: err.description };
      if (err.parameters) body.parameters = err.parameters;
      respond(err.status, body);
    } else {
      process.stderr.write(`fixture: ${method}: ${err.stack || err}\n`);
      respond(500, { ok: false, error_code: 500, description: `Internal Server Error: ${err.message}` });
    }
  }
}

async function dispatch(token, method, params, files, res) {
  const b = bot(token);
  if (MEDIA_METHODS[method]) return sendMedia(token, MEDIA_METHODS[method], params, files);
  switch (method) {
    case 'getme':
      return {
        ...botUser(token), can_join_groups: true, can_read_all_group_messages: false,
        supports_inline_queries: false, can_connect_to_business: false, has_main_web_app: false,
      };
    case 'getupdates': return getUpdates(token, params, res);
    case 'sendmessage': return sendMessage(token, params);
    case 'editmessagetext': return editMessageText(token, params);
    case 'editmessagereplymarkup': return editMessageReplyMarkup(token, params);
    case 'deletemessage': return deleteMessage(token, params);
    case 'getwebhookinfo':
      return { url: b.webhook, has_custom_certificate: false, pending_update_count: b.webhook ? b.updates.length : 0 };
    case 'setwebhook':
      if (!params.url) throw badRequest('bad webhook: an HTTPS URL must be provided for webhook');
      b.webhook = String(params.url);
      return true;
    case 'deletewebhook':
      b.webhook = '';
      if (params.drop_pending_updates) b.updates = [];
      return true;
    case 'answercallbackquery': {
      // A press is answered once; its notice is at most 200 characters (Telegram's limits).
      const id = String(params.callback_query_id || '');
      if (state.callbacks.get(id) !== false) {
        throw badRequest('query is too old and response timeout expired or query ID is invalid');
      }
      if (params.text !== undefined && [...String(params.text)].length > 200) {
        throw badRequest('MESSAGE_TOO_LONG');
      }
      state.callbacks.set(id, true);
      return true;
    }
    case 'setmycommands':
      b.commands = Array.isArray(params.commands) ? params.commands : [];
      return true;
    case 'deletemycommands': b.commands = []; return true;
    case 'getmycommands': return b.commands;
    case 'getchat': {
      const chatId = requireChat(params);
      const chat = state.chats.get(`${token}|${chatId}`);
      if (!chat) throw badRequest('chat not found');
      return chat;
    }
    case 'getfile': {
      const f = state.files.get(params.file_id);
      if (!f) throw badRequest('invalid file_id');
      return { ...f.file, file_path: f.path };
    }
    default: return true; // sendChatAction, ... and unknown methods
  }
}

function fileDownload(res, token, path) {
  if (!tokenValid(token)) { send(res, 401, { ok: false, error_code: 401, description: 'Unauthorized' }); return; }
  for (const f of state.files.values()) {
    if (f.path === path) {
      // A slow download (`download_delay_ms` when the user sent it): the headers at once, the
      // bytes after the delay, as a large file over a slow link arrives.
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': f.content.length });
      setTimeout(() => res.end(f.content), f.delayMs || 0);
      return;
    }
  }
  send(res, 404, { ok: false, error_code: 404, description: 'Not Found' });
}

// ------------------------------------------------------------------------------ control API

class ControlError extends Error {}

function messageRecord(m) {
  const r = {
    message_id: m.message_id, chat_id: m.chat_id, token: m.token, kind: m.kind, text: m.text,
    raw: m.raw, parse_mode: m.parse_mode, entities: m.entities, reply_markup: m.reply_markup,
    reply_to_message_id: m.reply_to_message_id, edits: m.edits, deleted: m.deleted,
    date: m.date, time_ms: m.time_ms,
  };
  if (m.file) r.file = m.file;
  if (m.file_object) r.file_object = m.file_object;
  return r;
}

async function control(req, res, url) {
  const path = url.pathname.slice('/__fixture'.length);
  let body = {};
  const raw = await readBody(req);
  if (raw.length > 0) body = JSON.parse(raw.toString('utf8'));
  const q = url.searchParams;
  const key = `${req.method} ${path}`;
  switch (key) {
    case 'GET /health': return { ok: true };
    case 'POST /messages': return userMessage(body);
    case 'POST /callbacks': return userCallback(body);
    case 'GET /bot_messages': {
      const chatId = toInt(q.get('chat_id'));
      const token = q.get('token');
      return [...state.messages.values()]
        .filter((m) => m.by_bot && (chatId === null || m.chat_id === chatId)
          && (!token || m.token === token))
        .sort((a, b) => a.message_id - b.message_id)
        .map(messageRecord);
    }
    case 'GET /calls': {
      const method = (q.get('method') || '').toLowerCase();
      const token = q.get('token');
      return state.calls.filter((c) => (!method || c.method === method) && (!token || c.token === token));
    }
    case 'GET /updates': {
      const b = state.bots.get(q.get('token') || '');
      return b ? b.updates : [];
    }
    case 'POST /faults': {
      const kinds = ['rate_limit', 'conflict', 'bad_json', 'server_error', 'slow'];
      if (!kinds.includes(body.kind)) throw new ControlError(`kind must be one of ${kinds.join(', ')}`);
      const count = body.count === undefined || body.count === null ? null : toInt(body.count);
      const duration = body.duration_ms === undefined || body.duration_ms === null ? null : toInt(body.duration_ms);
      const fault = {
        id: nextFaultId++, method: body.method ? String(body.method).toLowerCase() : '*',
        kind: body.kind, remaining: count === null && duration === null ? 1 : count,
        until: duration === null ? null : Date.now() + duration,
        retry_after: toInt(body.retry_after) || 1,
        size: toInt(body.size) || 0,
        delay_ms: toInt(body.delay_ms) || 0,
      };
      state.faults.push(fault);
      if (fault.kind === 'conflict' && (fault.method === '*' || fault.method === 'getupdates')) {
        for (const b of state.bots.values()) {
          if (b.poll && takeFault('getupdates')) b.poll.conflict();
        }
      }
      return { id: fault.id };
    }
    case 'DELETE /faults': state.faults = []; return { ok: true };
    case 'POST /down': {
      const duration = toInt(body.duration_ms);
      if (typeof duration !== 'number' || duration < 0) throw new ControlError('duration_ms is required');
      state.downUntil = Date.now() + duration;
      for (const b of state.bots.values()) if (b.poll) b.poll.cut();
      for (const { req: r } of [...openBotRequests]) r.socket.destroy();
      return { ok: true };
    }
    case 'POST /tokens':
      if (typeof body.token !== 'string') throw new ControlError('token is required');
      if (body.valid) state.invalidTokens.delete(body.token);
      else state.invalidTokens.add(body.token);
      return { ok: true };
    case 'POST /config':
      if (body.bot_username) config.bot_username = String(body.bot_username);
      if (body.bot_first_name) config.bot_first_name = String(body.bot_first_name);
      if (typeof body.long_polling === 'boolean') config.long_polling = body.long_polling;
      return { ok: true };
    case 'POST /reset':
      for (const b of state.bots.values()) if (b.poll) b.poll.cut();
      state = freshState();
      emulator.storage = { userMessages: [], botMessages: [] };
      return { ok: true };
    default: throw new ControlError(`no control endpoint ${key}`);
  }
}

// ------------------------------------------------------------------------------ servers

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startEmulator() {
  let lastErr;
  for (let attempt = 0; attempt < 10; attempt += 1) {
    const port = await freePort();
    // A long store timeout: the emulator otherwise forgets messages after 60 s.
    const server = new TelegramServer({ port, host: '127.0.0.1', storeTimeout: 24 * 3600 });
    try {
      await server.start();
      return { server, url: `http://127.0.0.1:${port}` };
    } catch (err) { lastErr = err; }
  }
  throw lastErr;
}

async function main() {
  const started = await startEmulator();
  emulator = started.server;
  emulatorUrl = started.url;

  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const p = url.pathname;
    if (p === '/__fixture' || p.startsWith('/__fixture/')) {
      control(req, res, url).then((result) => send(res, 200, result), (err) => {
        const status = err instanceof ControlError || err instanceof SyntaxError ? 400 : 500;
        if (status === 500) process.stderr.write(`fixture: control ${p}: ${err.stack || err}\n`);
        send(res, status, { error: err.message });
      });
      return;
    }
    const file = /^\/file\/bot([^/]+)\/(.+)$/.exec(p);
    if (file) { fileDownload(res, decodeURIComponent(file[1]), file[2]); return; }
    const m = /^\/bot([^/]+)\/([A-Za-z0-9_]+)\/?$/.exec(p);
    if (!m) { send(res, 404, { ok: false, error_code: 404, description: 'Not Found' }); return; }
    botApi(req, res, url, decodeURIComponent(m[1]), m[2]).catch((err) => {
      process.stderr.write(`fixture: ${err.stack || err}\n`);
      send(res, 500, { ok: false, error_code: 500, description: 'Internal Server Error' });
    });
  });
  server.keepAliveTimeout = 30000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const apiUrl = `http://127.0.0.1:${server.address().port}`;
  process.stdout.write(`${JSON.stringify({ api_url: apiUrl, emulator: emulatorUrl })}\n`);

  // Exit when stdin closes: the test that started us is gone.
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('close', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}

// The emulator's client routes do not await what they start; never let that kill the fixture.
process.on('unhandledRejection', (err) => {
  process.stderr.write(`fixture: unhandled rejection: ${err && err.stack ? err.stack : err}\n`);
});

main().catch((err) => {
  process.stderr.write(`fixture: failed to start: ${err.stack || err}\n`);
  process.exit(1);
});
