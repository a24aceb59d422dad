"""Smoke: the provisioned llama-server serves the real HTTP API for every test model."""

from __future__ import annotations

from typing import Any

from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.rawhttp import call

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
    reply = call(server.url, "POST", path, list(server.headers.items()), body)
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
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
    assert call(llama_text.url, "GET", "/slots").status == 401


def test_slots_unified_kv_off(llama_text: LlamaServer) -> None:
    slots = call(llama_text.url, "GET", "/slots", list(llama_text.headers.items())).json()
    assert [slot["id"] for slot in slots] == [0, 1, 2, 3]
