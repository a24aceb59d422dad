// The slot layout (LLM_PARALLEL, LLM_RESERVED_SLOTS) and the choice of a non-reserved slot for
// a request, by a hash of the part of it that stays the same for a whole conversation.
import crypto from 'crypto';

// How much of each part of a conversation's start goes into its routing key: enough to tell
// conversations apart, little enough to keep hashing cheap on 10-100 KB request bodies.
var SYSTEM_CHARS = 2048;
var FIRST_TURN_CHARS = 1024;
// Raw /completion prompts grow at the end as a conversation goes on: hash only their start.
var PROMPT_CHARS = 512;

function total(r) {
    var n = parseInt(r.variables.vs_total_slots, 10);
    return n > 0 ? n : 0;
}

function isReserved(r, slot) {
    return String(r.variables.vs_reserved_slots || '').split(',').some(function (item) {
        return item.trim() !== '' && parseInt(item, 10) === slot;
    });
}

function reserved(r) {
    var out = [];
    for (var slot = 0; slot < total(r); slot++) {
        if (isReserved(r, slot)) {
            out.push(slot);
        }
    }
    return out;
}

function free(r) {
    var out = [];
    for (var slot = 0; slot < total(r); slot++) {
        if (!isReserved(r, slot)) {
            out.push(slot);
        }
    }
    return out;
}

// The slot number of a /slots/<id> path, or -1. Only a plain number below LLM_PARALLEL: the
// proxy forwards that canonical number, so llama-server's own lenient reading (stoi, then
// modulo the slot count: "2abc" is 2, "4" is 0) never gets a say.
function slotId(r, id) {
    if (!/^(0|[1-9][0-9]{0,5})$/.test(id)) {
        return -1;
    }
    var slot = parseInt(id, 10);
    return slot < total(r) ? slot : -1;
}

function isSystem(message) {
    return message !== null && typeof message === 'object' &&
        (message.role === 'system' || message.role === 'developer');
}

// Text of a message content or prompt, cut to limit. Content parts keep only their text, so
// an attached image (base64, megabytes) is never serialised just to be hashed. reveal(s) is
// the text of a string (body.js: a long string of a big body is kept aside, unparsed).
function text(value, limit, reveal) {
    if (value === undefined || value === null) {
        return '';
    }
    var s;
    if (typeof value === 'string') {
        s = reveal(value);
    } else if (Array.isArray(value)) {
        s = value.map(function (part) {
            var t = part !== null && typeof part === 'object' ? part.text || '' : part;
            return typeof t === 'string' ? reveal(t) : String(t);
        }).join('\n');
    } else {
        s = JSON.stringify(value);
    }
    return s.length > limit ? s.substring(0, limit) : s;
}

// System texts often carry a clock (Home Assistant's default prompt: "Current time is 12:45:03.
// Today's date is 2026-12-01."), which changes between the turns of one conversation; numbers do
// not tell conversations apart, so they are left out of the key.
function withoutDigits(s) {
    return s.replace(/[0-9]+/g, '#');
}

// Leading system messages (their numbers left out) and the first other turn of a message list.
function conversationStart(head, messages, reveal) {
    var parts = [head];
    for (var i = 0; i < messages.length; i++) {
        var message = messages[i];
        var system = isSystem(message);
        var content = message !== null && typeof message === 'object' ? message.content : message;
        var part = text(content, system ? SYSTEM_CHARS : FIRST_TURN_CHARS, reveal);
        parts.push(system ? withoutDigits(part) : part);
        if (!system) {
            break;
        }
    }
    return parts.join('\u0000');
}

// The part of a request that stays the same for a whole conversation: the start of its system
// text (without numbers) and of its first turn for chat and responses; the start of the prompt
// for completions.
function stablePrefix(req, reveal) {
    if (Array.isArray(req.messages)) {
        return conversationStart('', req.messages, reveal);
    }
    if (req.input !== undefined) {  // /v1/responses
        var head = withoutDigits(text(req.instructions, SYSTEM_CHARS, reveal));
        if (Array.isArray(req.input)) {
            return conversationStart(head, req.input, reveal);
        }
        return head + '\u0000' + text(req.input, FIRST_TURN_CHARS, reveal);
    }
    var prompt = req.prompt !== undefined ? req.prompt : req.input_prefix;  // /infill
    if (Array.isArray(prompt)) {
        // several prompts: the first one; token ids: the first ones
        prompt = typeof prompt[0] === 'number' ? prompt.slice(0, 128) : prompt[0];
    }
    return text(prompt, PROMPT_CHARS, reveal);
}

// A non-reserved slot for req (the same one for every turn of a conversation), or -1 when
// every slot is reserved.
function pick(r, req, reveal) {
    var slots = free(r);
    if (slots.length === 0) {
        return -1;
    }
    var hex = crypto.createHash('md5').update(stablePrefix(req, reveal)).digest('hex');
    return slots[parseInt(hex.substring(0, 8), 16) % slots.length];
}

// The most characters the routing key takes of any one string.
var KEY_CHARS = Math.max(SYSTEM_CHARS, FIRST_TURN_CHARS, PROMPT_CHARS);

export default { total, isReserved, reserved, slotId, pick, KEY_CHARS };
