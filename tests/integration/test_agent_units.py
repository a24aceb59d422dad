"""Pure helpers of the agent: prompt layout, history trimming, think filter, SSE, timings."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest.mock import AsyncMock, MagicMock

import aiohttp
import pytest
from homeassistant.components import conversation
from homeassistant.helpers import llm

from custom_components.voice_stack.client import (
    LlamaClient,
    LlamaContextError,
    LlamaResponseError,
    LlamaStreamError,
    parse_sse_line,
)
from custom_components.voice_stack.prompt import VolatileContext, split_system_prompt, trim_turns
from custom_components.voice_stack.stream import ThinkFilter
from custom_components.voice_stack.timings import Timings, parse_timings

AREA = (
    "You are in area Kitchen and all generic commands like 'turn on the lights' should target"
    " this area."
)


def test_split_moves_volatile_lines_out() -> None:
    """Area, timers, time and the extra prompt leave; everything else keeps its order."""
    system = "\n".join(
        [
            "Be brief.",
            "Static Context: ...",
            AREA,
            "This device is not able to start timers.",
            "Current time is 10:00:00. Today's date is 2026-11-30.",
            "",
            "Announce: dinner",
        ]
    )
    stable, volatile = split_system_prompt(system, "Announce: dinner")
    assert stable == "Be brief.\nStatic Context: ..."
    assert volatile.splitlines() == [
        AREA,
        "This device is not able to start timers.",
        "Current time is 10:00:00. Today's date is 2026-11-30.",
        "Announce: dinner",
    ]
    assert split_system_prompt("Only stable.", None) == ("Only stable.", "")


def _log(turns: int) -> list[conversation.Content]:
    content: list[conversation.Content] = [conversation.SystemContent("sys")]
    for n in range(turns):
        content.append(conversation.UserContent(f"u{n}"))
        call = llm.ToolInput(tool_name="t", tool_args={}, id=f"c{n}")
        content.append(conversation.AssistantContent("a", tool_calls=[call]))
        content.append(conversation.ToolResultContent("a", f"c{n}", "t", llm.ToolResult({})))
        content.append(conversation.AssistantContent("a", f"r{n}"))
    return content


@pytest.mark.parametrize(
    ("turns", "limit", "first_user"), [(3, 4, 0), (5, 4, 2), (6, 4, 2), (7, 4, 4), (9, 0, 0)]
)
def test_trim_keeps_whole_turns_in_chunks(turns: int, limit: int, first_user: int) -> None:
    """Drops whole turns (tool call stays with its result), two at a time for a limit of 4."""
    content = _log(turns)
    kept = trim_turns(content, limit)
    assert kept[0] == 0
    first = content[kept[1]]
    assert isinstance(first, conversation.UserContent)
    assert first.content == f"u{first_user}"
    assert kept[1:] == list(range(kept[1], len(content)))


def test_volatile_context_is_remembered_per_message() -> None:
    """Earlier user messages keep their text; it is only repeated when it changed."""
    ctx = VolatileContext()
    assert ctx.for_turn("c", 1, "t1") == {1: "t1"}
    assert ctx.for_turn("c", 1, "t2") == {1: "t1"}  # a tool round of the same turn
    assert ctx.for_turn("c", 5, "t1") == {1: "t1"}  # unchanged: not repeated
    assert ctx.for_turn("c", 9, "t3") == {1: "t1", 9: "t3"}
    for n in range(70):
        ctx.for_turn(f"other{n}", 1, "x")
    assert ctx.for_turn("c", 11, "") == {}  # evicted after 64 newer conversations


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


def test_sse_lines() -> None:
    """Pings, fields, blanks and [DONE] are skipped; errors and garbage raise."""
    assert parse_sse_line(": ping\n") is None
    assert parse_sse_line("event: x\n") is None
    assert parse_sse_line("\n") is None
    assert parse_sse_line("data: [DONE]\n") is None
    assert parse_sse_line('data: {"a": 1}\r\n') == {"a": 1}
    with pytest.raises(LlamaStreamError):
        parse_sse_line("data: [1]")
    with pytest.raises(LlamaContextError) as err:
        parse_sse_line(
            'data: {"error": {"code": 400, "type": "exceed_context_size_error",'
            ' "message": "m", "n_ctx": 9}}'
        )
    assert err.value.n_ctx == 9
    with pytest.raises(LlamaResponseError) as err2:
        parse_sse_line('data: {"error": "x"}')
    assert err2.value.status == 500


def test_timings_properties() -> None:
    """Percentages: None without data."""
    now = datetime(2026, 11, 30, tzinfo=UTC)
    t = parse_timings(
        {"cache_n": 3, "prompt_n": 1, "draft_n": 4, "draft_n_accepted": 3},
        slot=0,
        time_to_first_token_ms=None,
        received_at=now,
    )
    assert t.cache_reuse == 75
    assert t.draft_acceptance == 75
    empty = Timings(0, 0, 0, 0, None, None, None, None, None, now)
    assert empty.cache_reuse is None
    assert empty.draft_acceptance is None
    assert empty.as_dict()["received_at"] == now.isoformat()


async def test_closed_keepalive_is_resent_once() -> None:
    """A write to a keep-alive connection the server closed is sent again; nothing else is."""
    ok = MagicMock(status=200)
    ok.text = AsyncMock(return_value='{"status": "ok"}')
    session = MagicMock()
    session.request = AsyncMock(
        side_effect=[aiohttp.ClientConnectionResetError("closing transport"), ok]
    )
    client = LlamaClient(session, "http://x", "")
    assert await client.health() == {"status": "ok"}
    assert session.request.await_count == 2

    session.request = AsyncMock(side_effect=aiohttp.ServerDisconnectedError())
    with pytest.raises(Exception, match="disconnected"):
        await client.complete({"messages": []}, 1)
    assert session.request.await_count == 1  # a POST that may have run is not resent
