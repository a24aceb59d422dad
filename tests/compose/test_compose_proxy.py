"""The llm-auth proxy: real Debian nginx + njs, rendered from compose's template, in front of a
real llama-server (tiny deterministic model)."""

from __future__ import annotations

import base64
import http.client
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys

from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxProxy, start_proxy
from voice_stack_dev.paths import model_path
from voice_stack_dev.rawhttp import bearer, call, open_request

pytestmark = pytest.mark.usefixtures("socket_enabled")

CHAT = "/v1/chat/completions"
PROXY_KEY = "test-proxy-key_0123456789"  # the llm_proxy fixture's key (checked below)


def chat(
    first_user: str, *, system: str | None = "You are a helpful assistant.", **extra: Any
) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": first_user})
    return {"messages": messages, "max_tokens": 2, **extra}


def metric(llama: LlamaServer, name: str) -> float:
    text = call(llama.url, "GET", "/metrics", list(llama.headers.items())).body.decode()
    match = re.search(rf"^llamacpp:{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def last_slot(llama: LlamaServer) -> int:
    """The slot that ran the newest task (requests in these tests run one at a time)."""
    slots = call(llama.url, "GET", "/slots", list(llama.headers.items())).json()
    used = [slot for slot in slots if slot.get("id_task") is not None]
    return int(max(used, key=lambda slot: slot["id_task"])["id"])


def slot_of(proxy: NginxProxy, llama: LlamaServer, path: str, payload: dict[str, Any]) -> int:
    reply = call(proxy.url, "POST", path, bearer(PROXY_KEY), payload)
    assert reply.status == 200, reply.body
    return last_slot(llama)


def request_lines(proxy: NginxProxy, method: str, path: str, at_least: int = 0) -> list[str]:
    """The access-log lines of `method path` requests, once there are at least `at_least`.

    nginx writes a request's line just after its reply, and other requests (the harness's
    readiness probe, say) may be logged in between, so lines are matched by request, not
    counted by position.
    """
    marker = f'"{method} {path}" '
    deadline = time.monotonic() + 10.0
    while True:
        lines = [ln for ln in proxy.access_log.read_text().splitlines() if marker in ln]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


# --- open endpoints --------------------------------------------------------------------------


def test_status_is_open_and_names_the_reserved_slots(llm_proxy: NginxProxy) -> None:
    assert llm_proxy.proxy_key == PROXY_KEY
    reply = call(llm_proxy.url, "GET", "/proxy/status")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "reserved_slots": [0],
        "total_slots": 4,
        "service": "voice-stack-llm-auth",
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
    "case-flipped scheme": [("Authorization", f"bearer {PROXY_KEY}")],
    "prefix": bearer(PROXY_KEY[:-1]),
    "suffix": bearer(PROXY_KEY + "x"),
    "double space": [("Authorization", f"Bearer  {PROXY_KEY}")],
    "tab": [("Authorization", f"Bearer\t{PROXY_KEY}")],
    "space inside": [("Authorization", f"Bearer {PROXY_KEY[:5]} {PROXY_KEY[5:]}")],
    "llama-server's own key": bearer("llama-server-key"),
    "basic": [("Authorization", "Basic " + base64.b64encode(f"x:{PROXY_KEY}".encode()).decode())],
    "x-api-key only": [("X-Api-Key", PROXY_KEY)],
    "duplicated header": [*bearer(PROXY_KEY), *bearer(PROXY_KEY)],
    "duplicated, second wrong": [*bearer(PROXY_KEY), *bearer("wrong")],
}


@pytest.mark.parametrize("path", [CHAT, "/slots"])
def test_bad_credentials_never_reach_llama_server(
    llm_proxy: NginxProxy, llama_text: LlamaServer, path: str
) -> None:
    decodes_before = metric(llama_text, "n_decode_total")
    method = "POST" if path == CHAT else "GET"
    lines_before = len(request_lines(llm_proxy, method, path))
    payload = chat("hello") if path == CHAT else None
    for case, headers in BAD_CREDENTIALS.items():
        reply = call(llm_proxy.url, method, path, headers, payload)
        if case.startswith("duplicated"):
            # nginx's header parser refuses a repeated Authorization before any location runs
            assert reply.status == 400, case
        else:
            assert reply.status == 401, case
            assert reply.headers["www-authenticate"].startswith("Bearer"), case
            assert reply.json()["error"]["type"] == "authentication_error", case
    # The proxy adds llama-server's key: a request that got through would have run.
    assert metric(llama_text, "n_decode_total") == decodes_before
    new_lines = request_lines(llm_proxy, method, path, lines_before + len(BAD_CREDENTIALS))
    new_lines = new_lines[lines_before:]
    assert len(new_lines) == len(BAD_CREDENTIALS)
    assert all("urt=- " in line for line in new_lines), new_lines


def test_trailing_whitespace_is_not_part_of_the_token(llm_proxy: NginxProxy) -> None:
    # HTTP strips optional whitespace around a field value (RFC 9110 5.5): same credential.
    reply = call(llm_proxy.url, "GET", "/v1/models", [("Authorization", f"Bearer {PROXY_KEY} ")])
    assert reply.status == 200


def test_right_token_reaches_llama_server_with_its_own_key(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    # llama_text accepts only its own key, so every 200 here proves the swap.
    assert call(llama_text.url, "GET", "/slots", bearer(PROXY_KEY)).status == 401
    for method, path in (("GET", "/v1/models"), ("GET", "/slots"), ("GET", "/metrics")):
        assert call(llm_proxy.url, method, path, bearer(PROXY_KEY)).status == 200, path
    reply = call(llm_proxy.url, "POST", CHAT, bearer(PROXY_KEY), chat("hello"))
    assert reply.status == 200
    assert reply.json()["choices"][0]["message"]["content"].startswith("Hello")


def test_client_token_is_never_forwarded(
    llama_factory: Callable[..., LlamaServer], service_logs: Path
) -> None:
    """A llama-server that accepts only the client's token refuses everything the proxy sends."""
    llama = llama_factory("tiny-text", api_key=PROXY_KEY, ctx_per_slot=512)
    proxy = start_proxy(llama.url, PROXY_KEY, "the-upstream-key_0123", log_dir=service_logs)
    try:
        headers = [*bearer(PROXY_KEY), ("X-Api-Key", PROXY_KEY)]
        reply = call(proxy.url, "GET", "/v1/models", headers)
        assert reply.status == 401
        assert "www-authenticate" not in reply.headers  # llama-server's 401, not the proxy's
        (line,) = request_lines(proxy, "GET", "/v1/models", 1)
        assert "urt=- " not in line  # it went upstream
    finally:
        proxy.stop()


# --- streaming --------------------------------------------------------------------------------


def test_stream_arrives_while_llama_server_is_still_generating(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    payload = chat("count", stream=True, max_tokens=6000, ignore_eos=True)
    response = open_request(
        llm_proxy.url, "POST", CHAT, bearer(PROXY_KEY), json.dumps(payload).encode()
    )
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


# --- reserved slots ---------------------------------------------------------------------------


def test_requests_without_id_slot_avoid_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    used = {slot_of(llm_proxy, llama_text, CHAT, chat(f"question {n}")) for n in range(16)}
    assert 0 not in used
    assert len(used) > 1  # conversations spread over the free slots
    used_plain = {
        slot_of(llm_proxy, llama_text, CHAT, chat(f"no system {n}", system=None)) for n in range(8)
    }
    assert 0 not in used_plain


@pytest.mark.parametrize("path", ["/completion", "/v1/completions", "/completions"])
def test_raw_completions_avoid_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer, path: str
) -> None:
    for n in range(6):
        payload = {"prompt": f"prompt number {n}", "max_tokens": 2, "n_predict": 2}
        assert slot_of(llm_proxy, llama_text, path, payload) != 0
    tokens = {"prompt": [1, 45, 46, 47], "max_tokens": 2, "n_predict": 2}
    assert slot_of(llm_proxy, llama_text, path, tokens) != 0


def test_responses_api_avoids_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    for n in range(4):
        text_input = {"instructions": "be brief", "input": f"hi {n}", "max_output_tokens": 2}
        assert slot_of(llm_proxy, llama_text, "/v1/responses", text_input) != 0
        items = [{"role": "user", "content": f"hello {n}"}]
        item_input = {"input": items, "max_output_tokens": 2}
        assert slot_of(llm_proxy, llama_text, "/v1/responses", item_input) != 0


def test_same_conversation_same_slot(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    for topic in ("weather", "lights", "music", "timers"):
        first = chat(
            f"tell me about {topic}", tools=[{"type": "function", "function": {"name": "x"}}]
        )
        slot = slot_of(llm_proxy, llama_text, CHAT, first)
        follow_up = {
            **first,
            "messages": [
                *first["messages"],
                {"role": "assistant", "content": "Hello from the tiny test model."},
                {"role": "user", "content": "and then?"},
            ],
            "temperature": 0.3,
        }
        assert slot_of(llm_proxy, llama_text, CHAT, follow_up) == slot, topic


def test_content_parts_conversation_keeps_its_slot(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    parts = [{"type": "text", "text": "what is on in the kitchen?"}]
    opening: list[dict[str, Any]] = [{"role": "user", "content": parts}]
    first = {"messages": opening, "max_tokens": 2}
    slot = slot_of(llm_proxy, llama_text, CHAT, first)
    assert slot != 0
    follow_up = {
        **first,
        "messages": [
            *opening,
            {"role": "assistant", "content": "The light."},
            {"role": "user", "content": [{"type": "text", "text": "turn it off"}]},
        ],
    }
    assert slot_of(llm_proxy, llama_text, CHAT, follow_up) == slot


@pytest.mark.parametrize("slot", [0, 1, 3])
def test_explicit_slots_pass_through(
    llm_proxy: NginxProxy, llama_text: LlamaServer, slot: int
) -> None:
    for n in range(3):
        assert slot_of(llm_proxy, llama_text, CHAT, chat(f"pinned {n}", id_slot=slot)) == slot


@pytest.mark.parametrize("value", [-1, None, "2"])
def test_automatic_id_slot_values_are_routed(
    llm_proxy: NginxProxy, llama_text: LlamaServer, value: object
) -> None:
    # llama-server treats -1, null and a wrong type as "any slot"
    for n in range(6):
        assert slot_of(llm_proxy, llama_text, CHAT, chat(f"auto {n}", id_slot=value)) != 0


def test_escapes_and_utf8_survive_the_splice(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    # The field is spliced in, not re-serialised; multi-byte text must come out intact.
    body = (
        '{ "prompt": "caf\\u00e9 \\"q\\" ☕ Grüße", "n_predict": 2.0, "max_tokens": 2 }'
    ).encode()
    reply = call(llm_proxy.url, "POST", "/completion", bearer(PROXY_KEY), raw_body=body)
    assert reply.status == 200, reply.body
    reply_json = reply.json()
    # llama-server echoes the prompt it tokenised (SentencePiece marks spaces with ▁)
    assert reply_json["prompt"].replace("\u2581", " ").strip() == 'café "q" ☕ Grüße'
    assert reply_json["id_slot"] != 0
    assert last_slot(llama_text) == reply_json["id_slot"]


# njs's JSON.parse gives up past about 32 levels of nesting; llama-server's parser has no limit.
DEEP = "[" * 40 + "]" * 40


def routed_slot(proxy: NginxProxy, llama: LlamaServer, path: str, body: str) -> int:
    """Send a raw body; return the slot it ran on, after checking the proxy logged that slot."""
    lines_before = len(request_lines(proxy, "POST", path))
    reply = call(proxy.url, "POST", path, bearer(PROXY_KEY), raw_body=body.encode())
    assert reply.status == 200, reply.body
    slot = last_slot(llama)
    lines = request_lines(proxy, "POST", path, lines_before + 1)
    assert len(lines) == lines_before + 1, lines
    line = lines[-1]
    assert line.endswith(f" slot={slot}"), line
    return slot


@pytest.mark.parametrize("path", [CHAT, "/completion"])
def test_deeply_nested_body_avoids_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer, path: str
) -> None:
    for n in range(8):
        body = json.dumps({**chat(f"deep {n}"), "prompt": f"deep prompt {n}", "n_predict": 2})
        assert routed_slot(llm_proxy, llama_text, path, body[:-1] + f', "x": {DEEP}}}') != 0


@pytest.mark.parametrize(
    "any_slot",
    [', "id_slot": -1', ', "id\\u005fslot": null', ', "id_slot": [[[[[[[[[[1]]]]]]]]]]'],
    ids=["-1", "escaped key", "deep value"],
)
def test_deep_body_cannot_ask_for_any_slot_after_the_routed_one(
    llm_proxy: NginxProxy, llama_text: LlamaServer, any_slot: str
) -> None:
    # llama-server keeps the last of duplicate keys: the proxy's id_slot must be that last one.
    for n in range(6):
        body = json.dumps(chat(f"deep auto {n}"))[:-1] + f', "x": {DEEP}{any_slot}}}'
        assert routed_slot(llm_proxy, llama_text, CHAT, body) != 0


@pytest.mark.parametrize("slot", [0, 3])
def test_deep_body_keeps_an_explicit_slot(
    llm_proxy: NginxProxy, llama_text: LlamaServer, slot: int
) -> None:
    for n in range(3):
        body = json.dumps(chat(f"deep pinned {n}", id_slot=-1))  # a later explicit slot wins
        body = body[:-1] + f', "x": {DEEP}, "id_slot": {slot}}}'
        assert routed_slot(llm_proxy, llama_text, CHAT, body) == slot


def test_byte_order_mark_body_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # llama-server skips a leading UTF-8 BOM; njs's JSON.parse refuses it.
    for n in range(6):
        body = "\ufeff" + json.dumps(chat(f"with a BOM {n}", id_slot=-1)) + " \n"
        assert routed_slot(llm_proxy, llama_text, CHAT, body) != 0
    empty = "\ufeff{ " + "}"  # no field to put a comma after
    reply = call(llm_proxy.url, "POST", "/completion", bearer(PROXY_KEY), raw_body=empty.encode())
    assert reply.status == 400, reply.body  # llama-server's own: no prompt, not a JSON error
    assert "prompt" in reply.json()["error"]["message"]


def test_deep_body_that_is_not_an_object_runs_nothing(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    decodes_before = metric(llama_text, "n_decode_total")
    for body in (f"[{DEEP}]", f'[{{"prompt": "x", "n_predict": 2}}, {DEEP}]'):
        reply = call(
            llm_proxy.url, "POST", "/completion", bearer(PROXY_KEY), raw_body=body.encode()
        )
        assert reply.status == 400, reply.body
        assert reply.json()["error"]["type"] == "invalid_request_error"
    assert metric(llama_text, "n_decode_total") == decodes_before


def fim_model(path: Path) -> Path:
    """tiny-text with fill-in-the-middle tokens named, so llama-server serves /infill with it."""
    reader = GGUFReader(model_path("tiny-text"))
    writer = GGUFWriter(str(path), "llama")
    for item in reader.fields.values():
        if item.name == Keys.General.ARCHITECTURE or item.name.startswith("GGUF."):
            continue
        kind = item.types[0]
        sub_type = item.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(item.name, item.contents(), kind, sub_type=sub_type)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    for part, token in (
        ("pre", "<tool_call>"),
        ("suf", "</tool_call>"),
        ("mid", "<tool_response>"),
    ):
        writer.add_uint32(f"tokenizer.ggml.fim_{part}_token_id", tokens.index(token))
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data), raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_infill_avoids_reserved_slots(
    llama_factory: Callable[..., LlamaServer], service_logs: Path, tmp_path: Path
) -> None:
    llama = llama_factory(str(fim_model(tmp_path / "tiny-fim.gguf")), ctx_per_slot=512)
    proxy = start_proxy(llama.url, PROXY_KEY, str(llama.api_key), log_dir=service_logs)
    try:
        for n in range(6):
            infill = {"input_prefix": f"def f{n}(", "input_suffix": ")", "n_predict": 2}
            assert routed_slot(proxy, llama, "/infill", json.dumps(infill)) != 0
        pinned = {"input_prefix": "x = ", "input_suffix": "", "n_predict": 2, "id_slot": 0}
        assert routed_slot(proxy, llama, "/infill", json.dumps(pinned)) == 0
    finally:
        proxy.stop()


def test_malformed_json_gets_llama_servers_own_error(llm_proxy: NginxProxy) -> None:
    reply = call(llm_proxy.url, "POST", CHAT, bearer(PROXY_KEY), raw_body=b'{"messages": [')
    assert reply.status in (400, 500)
    assert "error" in reply.json()


def test_large_body_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # Far above nginx's default 16k body buffer: still read in memory and routed.
    payload = chat("what is on?", max_tokens=1, user="x" * 200_000)
    assert slot_of(llm_proxy, llama_text, CHAT, payload) != 0


def test_chunked_upload_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    body = json.dumps(chat("sent in pieces", user="x" * 50_000)).encode()
    conn = http.client.HTTPConnection(llm_proxy.url.split("://", 1)[1], timeout=30)
    try:
        pieces = (body[i : i + 7000] for i in range(0, len(body), 7000))
        conn.request("POST", CHAT, pieces, dict(bearer(PROXY_KEY)), encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        conn.close()
    assert last_slot(llama_text) != 0


def test_proxy_survives_llama_server_restart(
    llama_factory: Callable[..., LlamaServer], service_logs: Path
) -> None:
    llama = llama_factory("tiny-text", ctx_per_slot=512)
    proxy = start_proxy(llama.url, PROXY_KEY, str(llama.api_key), log_dir=service_logs)
    try:
        assert call(proxy.url, "POST", CHAT, bearer(PROXY_KEY), chat("before")).status == 200
        llama.restart()
        assert call(proxy.url, "POST", CHAT, bearer(PROXY_KEY), chat("after")).status == 200
    finally:
        proxy.stop()


def test_base64_alphabet_key(llama_text: LlamaServer, service_logs: Path) -> None:
    key = "aB3+/=._~-Zz0123456789=="  # every character compose/stack accepts
    proxy = start_proxy(llama_text.url, key, str(llama_text.api_key), log_dir=service_logs)
    try:
        assert call(proxy.url, "GET", "/v1/models", bearer(key)).status == 200
        assert call(proxy.url, "GET", "/v1/models", bearer(key.swapcase())).status == 401
    finally:
        proxy.stop()


def test_status_follows_the_configured_slots(
    llama_factory: Callable[..., LlamaServer], service_logs: Path
) -> None:
    llama = llama_factory("tiny-text", n_parallel=3, ctx_per_slot=512)
    proxy = start_proxy(
        llama.url,
        PROXY_KEY,
        str(llama.api_key),
        total_slots=3,
        reserved_slots=(0, 1),
        log_dir=service_logs,
    )
    try:
        assert call(proxy.url, "GET", "/proxy/status").json()["reserved_slots"] == [0, 1]
        for n in range(5):
            assert slot_of(proxy, llama, CHAT, chat(f"two reserved {n}")) == 2
    finally:
        proxy.stop()


def test_keys_never_reach_the_logs(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # Last in this module: after 401s, 400s, routed, streamed and chunked requests.
    call(llm_proxy.url, "GET", "/v1/models", bearer(PROXY_KEY))
    assert request_lines(llm_proxy, "GET", "/v1/models", 1)
    logs = "".join(path.read_text() for path in llm_proxy.conf_dir.glob("*.log"))
    logs += llama_text.log_path.read_text()
    assert "/v1/models" in logs
    assert PROXY_KEY not in logs
    assert str(llama_text.api_key) not in logs
