"""Slot routing (compose/nginx/njs/body.js and slots.js): which slot each generation request runs
on, read from the real llama-server's own /slots behind the real proxy (every nginx build)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys

from tests.compose.proxy_helpers import (
    CHAT,
    agent,
    chat,
    general,
    last_slot,
    metric,
    raw_post,
    refusal,
    request_lines,
    routed_slot,
    slot_of,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxBuild, NginxProxy
from voice_stack_dev.paths import model_path

pytestmark = pytest.mark.usefixtures("socket_enabled")


def test_requests_without_id_slot_avoid_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    for headers in (general(llm_proxy), agent(llm_proxy)):
        used = {slot_of(llm_proxy, llama_text, CHAT, chat(f"q {n}"), headers) for n in range(12)}
        assert 0 not in used
        assert len(used) > 1  # conversations spread over the free slots
    used_plain = {
        slot_of(
            llm_proxy, llama_text, CHAT, chat(f"no system {n}", system=None), general(llm_proxy)
        )
        for n in range(6)
    }
    assert 0 not in used_plain


@pytest.mark.parametrize("path", ["/completion", "/v1/completions", "/completions"])
def test_raw_completions_avoid_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer, path: str
) -> None:
    for n in range(4):
        payload = {"prompt": f"prompt number {n}", "max_tokens": 2, "n_predict": 2, "id_slot": 0}
        assert slot_of(llm_proxy, llama_text, path, payload, general(llm_proxy)) != 0
    tokens = {"prompt": [1, 45, 46, 47], "max_tokens": 2, "n_predict": 2}
    assert slot_of(llm_proxy, llama_text, path, tokens, general(llm_proxy)) != 0
    several = {"prompt": ["a", "b", "c"], "max_tokens": 2, "n_predict": 2}
    assert slot_of(llm_proxy, llama_text, path, several, general(llm_proxy)) != 0


def test_responses_api_avoids_reserved_slots(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    for n in range(3):
        text_input = {"instructions": "be brief", "input": f"hi {n}", "max_output_tokens": 2}
        assert slot_of(llm_proxy, llama_text, "/v1/responses", text_input, general(llm_proxy)) != 0
        items = [{"role": "user", "content": f"hello {n}"}]
        item_input = {"input": items, "max_output_tokens": 2, "id_slot": 0}
        assert slot_of(llm_proxy, llama_text, "/responses", item_input, general(llm_proxy)) != 0


def test_the_access_log_names_each_requests_slot(
    llama_text: LlamaServer, proxy_factory: Callable[..., NginxProxy]
) -> None:
    proxy = proxy_factory(llama_text.url, str(llama_text.api_key))
    slots = [
        routed_slot(proxy, llama_text, CHAT, json.dumps(chat(f"logged {n}")), general(proxy))
        for n in range(6)
    ]
    lines = request_lines(proxy, "POST", CHAT, len(slots))
    assert sorted(line.rsplit(" slot=", 1)[1] for line in lines) == sorted(map(str, slots))


def test_same_conversation_same_slot(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    for topic in ("weather", "lights", "music", "timers"):
        first = chat(
            f"tell me about {topic}", tools=[{"type": "function", "function": {"name": "x"}}]
        )
        slot = slot_of(llm_proxy, llama_text, CHAT, first, general(llm_proxy))
        follow_up = {
            **first,
            "messages": [
                *first["messages"],
                {"role": "assistant", "content": "Hello from the tiny test model."},
                {"role": "user", "content": "and then?"},
            ],
            "temperature": 0.3,
            "id_slot": 0,  # a general client naming the voice slot keeps its own slot
        }
        assert slot_of(llm_proxy, llama_text, CHAT, follow_up, general(llm_proxy)) == slot, topic


def test_a_clock_in_the_system_text_does_not_move_a_conversation(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    # Home Assistant's default prompt ends its system text with the time, to the second.
    def turn(clock: str, turns: int) -> dict[str, Any]:
        system = f"You are a voice assistant. Current time is {clock}. Today's date is 2026-12-01."
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "what is the capital of France?"},
        ]
        for n in range(turns):
            messages += [
                {"role": "assistant", "content": f"Paris, part {n}."},
                {"role": "user", "content": "and then?"},
            ]
        return {"messages": messages, "max_tokens": 2}

    clocks = [f"12:{m:02d}:{s:02d}" for m in (4, 17, 39) for s in (1, 28, 55)]
    used = {
        slot_of(llm_proxy, llama_text, CHAT, turn(clock, n), general(llm_proxy))
        for n, clock in enumerate(clocks)
    }
    assert len(used) == 1
    assert 0 not in used


def test_content_parts_conversation_keeps_its_slot(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    parts = [{"type": "text", "text": "what is on in the kitchen?"}]
    opening: list[dict[str, Any]] = [{"role": "user", "content": parts}]
    first = {"messages": opening, "max_tokens": 2}
    slot = slot_of(llm_proxy, llama_text, CHAT, first, general(llm_proxy))
    assert slot != 0
    follow_up = {
        **first,
        "messages": [
            *opening,
            {"role": "assistant", "content": "The light."},
            {"role": "user", "content": [{"type": "text", "text": "turn it off"}]},
        ],
    }
    assert slot_of(llm_proxy, llama_text, CHAT, follow_up, general(llm_proxy)) == slot


@pytest.mark.parametrize("slot", [0, 1, 3])
def test_agent_keeps_the_slot_it_names(
    llm_proxy: NginxProxy, llama_text: LlamaServer, slot: int
) -> None:
    for n in range(2):
        pinned = chat(f"pinned {n}", id_slot=slot)
        assert slot_of(llm_proxy, llama_text, CHAT, pinned, agent(llm_proxy)) == slot
        assert slot_of(llm_proxy, llama_text, CHAT, pinned, general(llm_proxy)) != 0


def test_a_general_client_keeps_a_free_slot_it_names(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    """A general client that pins a slot itself (as Home Assistant integrations that keep a
    slot's cache do) keeps it when it is free; a reserved or out-of-range one is re-routed."""
    for slot in (1, 2, 3):
        for n in range(3):  # conversations the hash would spread over the free slots
            pinned = chat(f"my own slot {n}", id_slot=slot)
            assert slot_of(llm_proxy, llama_text, CHAT, pinned, general(llm_proxy)) == slot
    raw = {"prompt": "my own slot", "n_predict": 2, "id_slot": 2}
    assert slot_of(llm_proxy, llama_text, "/completion", raw, general(llm_proxy)) == 2
    for bad in (0, 4, -1, 2.5, "2"):
        routed = chat("not a slot of mine", id_slot=bad)
        assert slot_of(llm_proxy, llama_text, CHAT, routed, general(llm_proxy)) != 0, bad


def test_escapes_and_utf8_survive_the_splice(
    llm_proxy: NginxProxy, llama_text: LlamaServer
) -> None:
    # Without an id_slot the field is spliced in: every other byte arrives as sent.
    body = '{ "prompt": "caf\\u00e9 \\"q\\" ☕ Grüße", "n_predict": 2.0, "max_tokens": 2 }'
    reply = raw_post(llm_proxy, "/completion", general(llm_proxy), body)
    assert reply.status == 200, reply.body
    # llama-server echoes the prompt it tokenised (SentencePiece marks spaces with ▁)
    assert reply.json()["prompt"].replace("\u2581", " ").strip() == 'café "q" ☕ Grüße'
    assert reply.json()["id_slot"] != 0


def test_utf8_survives_the_reserialisation(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # With an id_slot (here an alias) the object is re-serialised: text must come out intact.
    body = '\ufeff{"prompt": "caf\\u00e9 ☕ Grüße", "n_predict": 2, "id\\u005fslot": 0}'
    reply = raw_post(llm_proxy, "/completion", general(llm_proxy), body)
    assert reply.status == 200, reply.body
    assert reply.json()["prompt"].replace("\u2581", " ").strip() == "café ☕ Grüße"
    assert reply.json()["id_slot"] != 0


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_moderately_deep_bodies_are_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # 20 levels: within what every engine parses; an id_slot after the nesting is overruled too.
    for n, tail in enumerate(
        ("", ', "id_slot": 0', ', "id\\u005fslot": null', ', "id_slot": [[1]]')
    ):
        body = json.dumps(chat(f"deep {n}"))[:-1] + f', "x": {nested(20)}{tail}}}'
        assert routed_slot(llm_proxy, llama_text, CHAT, body, general(llm_proxy)) != 0


def test_depth_beyond_the_engine_is_refused_and_runs_nothing(
    llm_proxy: NginxProxy, llama_text: LlamaServer, nginx_build: NginxBuild
) -> None:
    """njs parses 31 levels, QuickJS thousands: past what the engine reads, nothing runs."""
    decodes_before = metric(llama_text, "n_decode_total")
    forty = json.dumps(chat("forty deep"))[:-1] + f', "x": {nested(40)}}}'
    if nginx_build.engine == "qjs":
        assert routed_slot(llm_proxy, llama_text, CHAT, forty, general(llm_proxy)) != 0
        decodes_before = metric(llama_text, "n_decode_total")
    else:
        assert "nested too deeply" in refusal(
            raw_post(llm_proxy, CHAT, agent(llm_proxy), forty), 400
        )
    very = json.dumps(chat("very deep"))[:-1] + f', "x": {nested(200_000)}}}'
    assert "nested too deeply" in refusal(raw_post(llm_proxy, CHAT, general(llm_proxy), very), 400)
    assert metric(llama_text, "n_decode_total") == decodes_before


def test_agent_slot_survives_a_deep_body(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    for slot in (0, 3):
        body = json.dumps(chat("deep pinned", id_slot=-1))  # a later explicit slot wins
        body = body[:-1] + f', "x": {nested(20)}, "id_slot": {slot}}}'
        assert routed_slot(llm_proxy, llama_text, CHAT, body, agent(llm_proxy)) == slot


def test_byte_order_mark_body_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # llama-server skips a leading UTF-8 BOM; njs's JSON.parse refuses it, so the proxy drops it.
    for n in range(4):
        body = "\ufeff" + json.dumps(chat(f"with a BOM {n}", id_slot=-1)) + " \n"
        assert routed_slot(llm_proxy, llama_text, CHAT, body, general(llm_proxy)) != 0
    reply = raw_post(llm_proxy, "/completion", general(llm_proxy), "\ufeff{ }")
    assert reply.status == 400, reply.body  # llama-server's own: no prompt, not a JSON error
    assert "prompt" in reply.json()["error"]["message"]


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
    llama_factory: Callable[..., LlamaServer],
    proxy_factory: Callable[..., NginxProxy],
    tmp_path: Path,
) -> None:
    llama = llama_factory(str(fim_model(tmp_path / "tiny-fim.gguf")), ctx_per_slot=512)
    proxy = proxy_factory(llama.url, str(llama.api_key))
    for n in range(4):
        infill = {"input_prefix": f"def f{n}(", "input_suffix": ")", "n_predict": 2, "id_slot": 0}
        assert routed_slot(proxy, llama, "/infill", json.dumps(infill), general(proxy)) != 0
    pinned = {"input_prefix": "x = ", "input_suffix": "", "n_predict": 2, "id_slot": 0}
    assert routed_slot(proxy, llama, "/infill", json.dumps(pinned), agent(proxy)) == 0


def test_large_body_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    # Far above nginx's default 16k body buffer: still read in memory and routed.
    payload = chat("what is on?", max_tokens=1, user="x" * 200_000, id_slot=0)
    assert slot_of(llm_proxy, llama_text, CHAT, payload, general(llm_proxy)) != 0


def test_chunked_upload_is_routed(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    body = json.dumps(chat("sent in pieces", user="x" * 50_000, id_slot=0)).encode()
    conn = http.client.HTTPConnection(llm_proxy.url.split("://", 1)[1], timeout=30)
    try:
        pieces = (body[i : i + 7000] for i in range(0, len(body), 7000))
        conn.request("POST", CHAT, pieces, dict(general(llm_proxy)), encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 200, response.read()
        assert response.read()
    finally:
        conn.close()
    assert last_slot(llama_text) != 0
