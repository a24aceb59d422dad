// Voice Stack llm-auth proxy: bearer check and reserved-slot routing for llama-server.
// Runs on njs 0.7.9 (Debian nginx 1.22, used by the tests) and the njs of the official nginx
// image, so it sticks to the ES5/ES6 subset both engines share.
import crypto from 'crypto';

// How much of each part of a conversation's start goes into its routing key: enough to tell
// conversations apart, little enough to keep hashing cheap on 10-100 KB request bodies.
var SYSTEM_CHARS = 2048;
var FIRST_TURN_CHARS = 1024;
// Raw /completion prompts grow at the end as a conversation goes on: hash only their start.
var PROMPT_CHARS = 512;
// Depth kept when reading a body too deeply nested for njs's JSON.parse (which stops near 32).
var SHALLOW_DEPTH = 8;
var WHITESPACE = ' \t\r\n';  // JSON's

function digest(value) {
    return crypto.createHash('sha256').update(value).digest('hex');
}

// Exactly one Authorization header, equal byte for byte to "Bearer <LLM_PROXY_KEY>".
// Comparing SHA-256 digests is case-sensitive and gives no prefix-timing signal.
function authorized(r) {
    var key = r.variables.vs_proxy_key || '';
    if (key.length === 0) {
        return '0';
    }
    var seen = 0;
    var presented = '';
    var raw = r.rawHeadersIn;
    for (var i = 0; i < raw.length; i++) {
        if (raw[i][0].toLowerCase() === 'authorization') {
            seen++;
            presented = raw[i][1];
        }
    }
    if (seen !== 1) {
        return '0';
    }
    return digest(presented) === digest('Bearer ' + key) ? '1' : '0';
}

// Slots a request without id_slot may use: 0..total-1 minus the reserved ones.
function freeSlots(r) {
    var total = parseInt(r.variables.vs_total_slots, 10);
    if (!(total > 0)) {
        return [];
    }
    var reserved = {};
    String(r.variables.vs_reserved_slots || '').split(',').forEach(function (item) {
        var slot = parseInt(item.trim(), 10);
        if (slot >= 0) {
            reserved[slot] = true;
        }
    });
    var free = [];
    for (var slot = 0; slot < total; slot++) {
        if (!reserved[slot]) {
            free.push(slot);
        }
    }
    return free;
}

function reservedSlots(r) {
    var free = freeSlots(r);
    var total = parseInt(r.variables.vs_total_slots, 10) || 0;
    var reserved = [];
    for (var slot = 0; slot < total; slot++) {
        if (free.indexOf(slot) < 0) {
            reserved.push(slot);
        }
    }
    return reserved;
}

function isSystem(message) {
    return message !== null && typeof message === 'object' &&
        (message.role === 'system' || message.role === 'developer');
}

// Text of a message content or prompt, cut to limit. Content parts keep only their text, so
// an attached image (base64, megabytes) is never serialised just to be hashed.
function text(value, limit) {
    if (value === undefined || value === null) {
        return '';
    }
    var s;
    if (typeof value === 'string') {
        s = value;
    } else if (Array.isArray(value)) {
        s = value.map(function (part) {
            return part !== null && typeof part === 'object' ? String(part.text || '') : String(part);
        }).join('\n');
    } else {
        s = JSON.stringify(value);
    }
    return s.length > limit ? s.substring(0, limit) : s;
}

// Leading system messages and the first other turn of a message list.
function conversationStart(head, messages) {
    var parts = [head];
    for (var i = 0; i < messages.length; i++) {
        var message = messages[i];
        var system = isSystem(message);
        var content = message !== null && typeof message === 'object' ? message.content : message;
        parts.push(text(content, system ? SYSTEM_CHARS : FIRST_TURN_CHARS));
        if (!system) {
            break;
        }
    }
    return parts.join('\u0000');
}

// The part of a request that stays the same for a whole conversation: the start of its system
// text and of its first turn for chat and responses; the start of the prompt for completions.
function stablePrefix(req) {
    if (Array.isArray(req.messages)) {
        return conversationStart('', req.messages);
    }
    if (req.input !== undefined) {  // /v1/responses
        var head = text(req.instructions, SYSTEM_CHARS);
        if (Array.isArray(req.input)) {
            return conversationStart(head, req.input);
        }
        return head + '\u0000' + text(req.input, FIRST_TURN_CHARS);
    }
    var prompt = req.prompt;
    if (Array.isArray(prompt)) {
        // several prompts: the first one; token ids: the first ones
        prompt = typeof prompt[0] === 'number' ? prompt.slice(0, 128) : prompt[0];
    }
    return text(prompt, PROMPT_CHARS);
}

function pickSlot(free, prefix) {
    var h = parseInt(crypto.createHash('md5').update(prefix).digest('hex').substring(0, 8), 16);
    return free[h % free.length];
}

// A leading UTF-8 byte-order mark, which llama-server skips: one character in a text string,
// three in a byte string (njs 0.7.9's requestText).
function bomLength(body) {
    if (body.charCodeAt(0) === 0xFEFF) {
        return 1;
    }
    return body.charCodeAt(0) === 0xEF && body.charCodeAt(1) === 0xBB &&
        body.charCodeAt(2) === 0xBF ? 3 : 0;
}

// Copy of a JSON text with every value nested deeper than SHALLOW_DEPTH replaced by null (and
// a leading byte-order mark dropped), so njs can parse its top level. Strings are skipped whole,
// so brackets inside them do not count.
function shallow(body) {
    var parts = [];
    var depth = 0;
    var from = bomLength(body);
    var structure = /["{}\[\]]/g;
    var stringEnd = /["\\]/g;
    var m;
    while ((m = structure.exec(body)) !== null) {
        var c = m[0];
        if (c === '"') {
            stringEnd.lastIndex = m.index + 1;
            var e;
            while ((e = stringEnd.exec(body)) !== null && e[0] === '\\') {
                stringEnd.lastIndex = e.index + 2;
            }
            if (e === null) {
                break;  // unterminated string: malformed, llama-server refuses it
            }
            structure.lastIndex = e.index + 1;
        } else if (c === '{' || c === '[') {
            depth++;
            if (depth === SHALLOW_DEPTH + 1) {
                parts.push(body.substring(from, m.index), 'null');
            }
        } else {
            if (depth === SHALLOW_DEPTH + 1) {
                from = m.index + 1;
            }
            depth--;
        }
    }
    if (depth <= SHALLOW_DEPTH) {
        parts.push(body.substring(from));
    }
    return parts.join('');
}

// A body njs's JSON.parse refuses but llama-server's parser may accept: nesting deeper than
// njs allows (about 32 levels) or a leading byte-order mark. Its top-level fields are read
// from a shallow copy, and "id_slot" is appended as the last key: llama-server keeps the last
// of duplicate keys (checked on b11669), so a client's earlier "any slot" value cannot undo it.
// The slot a request goes to (logged as $vs_slot): the client's own slot number, kept as is
// (null: forward the body unchanged), or a non-reserved one picked by its stable prefix (null
// too when every slot is reserved).
function chooseSlot(r, req) {
    var named = req.id_slot;
    if (typeof named === 'number' && named !== -1) {
        r.variables.vs_slot = String(named);
        return null;
    }
    var free = freeSlots(r);
    if (free.length === 0) {
        return null;
    }
    var slot = pickSlot(free, stablePrefix(req));
    r.variables.vs_slot = String(slot);
    return slot;
}

function routedUnparsed(r, body) {
    var open = bomLength(body);
    while (WHITESPACE.indexOf(body.charAt(open)) >= 0 && open < body.length) {
        open++;
    }
    var close = body.lastIndexOf('}');
    if (body.charAt(open) !== '{' || close < open ||
            !/^[ \t\r\n]*$/.test(body.substring(close + 1))) {
        return body;  // not a JSON object: llama-server refuses it without taking a slot
    }
    var req;
    try {
        req = JSON.parse(shallow(body));
    } catch (e) {
        req = null;  // malformed: llama-server refuses it; route it anyway, to be safe
    }
    if (req === null || typeof req !== 'object' || Array.isArray(req)) {
        req = {};
    }
    var slot = chooseSlot(r, req);
    if (slot === null) {
        return body;
    }
    var last = close - 1;
    while (last > open && WHITESPACE.indexOf(body.charAt(last)) >= 0) {
        last--;
    }
    var sep = last === open ? '' : ',';  // "{ }": the only key
    return body.substring(0, close) + sep + '"id_slot":' + slot + body.substring(close);
}

// Body sent upstream: unchanged when the client named a slot (or the body is not a JSON
// object); otherwise the same JSON with "id_slot" set to a non-reserved slot.
function routedBody(r) {
    var body = r.requestText;
    if (!body) {
        return '';
    }
    var req;
    try {
        req = JSON.parse(body);
    } catch (e) {
        return routedUnparsed(r, body);
    }
    if (req === null || typeof req !== 'object' || Array.isArray(req)) {
        return body;
    }
    var slot = chooseSlot(r, req);
    if (slot === null) {
        return body;
    }
    if (req.id_slot === undefined) {
        // Splice the field in rather than re-serialise: keeps numbers and escapes byte-exact.
        var open = body.indexOf('{');
        var rest = body.substring(open + 1);
        var sep = /^\s*}/.test(rest) ? '' : ',';
        return body.substring(0, open + 1) + '"id_slot":' + slot + sep + rest;
    }
    req.id_slot = slot;  // an explicit -1/null/wrong type means "any slot" to llama-server
    return JSON.stringify(req);
}

// GET /proxy/status: what the HA integration checks; never any secret.
function status(r) {
    var body = {
        reserved_slots: reservedSlots(r),
        total_slots: parseInt(r.variables.vs_total_slots, 10) || 0,
        service: 'voice-stack-llm-auth'
    };
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify(body));
}

export default { authorized, routedBody, status };
