"""Smoke: the provisioned llama-server serves the real HTTP API for every test model."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from voice_stack_dev.llama import LlamaServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]


def post_json(server: LlamaServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        server.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **server.headers},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = json.load(response)
    return result


def test_tiny_text_answers_deterministically(llama_text: LlamaServer) -> None:
    reply = post_json(
        llama_text,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hi"}], "id_slot": 2},
    )
    assert reply["choices"][0]["message"]["content"] == "Hello from the tiny test model."
    assert reply["timings"]["predicted_n"] == 8


def test_tiny_tool_calls_then_answers(llama_tool: LlamaServer) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What time is it?"}]
    first = post_json(llama_tool, "/v1/chat/completions", {"messages": messages, "tools": TOOLS})
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_time"
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "12:00"},
    ]
    second = post_json(llama_tool, "/v1/chat/completions", {"messages": messages, "tools": TOOLS})
    assert second["choices"][0]["message"]["content"] == "Hello from the tiny test model."


def test_smollm2_answers(llama_smollm2: LlamaServer) -> None:
    reply = post_json(
        llama_smollm2,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16},
    )
    assert reply["choices"][0]["message"]["content"].strip()
    assert reply["timings"]["predicted_per_second"] > 0


def test_api_key_required(llama_text: LlamaServer) -> None:
    request = urllib.request.Request(llama_text.url + "/slots")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 401


def test_slots_unified_kv_off(llama_text: LlamaServer) -> None:
    request = urllib.request.Request(llama_text.url + "/slots", headers=llama_text.headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        slots = json.load(response)
    assert [slot["id"] for slot in slots] == [0, 1, 2, 3]
