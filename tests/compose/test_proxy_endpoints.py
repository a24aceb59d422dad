"""What each key may do with each endpoint (compose/nginx/njs/routes.js): slot save/restore/erase
on the real llama-server, the opt-in settings, refusals that name their reason, and what holds
for every request (a failing upstream leaks no key, a stalled client is dropped)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.compose.conftest import PROXY_KEY, RECORDED_UPSTREAM_KEY, running
from tests.compose.proxy_helpers import CHAT, agent, chat, general, raw_post, refusal
from tests.compose.recording_upstream import RecordingUpstream
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import TEST_AGENT_KEY, NginxBuild, NginxProxy, start_proxy
from voice_stack_dev.procs import free_port
from voice_stack_dev.rawhttp import call

pytestmark = pytest.mark.usefixtures("socket_enabled")

WARM = chat("remember this conversation", system="You are the voice agent." * 20)


@pytest.fixture(scope="module")
def slots_proxy(
    slots_llama: LlamaServer, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    """slots_llama behind a proxy whose general key may also manage the non-reserved slots."""
    proxy = start_proxy(
        slots_llama.url, PROXY_KEY, str(slots_llama.api_key), allow_control="slots",
        log_dir=service_logs, build=nginx_build,
    )  # fmt: skip
    with running(proxy):
        yield proxy


def cached_tokens(proxy: NginxProxy, slot: int) -> int:
    """Run WARM on slot (agent key) and return how much of its prompt the slot still had."""
    reply = call(proxy.url, "POST", CHAT, agent(proxy), {**WARM, "id_slot": slot})
    assert reply.status == 200, reply.body
    return int(reply.json()["timings"]["cache_n"])


def test_general_key_cannot_erase_save_or_restore_the_voice_slot(slots_proxy: NginxProxy) -> None:
    cached_tokens(slots_proxy, 0)
    for action, body in (("erase", None), ("save", {"filename": "x.bin"}), ("restore", None)):
        reply = call(
            slots_proxy.url, "POST", f"/slots/0?action={action}", general(slots_proxy), body
        )
        assert "reserved for the agent key" in refusal(reply, 403)
    assert cached_tokens(slots_proxy, 0) > 0  # the agent's cache is still there


def test_agent_key_saves_restores_and_erases_its_slot(slots_proxy: NginxProxy) -> None:
    cached_tokens(slots_proxy, 0)
    save = call(slots_proxy.url, "POST", "/slots/0?action=save", agent(slots_proxy),
                {"filename": "voice.bin"})  # fmt: skip
    assert save.status == 200, save.body
    erased = call(slots_proxy.url, "POST", "/slots/0?action=erase", agent(slots_proxy))
    assert erased.json()["n_erased"] > 0
    assert cached_tokens(slots_proxy, 0) == 0  # erased for real
    call(slots_proxy.url, "POST", "/slots/0?action=erase", agent(slots_proxy))
    restored = call(slots_proxy.url, "POST", "/slots/0?action=restore", agent(slots_proxy),
                    {"filename": "voice.bin"})  # fmt: skip
    assert restored.json()["n_restored"] > 0
    assert cached_tokens(slots_proxy, 0) > 0
    reply = call(slots_proxy.url, "POST", "/slots/2?action=erase", agent(slots_proxy))
    assert "only save, restore or erase its reserved slots" in refusal(reply, 403)


def test_the_slots_opt_in_covers_only_the_other_slots(slots_proxy: NginxProxy) -> None:
    cached_tokens(slots_proxy, 2)
    reply = call(slots_proxy.url, "POST", "/slots/2?action=erase", general(slots_proxy))
    assert reply.status == 200, reply.body
    assert cached_tokens(slots_proxy, 2) == 0
    for path in ("/slots/0?action=erase", "/slots/4?action=erase"):  # 4 would wrap to 0
        reply = call(slots_proxy.url, "POST", path, general(slots_proxy))
        assert reply.status in (400, 403), reply.body


def test_an_action_in_a_form_body_is_gated_like_one_in_the_query(slots_proxy: NginxProxy) -> None:
    cached_tokens(slots_proxy, 0)
    form = [("Content-Type", "application/x-www-form-urlencoded")]
    reply = call(slots_proxy.url, "POST", "/slots/0", general(slots_proxy) + form,
                 raw_body=b"action=erase")  # fmt: skip
    refusal(reply, 403)
    assert cached_tokens(slots_proxy, 0) > 0
    reply = call(slots_proxy.url, "POST", "/slots/0", agent(slots_proxy) + form,
                 raw_body=b"action=erase")  # fmt: skip
    assert reply.json()["n_erased"] > 0


@pytest.fixture(scope="module")
def opted_in(
    recorder: RecordingUpstream, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    proxy = start_proxy(
        recorder.url, PROXY_KEY, RECORDED_UPSTREAM_KEY, allow_unpinned="messages,rerank",
        allow_control="lora,streams", log_dir=service_logs, build=nginx_build,
    )  # fmt: skip
    with running(proxy):
        yield proxy


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/messages", True),
        ("POST", "/v1/rerank", True),
        ("POST", "/v1/embeddings", False),
        ("POST", "/lora-adapters", True),
        ("DELETE", "/v1/stream?conv_id=x", True),
        ("POST", "/props", False),
        ("POST", "/v1/chat/completions/control", False),
    ],
)
def test_opt_ins_widen_the_general_key_one_group_at_a_time(
    opted_in: NginxProxy, recorder: RecordingUpstream, method: str, path: str, allowed: bool
) -> None:
    recorder.take()
    reply = call(opted_in.url, method, path, general(opted_in), raw_body=b"{}")
    received = recorder.take()
    if allowed:
        assert reply.status == 200, reply.body
        assert [(got.method, got.target) for got in received] == [(method, path)]
    else:
        assert "LLM_PROXY_ALLOW_" in refusal(reply, 403)
        assert received == []


REFUSALS = [
    ("/v1/messages", b"{}", [], 403, 'add "messages" to LLM_PROXY_ALLOW_UNPINNED'),
    ("/v1/embeddings", b"{}", [], 403, 'add "embeddings" to LLM_PROXY_ALLOW_UNPINNED'),
    ("/lora-adapters", b"[]", [], 403, 'add "lora" to LLM_PROXY_ALLOW_CONTROL'),
    (CHAT, b'{"messages":[]}\x00', [], 400, "NUL byte"),
    (CHAT, b'{"messages":[]} {}', [], 400, "not valid JSON"),
    (CHAT, b"[1]", [], 400, "one JSON object"),
    (CHAT, b'{"n":3}', [], 400, "one completion per request"),
    (CHAT, b"{}", [("Content-Encoding", "br")], 415, "send the request body uncompressed"),
    ("/v1/nothing-here", b"{}", [], 404, "not an endpoint this proxy forwards"),
    ("/v1/%u0063hat/completions", b"{}", [], 400, ""),  # nginx's own 400 page
    # nginx decodes %25 to "%": forwarded, llama-server would decode %u0063 to "c"
    ("/v1/%25u0063hat/completions", b"{}", [], 400, "characters the proxy does not forward"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[f"{c[0]} {c[4]}" for c in REFUSALS])
def test_refusals_name_their_reason(
    recorded_proxy: NginxProxy,
    recorder: RecordingUpstream,
    case: tuple[str, bytes, list[tuple[str, str]], int, str],
) -> None:
    path, body, headers, status, reason = case
    recorder.take()
    reply = raw_post(recorded_proxy, path, general(recorded_proxy) + headers, body)
    assert reply.status == status, reply.body
    if reason:
        assert reason in refusal(reply, status)
    assert recorder.take() == []


def test_agent_bodies_with_an_invalid_slot_are_refused(recorded_proxy: NginxProxy) -> None:
    for slot in ("4", "-1", '"1"', "1.5", "true"):
        body = f'{{"messages":[],"id_slot":{slot}}}'
        assert "from 0 to 3" in refusal(
            raw_post(recorded_proxy, CHAT, agent(recorded_proxy), body), 400
        )


def test_a_key_in_the_query_string_is_not_logged_when_the_upstream_fails(
    proxy_factory: Callable[..., NginxProxy],
) -> None:
    proxy = proxy_factory(f"http://127.0.0.1:{free_port()}", "upstream-key_0123456789")  # dead
    for headers, path in ((general(proxy), f"/v1/models?api_key={PROXY_KEY}"),
                          (agent(proxy), f"/slots?key={TEST_AGENT_KEY}"),
                          (agent(proxy), f"{CHAT}?key={TEST_AGENT_KEY}")):  # fmt: skip
        method = "POST" if path.startswith(CHAT) else "GET"
        reply = call(proxy.url, method, path, headers, chat("x") if method == "POST" else None)
        assert reply.status == 502
    deadline = time.monotonic() + 10
    while proxy.access_log.read_text().count(" 502 ") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    logs = "".join(path.read_text() for path in proxy.conf_dir.glob("*.log"))
    assert logs.count("ust=502") == 3
    for secret in (PROXY_KEY, TEST_AGENT_KEY, "upstream-key_0123456789"):
        assert secret not in logs


def closed_by_proxy(sock: socket.socket) -> bool:
    """Wait (generously) for the proxy to end the connection; True when it did."""
    sock.settimeout(30)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


@pytest.mark.parametrize("stall", ["headers", "body"])
def test_a_stalled_client_is_dropped_and_nothing_is_forwarded(
    proxy_factory: Callable[..., NginxProxy], recorder: RecordingUpstream, stall: str
) -> None:
    proxy = proxy_factory(recorder.url, RECORDED_UPSTREAM_KEY, client_timeout="1s")
    recorder.take()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {PROXY_KEY}\r\n"
    if stall == "body":
        head += "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + '{"messages"'
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(head.encode())
        assert closed_by_proxy(sock)
    assert recorder.take() == []


def test_health_is_asked_as_exactly_get_health(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream
) -> None:
    recorder.take()
    headers = [*agent(recorded_proxy), ("X-Api-Key", TEST_AGENT_KEY)]
    call(recorded_proxy.url, "GET", "/health?probe=1", headers)
    (got,) = recorder.take()
    assert (got.method, got.target, got.body) == ("GET", "/health", b"")
    assert "authorization" not in got.headers
    assert "x-api-key" not in got.headers
    assert TEST_AGENT_KEY not in repr(got)
    assert json.loads(call(recorded_proxy.url, "GET", "/v1/health").body) == {"recorded": True}
