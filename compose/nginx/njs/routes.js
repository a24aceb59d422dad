// What each llama-server endpoint is, for the proxy's decision. Probed on llama-server b11669
// (every path of its route table, GET and POST): anything not listed here is not forwarded.
//   read       either key; takes no slot
//   generate   either key; the body is routed (its id_slot decided by the proxy)
//   unpinned   generation that ignores id_slot: the agent key, or the general key when its
//              group is in LLM_PROXY_ALLOW_UNPINNED
//   control    changes server state: the agent key, or the general key when its group is in
//              LLM_PROXY_ALLOW_CONTROL
//   slot       POST /slots/<n>: the agent key on a reserved slot (general key: see slots.js)

function entry(kind, group) {
    return { kind: kind, group: group || '' };
}

var READ = entry('read');
var GENERATE = entry('generate');

var ROUTES = {
    'GET /models': READ,
    'GET /v1/models': READ,
    'GET /props': READ,
    'GET /slots': READ,
    'GET /metrics': READ,
    'GET /lora-adapters': READ,
    'POST /tokenize': READ,
    'POST /detokenize': READ,
    'POST /apply-template': READ,
    'POST /chat/completions/input_tokens': READ,
    'POST /v1/chat/completions/input_tokens': READ,
    'POST /v1/responses/input_tokens': READ,
    'POST /v1/messages/count_tokens': READ,

    'POST /completion': GENERATE,
    'POST /completions': GENERATE,
    'POST /v1/completions': GENERATE,
    'POST /chat/completions': GENERATE,
    'POST /v1/chat/completions': GENERATE,
    'POST /responses': GENERATE,
    'POST /v1/responses': GENERATE,
    'POST /infill': GENERATE,

    'POST /v1/messages': entry('unpinned', 'messages'),
    'POST /embedding': entry('unpinned', 'embeddings'),
    'POST /embeddings': entry('unpinned', 'embeddings'),
    'POST /v1/embeddings': entry('unpinned', 'embeddings'),
    'POST /rerank': entry('unpinned', 'rerank'),
    'POST /reranking': entry('unpinned', 'rerank'),
    'POST /v1/rerank': entry('unpinned', 'rerank'),
    'POST /v1/reranking': entry('unpinned', 'rerank'),
    'POST /v1/audio/transcriptions': entry('unpinned', 'audio'),
    'POST /v1/systemone': entry('unpinned', 'systemone'),

    'POST /lora-adapters': entry('control', 'lora'),
    'POST /props': entry('control', 'props'),
    // cancels or steers a running completion (the agent's too)
    'POST /v1/chat/completions/control': entry('control', 'completion-control'),
    // resumes, lists or cancels live streams by conversation id
    'GET /v1/stream': entry('control', 'streams'),
    'DELETE /v1/stream': entry('control', 'streams'),
    'POST /v1/streams/lookup': entry('control', 'streams'),
    // router mode (several models) and the experimental built-in tools
    'POST /models/load': entry('control', 'models'),
    'POST /models/unload': entry('control', 'models'),
    'GET /models/sse': entry('control', 'models'),
    'GET /tools': entry('control', 'tools'),
    'POST /tools': entry('control', 'tools'),
    'GET /cors-proxy': entry('control', 'tools'),
    'POST /cors-proxy': entry('control', 'tools')
};

var SLOT_PATH = /^\/slots\/([^\/]*)$/;
// Characters a decoded path may hold to be forwarded as is: llama-server decodes %XX (and
// %uXXXX) itself, so a path with a '%' left after nginx's decoding would be read differently.
var FORWARDABLE = /^[A-Za-z0-9._~!$&'()*+,;=:@\/-]*$/;

// The route of a decoded, normalised path (nginx's $uri): an entry, 'method' (known path,
// other method), 'unknown', or 'unsafe' (a path that cannot be forwarded unchanged).
function classify(method, path) {
    if (!FORWARDABLE.test(path)) {
        return 'unsafe';
    }
    var m = method === 'HEAD' ? 'GET' : method;
    var found = ROUTES[m + ' ' + path];
    if (found) {
        return found;
    }
    var slot = SLOT_PATH.exec(path);
    if (slot) {
        return m === 'POST' ? { kind: 'slot', group: 'slots', id: slot[1] } : 'method';
    }
    var methods = ['GET', 'POST', 'DELETE'];
    for (var i = 0; i < methods.length; i++) {
        if (ROUTES[methods[i] + ' ' + path]) {
            return 'method';
        }
    }
    return 'unknown';
}

// A comma list setting (LLM_PROXY_ALLOW_*) as a set of names.
function groups(value) {
    var set = {};
    String(value || '').split(',').forEach(function (item) {
        var name = item.trim();
        if (name) {
            set[name] = true;
        }
    });
    return set;
}

export default { classify, groups };
