"""The llm-auth proxy's keys: real nginx + njs (every build), rendered from compose's template, in
front of a real llama-server (tiny deterministic model)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from tests.compose.conftest import PROXY_KEY
from tests.compose.proxy_helpers import (
    CHAT,
    agent,
    chat,
    general,
    metric,
    request_lines,
    slot_of,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import TEST_AGENT_KEY, NginxProxy
from voice_stack_dev.rawhttp import bearer, call, open_request

pytestmark = pytest.mark.usefixtures("socket_enabled")


# --- open endpoints --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "scope"),
    [
        ([], "none"),
        (bearer(PROXY_KEY), "general"),
        (bearer(TEST_AGENT_KEY), "agent"),
        (bearer(TEST_AGENT_KEY.swapcase()), "none"),
        (bearer("llama-server-key"), "none"),
    ],
    ids=["no key", "general", "agent", "case-flipped agent", "llama-server's key"],
)
def test_status_is_open_and_names_the_callers_key(
    llm_proxy: NginxProxy, headers: list[tuple[str, str]], scope: str
) -> None:
    assert (llm_proxy.proxy_key, llm_proxy.agent_key) == (PROXY_KEY, TEST_AGENT_KEY)
    reply = call(llm_proxy.url, "GET", "/proxy/status", headers)
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "service": "voice-stack-llm-auth",
        "reserved_slots": [0],
        "total_slots": 4,
        "scoped_keys": True,
        "key_scope": scope,
    }
    assert call(llm_proxy.url, "POST", "/proxy/status", payload={}).status == 403


def test_health_is_open(llm_proxy: NginxProxy) -> None:
    reply = call(llm_proxy.url, "GET", "/health")
    assert (reply.status, reply.json()) == (200, {"status": "ok"})


# --- credentials ------------------------------------------------------------------------------

BAD_CREDENTIALS: dict[str, list[tuple[str, str]]] = {
    "missing": [],
    "empty": [("Authorization", "")],
    "scheme only": [("Authorization", "Bearer")],
    "wrong": bearer("not-the-proxy-key_0123456789"),
    "case-flipped token": bearer(PROXY_KEY.swapcase()),
    "case-flipped agent token": bearer(TEST_AGENT_KEY.swapcase()),
    "case-flipped scheme": [("Authorization", f"bearer {PROXY_KEY}")],
    "prefix": bearer(PROXY_KEY[:-1]),
    "agent prefix": bearer(TEST_AGENT_KEY[:-1]),
    "suffix": bearer(PROXY_KEY + "x"),
    "both keys in one": bearer(PROXY_KEY + TEST_AGENT_KEY),
    "double space": [("Authorization", f"Bearer  {PROXY_KEY}")],
    "tab": [("Authorization", f"Bearer\t{PROXY_KEY}")],
    "space inside": [("Authorization", f"Bearer {PROXY_KEY[:5]} {PROXY_KEY[5:]}")],
    "llama-server's own key": bearer("llama-server-key"),
    "basic": [("Authorization", "Basic " + base64.b64encode(f"x:{PROXY_KEY}".encode()).decode())],
    "x-api-key only": [("X-Api-Key", TEST_AGENT_KEY)],
    "duplicated header": [*bearer(PROXY_KEY), *bearer(PROXY_KEY)],
    "duplicated, second agent": [*bearer(PROXY_KEY), *bearer(TEST_AGENT_KEY)],
}


@pytest.mark.parametrize("path", [CHAT, "/slots"])
def test_bad_credentials_never_reach_llama_server(
    proxy_factory: Callable[..., NginxProxy], llama_text: LlamaServer, path: str
) -> None:
    proxy = proxy_factory(llama_text.url, str(llama_text.api_key))  # its log: these requests only
    decodes_before = metric(llama_text, "n_decode_total")
    method = "POST" if path == CHAT else "GET"
    payload = chat("hello") if path == CHAT else None
    for case, headers in BAD_CREDENTIALS.items():
        reply = call(proxy.url, method, path, headers, payload)
        if case.startswith("duplicated"):
            # nginx's header parser refuses a repeated Authorization before any location runs
            assert reply.status == 400, case
        else:
            assert reply.status == 401, case
            assert reply.headers["www-authenticate"].startswith("Bearer"), case
            assert reply.json()["error"]["type"] == "authentication_error", case
    # The proxy adds llama-server's key: a request that got through would have run.
    assert metric(llama_text, "n_decode_total") == decodes_before
    lines = request_lines(proxy, method, path, len(BAD_CREDENTIALS))
    assert len(lines) == len(BAD_CREDENTIALS)
    assert all("urt=- " in line for line in lines), lines


def test_trailing_whitespace_is_not_part_of_the_token(llm_proxy: NginxProxy) -> None:
    # HTTP strips optional whitespace around a field value (RFC 9110 5.5): same credential.
    for key in (PROXY_KEY, TEST_AGENT_KEY):
        reply = call(llm_proxy.url, "GET", "/v1/models", [("Authorization", f"Bearer {key} ")])
        assert reply.status == 200


def test_both_keys_reach_llama_server_with_its_own_key(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    # llama_text accepts only its own key, so every 200 here proves the swap.
    assert call(llama_text.url, "GET", "/slots", bearer(PROXY_KEY)).status == 401
    for headers in (general(llm_proxy), agent(llm_proxy)):
        for path in ("/v1/models", "/slots", "/metrics", "/props"):
            assert call(llm_proxy.url, "GET", path, headers).status == 200, path
        reply = call(llm_proxy.url, "POST", CHAT, headers, chat("hello"))
        assert reply.status == 200
        assert reply.json()["choices"][0]["message"]["content"].startswith("Hello")


def test_client_token_is_never_forwarded(
    llama_factory: Callable[..., LlamaServer], proxy_factory: Callable[..., NginxProxy]
) -> None:
    """A llama-server that accepts only a client's token refuses everything the proxy sends."""
    for client_key in (PROXY_KEY, TEST_AGENT_KEY):
        llama = llama_factory("tiny-text", api_key=client_key, ctx_per_slot=512)
        proxy = proxy_factory(llama.url, "the-upstream-key_0123")
        headers = [*bearer(client_key), ("X-Api-Key", client_key)]
        reply = call(proxy.url, "GET", "/v1/models", headers)
        assert reply.status == 401
        assert "www-authenticate" not in reply.headers  # llama-server's 401, not the proxy's
        (line,) = request_lines(proxy, "GET", "/v1/models", 1)
        assert "urt=- " not in line  # it went upstream


@pytest.mark.parametrize("agent_key", ["", PROXY_KEY], ids=["no agent key", "same as general"])
def test_without_a_distinct_agent_key_nobody_gets_the_reserved_slots(
    llama_text: LlamaServer, proxy_factory: Callable[..., NginxProxy], agent_key: str
) -> None:
    """compose/stack refuses both; should one slip through, the general scope holds."""
    proxy = proxy_factory(llama_text.url, str(llama_text.api_key), agent_key=agent_key)
    status = call(proxy.url, "GET", "/proxy/status", bearer(PROXY_KEY)).json()
    assert (status["scoped_keys"], status["key_scope"]) == (False, "general")
    assert call(proxy.url, "GET", "/v1/models", bearer(TEST_AGENT_KEY)).status == 401
    for n in range(3):
        pinned = chat(f"no agent key {n}", id_slot=0)
        assert slot_of(proxy, llama_text, CHAT, pinned, bearer(PROXY_KEY)) != 0


def test_base64_alphabet_keys(
    llama_text: LlamaServer, proxy_factory: Callable[..., NginxProxy]
) -> None:
    key, agent_key = "aB3+/=._~-Zz0123456789==", "Zz9~._-+/=aB0123456789=="  # compose/stack's set
    proxy = proxy_factory(
        llama_text.url, str(llama_text.api_key), proxy_key=key, agent_key=agent_key
    )
    for k in (key, agent_key):
        assert call(proxy.url, "GET", "/v1/models", bearer(k)).status == 200
        assert call(proxy.url, "GET", "/v1/models", bearer(k.swapcase())).status == 401


# --- streaming and upstream restarts --------------------------------------------------------


@pytest.mark.parametrize("key", ["general", "agent"])
def test_stream_arrives_while_llama_server_is_still_generating(
    llm_proxy: NginxProxy, llama_text: LlamaServer, key: str
) -> None:
    headers = general(llm_proxy) if key == "general" else agent(llm_proxy)
    payload = chat("count", stream=True, max_tokens=6000, ignore_eos=True)
    response = open_request(llm_proxy.url, "POST", CHAT, headers, json.dumps(payload).encode())
    try:
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        chunks = 0
        while chunks < 3:
            line = response.readline()
            assert line, "stream ended early"
            if line.startswith(b"data: ") and b'"content"' in line:
                chunks += 1
        slots = call(llama_text.url, "GET", "/slots", list(llama_text.headers.items())).json()
        # Tokens reached the client before generation finished: nothing buffered them.
        assert any(slot["is_processing"] for slot in slots)
    finally:
        response.close()  # llama-server cancels the task on disconnect


def test_proxy_survives_llama_server_restart(
    llama_factory: Callable[..., LlamaServer], proxy_factory: Callable[..., NginxProxy]
) -> None:
    llama = llama_factory("tiny-text", ctx_per_slot=512)
    proxy = proxy_factory(llama.url, str(llama.api_key))
    assert call(proxy.url, "POST", CHAT, general(proxy), chat("before")).status == 200
    llama.restart()
    assert call(proxy.url, "POST", CHAT, agent(proxy), chat("after")).status == 200


def test_status_follows_the_configured_slots(
    llama_factory: Callable[..., LlamaServer], proxy_factory: Callable[..., NginxProxy]
) -> None:
    llama = llama_factory("tiny-text", n_parallel=3, ctx_per_slot=512)
    proxy = proxy_factory(llama.url, str(llama.api_key), total_slots=3, reserved_slots=(0, 1))
    assert call(proxy.url, "GET", "/proxy/status").json()["reserved_slots"] == [0, 1]
    for n in range(5):
        assert slot_of(proxy, llama, CHAT, chat(f"two reserved {n}"), general(proxy)) == 2
    assert slot_of(proxy, llama, CHAT, chat("pinned", id_slot=1), agent(proxy)) == 1


def test_keys_never_reach_the_logs(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # Last in this module: after 401s, 400s, routed and streamed requests.
    call(llm_proxy.url, "GET", "/v1/models", bearer(PROXY_KEY))
    call(llm_proxy.url, "GET", f"/v1/models?key={TEST_AGENT_KEY}", bearer(TEST_AGENT_KEY))
    assert request_lines(llm_proxy, "GET", "/v1/models", 2)
    logs = "".join(path.read_text() for path in llm_proxy.conf_dir.glob("*.log"))
    logs += llama_text.log_path.read_text()
    assert "/v1/models" in logs
    for secret in (PROXY_KEY, TEST_AGENT_KEY, str(llama_text.api_key)):
        assert secret not in logs
