"""Hostile requests against the proxy (every nginx build), each checked twice: against the real
llama-server (which slots ran, read from its own /slots) and against a recording upstream (the
exact request that arrived: path, body, id_slot keys, headers)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.compose.conftest import PROXY_KEY, RECORDED_UPSTREAM_KEY, running
from tests.compose.proxy_helpers import slot_tasks, slots_used
from tests.compose.recording_upstream import RecordingUpstream
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxBuild, NginxProxy, start_proxy
from voice_stack_dev.rawhttp import Reply, call

pytestmark = pytest.mark.usefixtures("socket_enabled")

FREE = {1, 2, 3}  # -np 4, slot 0 reserved
MSG = '"messages":[{"role":"user","content":"hi"}],"max_tokens":2'


@dataclass(frozen=True)
class Case:
    name: str
    key: str  # "general", "agent" or "none"
    method: str
    path: str
    body: bytes | None = None
    expect: str = "routed"  # routed | pinned | refused | passed | health
    status: int = 200  # the proxy's own status (refused), or llama-server's (others)
    slot: int = -1  # pinned: the slot it must run on
    upstream_path: str = ""  # what the upstream is asked for (default: path)
    headers: tuple[tuple[str, str], ...] = ()


def chat_body(extra: str = "", *, before: str = "") -> bytes:
    return ("{" + before + MSG + extra + "}").encode()


def g(name: str, path: str, body: bytes | None, **kw: object) -> Case:
    return Case(name, "general", "POST", path, body, **kw)  # type: ignore[arg-type]


def a(name: str, path: str, body: bytes | None, **kw: object) -> Case:
    return Case(name, "agent", "POST", path, body, **kw)  # type: ignore[arg-type]


CHAT = "/v1/chat/completions"
NOT_JSON = {"expect": "refused", "status": 400}
FORBIDDEN = {"expect": "refused", "status": 403}
ERASE = b"action=erase"
FORM = (("Content-Type", "application/x-www-form-urlencoded"),)

CASES = [
    # the general key naming the reserved slot, every way llama-server would read it
    g("id_slot 0", CHAT, chat_body(',"id_slot":0')),
    g("escaped alias", CHAT, chat_body(',"id\\u005fslot":0')),
    g("alias after real key", CHAT, chat_body(',"id_slot":2,"id\\u005fslo\\u0074":0')),
    g("duplicate, last 0", CHAT, chat_body(',"id_slot":1,"id_slot":0')),
    g("duplicate, first 0", CHAT, chat_body(',"id_slot":-1', before='"id_slot":0,')),
    g("float 0.0", CHAT, chat_body(',"id_slot":0.0')),
    g("float 0.9 (truncated to 0)", CHAT, chat_body(',"id_slot":0.9')),
    g("-1.5 (read as any)", CHAT, chat_body(',"id_slot":-1.5')),
    g("4294967295 (read as any)", CHAT, chat_body(',"id_slot":4294967295')),
    g("4 wraps to 0", CHAT, chat_body(',"id_slot":4')),
    g("-4 wraps to 0", CHAT, chat_body(',"id_slot":-4')),
    g("string '0'", CHAT, chat_body(',"id_slot":"0"')),
    g("array [0]", CHAT, chat_body(',"id_slot":[0]')),
    g("null", CHAT, chat_body(',"id_slot":null')),
    g("__proto__ holding id_slot", CHAT, chat_body(',"__proto__":{"id_slot":0}')),
    g(
        "nested 20 deep, then id_slot 0",
        CHAT,
        chat_body(',"x":' + "[" * 20 + "]" * 20 + ',"id_slot":0'),
    ),
    g("BOM then id_slot 0", CHAT, b"\xef\xbb\xbf" + chat_body(',"id_slot":0')),
    # a general client's own pin on a free slot is kept (re-serialised: exactly one id_slot)
    g("id_slot 1", CHAT, chat_body(',"id_slot":1'), expect="pinned", slot=1),
    g("float 3.0", CHAT, chat_body(',"id_slot":3.0'), expect="pinned", slot=3),
    g("alias of 1", CHAT, chat_body(',"id\\u005fslot":1'), expect="pinned", slot=1),
    g("duplicate, last 3", CHAT, chat_body(',"id_slot":0,"id_slot":3'), expect="pinned", slot=3),
    g("/completion", "/completion", b'{"prompt":"hi","n_predict":2,"id_slot":0}'),
    g("/completions", "/completions", b'{"prompt":"hi","max_tokens":2,"id_slot":0}'),
    g("/v1/completions", "/v1/completions", b'{"prompt":"hi","max_tokens":2,"id_slot":0}'),
    g("/chat/completions", "/chat/completions", chat_body(',"id_slot":0')),
    g("/v1/responses", "/v1/responses", b'{"input":"hi","max_output_tokens":2,"id_slot":0}'),
    g("/responses", "/responses", b'{"input":"hi","max_output_tokens":2,"id_slot":0}'),
    g(
        "percent-encoded path",
        "/v1/%63hat/completions",
        chat_body(',"id_slot":0'),
        upstream_path=CHAT,
    ),
    g("encoded slash", "/v1/chat%2Fcompletions", chat_body(',"id_slot":0'), upstream_path=CHAT),
    g("double slash", "//v1/chat/completions", chat_body(',"id_slot":0'), upstream_path=CHAT),
    g("dot segments", "/v1/x/../chat/./completions", chat_body(',"id_slot":0'), upstream_path=CHAT),
    # several completions per request would run on other slots at once
    g("n 2", CHAT, chat_body(',"n":2'), **NOT_JSON),
    g("n_cmpl 4", CHAT, chat_body(',"n_cmpl":4,"id_slot":1'), **NOT_JSON),
    # bodies njs cannot read as one JSON object
    g(
        "NUL then a second object",
        CHAT,
        chat_body(',"id_slot":2') + b'\x00{"id_slot":0}',
        **NOT_JSON,
    ),
    g(
        "NUL inside a string",
        CHAT,
        b'{"messages":[{"role":"user","content":"a\x00b"}],"id_slot":0}',
        **NOT_JSON,
    ),
    g("trailing garbage", CHAT, chat_body() + b" x", **NOT_JSON),
    g("two objects", CHAT, chat_body() + chat_body(',"id_slot":0'), **NOT_JSON),
    g("truncated", CHAT, b'{"messages": [', **NOT_JSON),
    g("single quotes", CHAT, b"{'id_slot': 0}", **NOT_JSON),
    g("top-level array", CHAT, b"[" + chat_body(',"id_slot":0') + b"]", **NOT_JSON),
    g("empty body", CHAT, b"", **NOT_JSON),
    g(
        "200000 levels deep",
        CHAT,
        b'{"x":' + b"[" * 200_000 + b"]" * 200_000 + b',"id_slot":0}',
        **NOT_JSON,
    ),
    g(
        "gzip-encoded",
        CHAT,
        gzip.compress(chat_body(',"id_slot":0')),
        expect="refused",
        status=415,
        headers=(("Content-Encoding", "gzip"),),
    ),
    g("%u escape llama-server decodes", "/v1/%u0063hat/completions", chat_body(), **NOT_JSON),
    g("%25u: '%u' after nginx decodes", "/v1/%25u0063hat/completions", chat_body(), **NOT_JSON),
    Case("GET on a generation path", "general", "GET", CHAT, None, "refused", 405),
    # generation llama-server cannot steer: refused unless opted in
    g("/v1/messages", "/v1/messages", chat_body(',"model":"x"'), **FORBIDDEN),
    g("/v1/%6dessages", "/v1/%6dessages", chat_body(',"model":"x"'), **FORBIDDEN),
    g("/v1/embeddings", "/v1/embeddings", b'{"input":"hi"}', **FORBIDDEN),
    g("/embedding", "/embedding", b'{"content":"hi"}', **FORBIDDEN),
    g("/embeddings", "/embeddings", b'{"input":"hi"}', **FORBIDDEN),
    g("/rerank", "/rerank", b'{"query":"a","documents":["b"]}', **FORBIDDEN),
    g("/reranking", "/reranking", b'{"query":"a","documents":["b"]}', **FORBIDDEN),
    g("/v1/rerank", "/v1/rerank", b'{"query":"a","documents":["b"]}', **FORBIDDEN),
    g("/v1/reranking", "/v1/reranking", b'{"query":"a","documents":["b"]}', **FORBIDDEN),
    g("/v1/audio/transcriptions", "/v1/audio/transcriptions", b"", **FORBIDDEN),
    # slot control and other state changes
    g("erase slot 0", "/slots/0?action=erase", None, **FORBIDDEN),
    g("erase slot 4 (wraps to 0)", "/slots/4?action=erase", None, **FORBIDDEN),
    g("erase slot 2abc (read as 2)", "/slots/2abc?action=erase", None, **FORBIDDEN),
    g("erase slot %30", "/slots/%30?action=erase", None, **FORBIDDEN),
    g("erase non-reserved slot 1", "/slots/1?action=erase", None, **FORBIDDEN),
    g("action in a form body", "/slots/0", ERASE, headers=FORM, **FORBIDDEN),
    g("restore into slot 0", "/slots/0?action=restore", b'{"filename":"x.bin"}', **FORBIDDEN),
    g("LoRA scales", "/lora-adapters", b"[]", **FORBIDDEN),
    g("global props", "/props", b"{}", **FORBIDDEN),
    g("completion control", "/v1/chat/completions/control", b"{}", **FORBIDDEN),
    g("stream lookup", "/v1/streams/lookup", b"{}", **FORBIDDEN),
    Case("cancel a stream", "general", "DELETE", "/v1/stream?conv_id=x", None, "refused", 403),
    # what either key may read
    Case("GET /slots", "general", "GET", "/slots", None, "passed"),
    Case("GET /v1/models", "general", "GET", "/v1/models", None, "passed"),
    g("tokenize", "/tokenize", b'{"content":"hi"}', expect="passed"),
    Case("web UI file", "general", "GET", "/sw.js", None, "refused", 404),
    Case("GET /slots/0", "general", "GET", "/slots/0", None, "refused", 405),
    # the agent key
    a("agent id_slot 0", CHAT, chat_body(',"id_slot":0'), expect="pinned", slot=0),
    a("agent id_slot 3", CHAT, chat_body(',"id_slot":3'), expect="pinned", slot=3),
    a("agent alias", CHAT, chat_body(',"id\\u005fslot":0'), expect="pinned", slot=0),
    a(
        "agent duplicate, last wins",
        CHAT,
        chat_body(',"id_slot":3,"id_slot":0'),
        expect="pinned",
        slot=0,
    ),
    a("agent without a slot", CHAT, chat_body()),
    a("agent id_slot 4", CHAT, chat_body(',"id_slot":4'), **NOT_JSON),
    a("agent id_slot -1", CHAT, chat_body(',"id_slot":-1'), **NOT_JSON),
    a("agent id_slot '0'", CHAT, chat_body(',"id_slot":"0"'), **NOT_JSON),
    a("agent id_slot 0.5", CHAT, chat_body(',"id_slot":0.5'), **NOT_JSON),
    a("agent NUL body", CHAT, chat_body(',"id_slot":0') + b"\x00", **NOT_JSON),
    a("agent /v1/messages", "/v1/messages", chat_body(',"model":"x"'), expect="passed"),
    a("agent erases slot 0", "/slots/0?action=erase", None, expect="passed"),
    a("agent, form body", "/slots/0", ERASE, expect="passed", headers=FORM),
    a("agent erases slot 1", "/slots/1?action=erase", None, **FORBIDDEN),
    a("agent erases slot 4", "/slots/4?action=erase", None, **NOT_JSON),
    a("agent erases slot 00", "/slots/00?action=erase", None, **NOT_JSON),
    a("agent erases slot 0abc", "/slots/0abc?action=erase", None, **NOT_JSON),
    # the open paths: always exactly GET /health, without a key
    Case("health", "none", "GET", "/health", None, "health"),
    Case("health, query", "none", "GET", "/health?x=1&key=y", None, "health"),
    Case("health, //", "none", "GET", "//health", None, "health"),
    Case("health, encoded", "none", "GET", "/%68ealth", None, "health"),
    Case("health, dot segments", "none", "GET", "/slots/../health", None, "health"),
    Case("health, /v1", "none", "GET", "/v1/health", None, "health"),
    Case("health, HEAD", "none", "HEAD", "/health", None, "health"),
    Case("health with the agent key", "agent", "GET", "/health", None, "health"),
    Case("health, POST", "none", "POST", "/health", b"{}", "refused", 403),
    Case("health, NUL", "none", "GET", "/health%00", None, "refused", 400),
    Case("health/../slots", "none", "GET", "/health/../slots", None, "refused", 401),
    Case("health?", "none", "GET", "/health%3Fx", None, "refused", 401),
    Case("no key, chat", "none", "POST", CHAT, chat_body(',"id_slot":0'), "refused", 401),
]
assert len(CASES) >= 40


def strip_bom(body: bytes) -> bytes:
    return body.removeprefix(b"\xef\xbb\xbf")


def send(proxy: NginxProxy, case: Case) -> Reply:
    keys = {"general": proxy.headers, "agent": proxy.agent_headers, "none": {}}
    headers = [*keys[case.key].items(), *case.headers]
    if case.body is not None and not case.headers:
        headers.append(("Content-Type", "application/json"))
    return call(proxy.url, case.method, case.path, headers, raw_body=case.body)


@pytest.fixture(scope="module")
def matrix_proxy(
    slots_llama: LlamaServer, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    with running(
        start_proxy(
            slots_llama.url,
            PROXY_KEY,
            str(slots_llama.api_key),
            log_dir=service_logs,
            build=nginx_build,
        )
    ) as proxy:
        yield proxy


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_what_llama_server_ran(
    matrix_proxy: NginxProxy, slots_llama: LlamaServer, case: Case
) -> None:
    before = slot_tasks(slots_llama)
    reply = send(matrix_proxy, case)
    used = slots_used(slots_llama, before)
    assert reply.status == case.status, reply.body
    if case.expect == "refused":  # by njs (a JSON error) or by nginx itself (/health%00)
        assert used == set()
    elif case.expect == "routed":
        assert used, "nothing ran"
        assert used <= FREE
    elif case.expect == "pinned":
        assert used == {case.slot}
    else:  # passed, health: no slot expectation beyond the status
        assert case.expect != "health" or reply.body in (b"", b'{"status":"ok"}')


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_what_reached_the_upstream(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream, case: Case
) -> None:
    recorder.take()
    reply = send(recorded_proxy, case)
    received = recorder.take()
    if case.expect == "refused":
        assert reply.status == case.status, reply.body
        assert received == []
        return
    assert reply.status == 200, reply.body
    (got,) = received
    if case.expect == "health":
        assert (got.method, got.target, got.body) == ("GET", "/health", b"")
        assert "authorization" not in got.headers
        return
    assert got.method == case.method
    assert got.target == (case.upstream_path or case.path)
    assert got.headers["authorization"] == f"Bearer {RECORDED_UPSTREAM_KEY}"
    if case.expect == "passed":
        assert got.body == strip_bom(case.body or b"")
    elif case.expect == "pinned" and case.key == "general":  # its own pin, re-serialised
        assert got.id_slots() == [case.slot]
    elif case.expect == "pinned":
        assert got.id_slots()[-1] == case.slot  # llama-server reads the last duplicate
    else:  # routed: exactly one id_slot, on a non-reserved slot; every other field as sent
        (slot,) = got.id_slots()
        assert slot in FREE
        sent, original = json.loads(got.body), json.loads(strip_bom(case.body or b""))
        sent.pop("id_slot")
        original.pop("id_slot", None)
        assert sent == original
