// Generation bodies: read as exactly one JSON object or refused, then given the id_slot the
// proxy decided. What llama-server receives is always the text njs parsed (never the raw
// bytes next to it), so the two parsers cannot read two different requests.
import slots from 'slots.js';

var WHITESPACE = ' \t\r\n';  // JSON's

// A refusal: the HTTP status and the reason, both for the client's JSON error.
function refusal(status, message) {
    return { status: status, message: message };
}

// A leading UTF-8 byte-order mark, which llama-server skips and JSON.parse refuses: one
// character in a text string, three in a byte string (njs 0.7's requestText).
function withoutBom(body) {
    if (body.charCodeAt(0) === 0xFEFF) {
        return body.substring(1);
    }
    if (body.charCodeAt(0) === 0xEF && body.charCodeAt(1) === 0xBB && body.charCodeAt(2) === 0xBF) {
        return body.substring(3);
    }
    return body;
}

// JSON.parse's error for a body nested deeper than the engine reads (31 levels on njs, where
// the message says so; QuickJS runs out of stack far deeper). Telling it from the error keeps
// a 32 MB body of brackets from costing more than the parse that already failed.
function tooDeep(e) {
    return e.name === 'RangeError' || /too deep/i.test(String(e.message));
}

// The body as {text, req}, or a refusal naming why it cannot be routed.
function parse(r) {
    var encoding = r.headersIn['Content-Encoding'];
    if (encoding && encoding.trim().toLowerCase() !== 'identity') {
        return refusal(415, 'Content-Encoding "' + encoding.substring(0, 40) +
            '" is not accepted here: send the request body uncompressed');
    }
    var body = withoutBom(r.requestText || '');
    if (body.indexOf('\u0000') >= 0) {
        return refusal(400, 'the request body contains a NUL byte');
    }
    var req;
    try {
        req = JSON.parse(body);
    } catch (e) {
        if (tooDeep(e)) {
            return refusal(400, 'the request body is nested too deeply to be read and routed');
        }
        return refusal(400, 'the request body is not valid JSON ' +
            '(a syntax error, data after the JSON object, or a truncated body)');
    }
    if (req === null || typeof req !== 'object' || Array.isArray(req)) {
        return refusal(400, 'the request body must be one JSON object');
    }
    return { text: body, req: req };
}

function own(req, key) {
    return Object.prototype.hasOwnProperty.call(req, key);
}

function space(text, i) {
    var c = text.charAt(i);
    return c !== '' && WHITESPACE.indexOf(c) >= 0;
}

// The text with "id_slot": slot as its only id_slot. Without one already, the field is
// spliced in before the closing brace (every other byte stays as the client sent it);
// otherwise (aliases such as "id\u005fslot" and duplicates included: JSON.parse folded them
// into one property) the object is re-serialised with the proxy's value.
function withSlot(parsed, slot) {
    if (own(parsed.req, 'id_slot')) {
        parsed.req.id_slot = slot;
        return JSON.stringify(parsed.req);
    }
    var text = parsed.text;
    var close = text.length - 1;  // the object's closing brace: JSON.parse read one object
    while (space(text, close)) {
        close--;
    }
    var inner = close - 1;
    while (space(text, inner)) {
        inner--;
    }
    var sep = text.charAt(inner) === '{' ? '' : ',';  // "{ }": no field to follow
    return text.substring(0, close) + sep + '"id_slot":' + slot + '}';
}

// n > 1 asks llama-server for several completions, which it runs on other slots at once.
function fansOut(req) {
    return ['n', 'n_cmpl'].some(function (key) {
        return own(req, key) && req[key] !== 1;
    });
}

// The slot an id_slot names, if it is one llama-server runs as named (an integer below
// LLM_PARALLEL), else -1.
function named(r, req) {
    var slot = req.id_slot;
    if (typeof slot !== 'number' || slot % 1 !== 0 || slot < 0 || slot >= slots.total(r)) {
        return -1;
    }
    return slot;
}

// The body for llama-server and the slot it runs on, or a refusal. The agent key keeps a valid
// slot it names; the general key keeps a non-reserved one it names (a client that pins its
// own slot keeps its cache) and gets a non-reserved slot for anything else.
function route(r, scope) {
    var parsed = parse(r);
    if (parsed.status) {
        return parsed;
    }
    var req = parsed.req;
    var pinned = own(req, 'id_slot') ? named(r, req) : -1;
    if (scope === 'agent' && own(req, 'id_slot')) {
        if (pinned < 0) {
            return refusal(400, 'id_slot must be an integer from 0 to ' + (slots.total(r) - 1));
        }
        return { body: parsed.text, slot: pinned };
    }
    if (scope !== 'agent' && fansOut(req)) {
        return refusal(400, 'n (several completions per request) runs on other slots at ' +
            'once: ask for one completion per request');
    }
    if (pinned >= 0 && !slots.isReserved(r, pinned)) {
        return { body: withSlot(parsed, pinned), slot: pinned };  // re-serialised: one id_slot
    }
    var slot = slots.pick(r, req);
    if (slot < 0) {
        return refusal(503, 'every slot is reserved (LLM_RESERVED_SLOTS): none is left for ' +
            'this key');
    }
    return { body: withSlot(parsed, slot), slot: slot };
}

export default { route };
