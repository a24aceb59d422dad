"""Streamed chunks to chat-log deltas: think blocks, reasoning, tool-call fragments, timings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from homeassistant.exceptions import HomeAssistantError
from openai.types.chat import ChatCompletionChunk

from custom_components.voice_stack.stream import StreamResult, ThinkFilter, transform_stream
from voice_stack_dev.fakes.integration import TIMINGS, chunk


@pytest.mark.parametrize(
    ("pieces", "visible", "thinking"),
    [
        (["<think>a</think>b"], "b", "a"),
        (["<th", "ink>a", "</thi", "nk>b"], "b", "a"),
        (["x < y"], "x < y", ""),
        (["<think>never closed"], "", "never closed"),
        (["ends with <"], "ends with <", ""),
    ],
)
def test_think_filter(pieces: list[str], visible: str, thinking: str) -> None:
    """Inline think tags are split out even when cut between chunks."""
    f = ThinkFilter()
    seen_v, seen_t = "", ""
    for piece in pieces:
        v, t = f.feed(piece)
        seen_v, seen_t = seen_v + v, seen_t + t
    v, t = f.flush()
    assert (seen_v + v, seen_t + t) == (visible, thinking)


async def _chunks(*raw: dict[str, Any]) -> AsyncIterator[ChatCompletionChunk]:
    for item in raw:
        yield ChatCompletionChunk.model_validate(item)


async def _deltas(*raw: dict[str, Any]) -> tuple[list[dict[str, Any]], StreamResult]:
    result = StreamResult()
    deltas = [dict(d) async for d in transform_stream(_chunks(*raw), result)]
    return deltas, result


async def test_text_reasoning_and_timings() -> None:
    """Reasoning and <think> text become thinking; the last timings are kept."""
    deltas, result = await _deltas(
        chunk({"role": "assistant", "reasoning_content": "Let me think."}),
        chunk({"content": "<think>hidden</think>On."}),
        chunk({}, "stop", timings=TIMINGS),
    )
    assert deltas == [
        {"role": "assistant"},
        {"thinking_content": "Let me think."},
        {"thinking_content": "hidden"},
        {"content": "On."},
    ]
    assert result.timings == TIMINGS
    assert result.first_token_ms is not None


async def test_tool_call_fragments_are_joined() -> None:
    """Name and arguments split over deltas are joined per index."""
    first = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get_", "arguments": '{"a'},
    }
    second = {"index": 0, "function": {"name": "time", "arguments": '": 1}'}}
    deltas, _ = await _deltas(chunk({"tool_calls": [first]}), chunk({"tool_calls": [second]}))
    (call,) = deltas[-1]["tool_calls"]
    assert (call.id, call.tool_name, call.tool_args) == ("c1", "get_time", {"a": 1})


async def test_tool_arguments_that_are_not_json() -> None:
    """A clear, translated error names the tool."""
    bad = {"index": 0, "id": "c1", "type": "function", "function": {"name": "t", "arguments": "{x"}}
    with pytest.raises(HomeAssistantError) as err:
        await _deltas(chunk({"tool_calls": [bad]}))
    assert err.value.translation_key == "invalid_tool_call"
