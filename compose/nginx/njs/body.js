// Generation bodies: read as exactly one JSON object or refused, then given the id_slot the
// proxy decided. What llama-server receives is always the text njs read (never the raw bytes
// next to it), so the two parsers cannot read two different requests.
//
// njs runs in the nginx worker that also streams every other reply (the voice agent's too), and
// JSON.parse of 30 MB of small values holds that worker for seconds. So no more than 1 MB is
// ever parsed: a bigger body (an image, a long document) is read without its long strings.
// Where each string ends is found by byte search (at the first quote not escaped, as in JSON);
// a long one is set aside unparsed and put back as it came, so its content is llama-server's
// to accept or refuse, and cannot change the structure either parser reads. That structure,
// all the rest, is parsed and must fit in 1 MB (bench/proxy_bench.py: what this bounds).
import slots from 'slots.js';

var WHITESPACE = ' \t\r\n';  // JSON's
var WHOLE = 1024 * 1024;  // bytes: a body up to this size is parsed whole
var STRUCTURE = 1024 * 1024;  // bytes of a bigger body parsed: all but its long strings
var LONG = 32768;  // bytes between its quotes: a string this long in a bigger body is set aside
var STRINGS = 65536;  // strings of a bigger body (each costs a step of the byte search)
var ESCAPES = 65536;  // backslashes before its quotes (each tells whether a quote ends a string)
// Bytes of a set-aside string decoded for the routing key: 12 per character at most (a
// surrogate pair of \u escapes), so as many characters as the key ever takes of one string.
var KEEP = 12 * slots.KEY_CHARS + 16;
var QUOTE = 0x22;
var BACKSLASH = 0x5C;
var MARKER = '"\\u0000';  // how a set-aside string starts in the parsed text, and re-serialised

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
// a body of brackets from costing more than the parse that already failed.
function tooDeep(e) {
    return e.name === 'RangeError' || /too deep/i.test(String(e.message));
}

// {req: the one JSON object text holds}, or a refusal naming why not.
function readObject(text) {
    var req;
    try {
        req = JSON.parse(text);
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
    return { req: req };
}

function own(req, key) {
    return Object.prototype.hasOwnProperty.call(req, key);
}

function space(text, i) {
    var c = text.charAt(i);
    return c !== '' && WHITESPACE.indexOf(c) >= 0;
}

function spaceByte(b) {
    return b === 0x20 || b === 0x09 || b === 0x0D || b === 0x0A;
}

// The text with "id_slot": slot spliced in before the closing brace (it has none yet): every
// other byte stays as the client sent it.
function spliced(text, slot) {
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

// A body up to WHOLE bytes, parsed whole.
function whole(body) {
    if (body.indexOf('\u0000') >= 0) {
        return refusal(400, 'the request body contains a NUL byte');
    }
    var read = readObject(body);
    if (read.status) {
        return read;
    }
    return {
        req: read.req,
        reveal: function (s) { return s; },
        asSent: function () { return body; },
        // Without an id_slot it is spliced in; otherwise (aliases such as "id\u005fslot" and
        // duplicates included: JSON.parse folded them into one property) the object is
        // re-serialised with the proxy's value.
        withSlot: function (slot) {
            if (own(read.req, 'id_slot')) {
                read.req.id_slot = slot;
                return JSON.stringify(read.req);
            }
            return spliced(body, slot);
        }
    };
}

function tooMuch(what, limit) {
    return refusal(413, 'a request body over 1 MB may hold at most ' + limit + ' ' + what +
        ' (strings of ' + LONG / 1024 + ' KB or more, such as images, are not counted)');
}

// Where the string opening at buf[open] ends (its closing quote), -1 if it does not; counts the
// backslashes it looks at into state.escapes.
function closing(buf, open, state) {
    var close = buf.indexOf(QUOTE, open + 1);
    while (close > 0 && buf[close - 1] === BACKSLASH) {  // escaped, unless by an even run
        var run = 1;
        while (buf[close - 1 - run] === BACKSLASH) {
            run++;
        }
        state.escapes += run;
        if (run % 2 === 0 || state.escapes > ESCAPES) {
            break;
        }
        close = buf.indexOf(QUOTE, close + 1);
    }
    return close;
}

// Bytes of buf as text for JSON.parse: a \u0000 of the client's there would read as a set-aside
// string (a raw NUL is refused before), so it is refused too.
function structure(buf, from, to) {
    var text = buf.toString('utf8', from, to);
    return text.indexOf('\\u0000') < 0 ? text : null;
}

// A bigger body as {text, longs, buf, start}: text is what JSON.parse reads, each long string
// replaced by "\u0000<n>" (n its place in longs, the [from, to) of its bytes in buf); start is
// where the body begins after a byte-order mark. Or a refusal.
function reduce(buf) {
    if (buf.indexOf(0) >= 0) {
        return refusal(400, 'the request body contains a NUL byte');
    }
    var start = buf[0] === 0xEF && buf[1] === 0xBB && buf[2] === 0xBF ? 3 : 0;
    var state = { escapes: 0 };
    var parts = [];
    var longs = [];
    var from = start;  // where the bytes not copied into parts yet begin
    var copied = 0;
    var strings = 0;
    var open = buf.indexOf(QUOTE, start);
    while (open >= 0) {
        var close = closing(buf, open, state);
        if (state.escapes > ESCAPES) {
            return tooMuch('backslashes before quotes', ESCAPES);
        }
        if (close < 0) {
            break;  // a string that never ends: JSON.parse refuses what is left
        }
        if (++strings > STRINGS) {
            return tooMuch('strings', STRINGS);
        }
        var long = close - open - 1 >= LONG;
        if (copied + (long ? open : close + 1) - from > STRUCTURE) {
            return tooMuch('bytes of JSON', STRUCTURE);
        }
        if (long) {
            var before = structure(buf, from, open);
            if (before === null) {
                return NUL_ESCAPE;
            }
            parts.push(before, MARKER + longs.length + '"');
            copied += open - from;
            longs.push([open + 1, close]);
            from = close + 1;
        }
        open = buf.indexOf(QUOTE, close + 1);
    }
    if (copied + buf.length - from > STRUCTURE) {
        return tooMuch('bytes of JSON', STRUCTURE);
    }
    var rest = structure(buf, from, buf.length);
    if (rest === null) {
        return NUL_ESCAPE;
    }
    parts.push(rest);
    return { text: parts.join(''), longs: longs, buf: buf, start: start };
}

var NUL_ESCAPE = refusal(400, 'a request body over 1 MB may hold \\u0000 only in its long strings');

function isMarker(s) {
    return typeof s === 'string' && s.charCodeAt(0) === 0;
}

// The start of a set-aside string (a marker's), decoded as JSON.parse would: what the routing
// key takes of it. Cut neither inside a UTF-8 character nor inside an escape.
function opening(reduced, marker) {
    var span = reduced.longs[parseInt(marker.substring(1), 10)];
    var buf = reduced.buf;
    var to = Math.min(span[1], span[0] + KEEP);
    while (to > span[0] && (buf[to] & 0xC0) === 0x80) {
        to--;
    }
    var raw = buf.toString('utf8', span[0], to);
    for (var cut = raw.length; cut >= 0 && cut > raw.length - 6; cut--) {
        try {
            return JSON.parse('"' + raw.substring(0, cut) + '"');
        } catch (e) {
            // an escape cut in two: one character less
        }
    }
    return raw;  // not a valid JSON string: llama-server refuses the body
}

// The re-serialised object (json) with each set-aside string put back as the client sent it.
function restored(reduced, json) {
    var pieces = json.split(MARKER);
    var out = [Buffer.from(pieces[0])];
    for (var i = 1; i < pieces.length; i++) {
        var end = pieces[i].indexOf('"');
        var span = reduced.longs[parseInt(pieces[i].substring(0, end), 10)];
        out.push(Buffer.from('"'), reduced.buf.slice(span[0], span[1]),
            Buffer.from(pieces[i].substring(end)));
    }
    return Buffer.concat(out);
}

// The bytes as sent with "id_slot": slot before the closing brace (they hold no id_slot yet).
function splicedBytes(reduced, slot) {
    var buf = reduced.buf;
    var close = buf.length - 1;  // the object's closing brace: JSON.parse read one object
    while (spaceByte(buf[close])) {
        close--;
    }
    var inner = close - 1;
    while (spaceByte(buf[inner])) {
        inner--;
    }
    var sep = buf[inner] === 0x7B ? '' : ',';  // "{ }": no field to follow
    return Buffer.concat([buf.slice(reduced.start, close),
        Buffer.from(sep + '"id_slot":' + slot + '}')]);
}

// A body over WHOLE bytes: its structure parsed, its long strings set aside (see the top).
function large(buf) {
    var reduced = reduce(buf);
    if (reduced.status) {
        return reduced;
    }
    var read = readObject(reduced.text);
    if (read.status) {
        return read;
    }
    return {
        req: read.req,
        reveal: function (s) { return isMarker(s) ? opening(reduced, s) : s; },
        asSent: function () { return buf.slice(reduced.start, buf.length); },
        withSlot: function (slot) {
            if (own(read.req, 'id_slot')) {
                read.req.id_slot = slot;
                return restored(reduced, JSON.stringify(read.req));
            }
            return splicedBytes(reduced, slot);
        }
    };
}

// The body as {req, reveal, asSent, withSlot}, or a refusal naming why it cannot be routed.
// reveal(s) is the text of a string of req for the routing key; asSent() the body as it came
// (without a byte-order mark); withSlot(slot) the body with "id_slot": slot as its only id_slot.
function parse(r) {
    var encoding = r.headersIn['Content-Encoding'];
    if (encoding && encoding.trim().toLowerCase() !== 'identity') {
        return refusal(415, 'Content-Encoding "' + encoding.substring(0, 40) +
            '" is not accepted here: send the request body uncompressed');
    }
    var buf = r.requestBuffer;
    if (buf && buf.length > WHOLE) {
        return large(buf);
    }
    return whole(withoutBom(r.requestText || ''));
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
        return { body: parsed.asSent(), slot: pinned };
    }
    if (scope !== 'agent' && fansOut(req)) {
        return refusal(400, 'n (several completions per request) runs on other slots at ' +
            'once: ask for one completion per request');
    }
    if (pinned >= 0 && !slots.isReserved(r, pinned)) {
        return { body: parsed.withSlot(pinned), slot: pinned };  // re-serialised: one id_slot
    }
    var slot = slots.pick(r, req, parsed.reveal);
    if (slot < 0) {
        return refusal(503, 'every slot is reserved (LLM_RESERVED_SLOTS): none is left for ' +
            'this key');
    }
    return { body: parsed.withSlot(slot), slot: slot };
}

export default { route };
