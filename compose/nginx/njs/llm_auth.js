// Voice Stack llm-auth proxy: which key a request holds, what that key may do with each
// llama-server endpoint, and the slot every generation request runs on. Runs on njs 0.7.9
// (Debian bookworm), njs 1.x with its njs engine and with QuickJS (js_engine qjs), so it keeps
// to the language and API subset all three share.
import crypto from 'crypto';
import routes from 'routes.js';
import slots from 'slots.js';
import body from 'body.js';

var TYPES = {
    400: 'invalid_request_error',
    401: 'authentication_error',
    403: 'permission_error',
    404: 'not_found_error',
    405: 'invalid_request_error',
    413: 'invalid_request_error',
    415: 'invalid_request_error',
    503: 'unavailable_error'
};

function digest(value) {
    return crypto.createHash('sha256').update(value).digest('hex');
}

// The agent key, when it is set and differs from the general key (else the agent scope is off).
function agentKey(r) {
    var key = r.variables.vs_agent_key || '';
    return key && key !== r.variables.vs_proxy_key ? key : '';
}

// "agent", "general" or "none": exactly one Authorization header, equal byte for byte to
// "Bearer <key>". Comparing SHA-256 digests is case-sensitive and gives no prefix-timing signal.
function keyScope(r) {
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
        return 'none';
    }
    var given = digest(presented);
    var agent = agentKey(r);
    if (agent && given === digest('Bearer ' + agent)) {
        return 'agent';
    }
    var general = r.variables.vs_proxy_key || '';
    return general && given === digest('Bearer ' + general) ? 'general' : 'none';
}

function fail(r, status, message) {
    if (status === 401) {
        r.headersOut['WWW-Authenticate'] = 'Bearer realm="llm"';
    }
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status, JSON.stringify({
        error: { code: status, message: message, type: TYPES[status] }
    }) + '\n');
}

// Hand the request to nginx's proxy: the path nginx matched (decoded and normalised, so
// llama-server reads the same one) and the client's query string.
function forward(r, path, routed) {
    var args = r.variables.args;
    r.variables.vs_upstream_uri = path + (args ? '?' + args : '');
    if (routed) {
        r.variables.vs_body = routed.body;
        r.variables.vs_slot = String(routed.slot);
        r.internalRedirect('@llm_routed');
    } else {
        r.internalRedirect('@llm_pass');
    }
}

var UNPINNED = { variable: 'vs_allow_unpinned', name: 'LLM_PROXY_ALLOW_UNPINNED' };
var CONTROL = { variable: 'vs_allow_control', name: 'LLM_PROXY_ALLOW_CONTROL' };

function optInRefusal(setting, group) {
    return 'to allow it for the general key (LLM_PROXY_KEY), add "' + group + '" to ' + setting;
}

function slotControl(r, scope, route) {
    var slot = slots.slotId(r, route.id);
    var general = scope !== 'agent';
    if (general && !routes.groups(r.variables.vs_allow_control).slots) {
        return fail(r, 403, 'slot save/restore/erase needs the agent key (LLM_AGENT_KEY); ' +
            optInRefusal(CONTROL.name, 'slots') + ' (non-reserved slots only)');
    }
    if (slot < 0) {
        return fail(r, 400, 'the slot must be a plain number from 0 to ' + (slots.total(r) - 1));
    }
    if (slots.isReserved(r, slot) === general) {
        return fail(r, 403, general ? 'slot ' + slot + ' is reserved for the agent key'
            : 'the agent key may only save, restore or erase its reserved slots');
    }
    forward(r, '/slots/' + slot);
}

function generate(r, scope, path) {
    var routed = body.route(r, scope);
    if (routed.status) {
        return fail(r, routed.status, routed.message);
    }
    forward(r, path, routed);
}

function gated(r, scope, route, setting) {
    if (scope !== 'agent' && !routes.groups(r.variables[setting.variable])[route.group]) {
        return fail(r, 403, 'the general key may not use this endpoint; ' +
            optInRefusal(setting.name, route.group));
    }
    forward(r, r.uri);
}

// js_content of every authenticated path.
function handle(r) {
    var scope = keyScope(r);
    if (scope === 'none') {
        return fail(r, 401, 'Invalid API Key');
    }
    var route = routes.classify(r.method, r.uri);
    if (route === 'unsafe') {
        return fail(r, 400, 'the path holds characters the proxy does not forward');
    }
    if (route === 'unknown') {
        return fail(r, 404, 'not an endpoint this proxy forwards');
    }
    if (route === 'method') {
        return fail(r, 405, 'method ' + r.method + ' is not allowed on this endpoint');
    }
    if (route.kind === 'read') {
        return forward(r, r.uri);
    }
    if (route.kind === 'generate') {
        return generate(r, scope, r.uri);
    }
    if (route.kind === 'slot') {
        return slotControl(r, scope, route);
    }
    return gated(r, scope, route, route.kind === 'unpinned' ? UNPINNED : CONTROL);
}

// "1" when the request holds either key: checked before nginx reads a body.
function authorized(r) {
    return keyScope(r) === 'none' ? '0' : '1';
}

// GET /proxy/status (open): what the HA integration checks; never any secret. Its key_scope
// tells a caller whether the key it sent is valid, as any guarded endpoint does by its 401: the
// keys are 32 random bytes (./stack keygen), so guessing one this way is not a real threat.
function status(r) {
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify({
        service: 'voice-stack-llm-auth',
        reserved_slots: slots.reserved(r),
        total_slots: slots.total(r),
        scoped_keys: agentKey(r) !== '',
        key_scope: keyScope(r)
    }));
}

export default { authorized, handle, status };
