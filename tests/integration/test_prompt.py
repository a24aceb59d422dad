"""The cache-stable prompt: volatile lines moved out, whole turns trimmed, context remembered."""

from __future__ import annotations

import pytest
from homeassistant.components import conversation
from homeassistant.components.conversation.chat_log import ChatLog
from homeassistant.core import HomeAssistant
from homeassistant.helpers import llm

from custom_components.voice_stack.const import LAYOUT_HA_DEFAULT
from custom_components.voice_stack.prompt import (
    VolatileContext,
    build_messages,
    split_system_prompt,
    trim_turns,
)
from tests.integration.helpers import AREA


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
    ("reply", "then", "sent"),
    [
        ("Error: Cannot reach the server", "user", ""),  # HA's own text for a failed turn
        ("(no response)", "end", ""),  # the log's last turn
        ("Error: ...", "tool call", "Error: ..."),  # mid-turn: the model's own words
        ("It is 5 pm.", "user", "It is 5 pm."),
    ],
)
def test_only_the_failure_text_ha_writes_is_sent_empty(
    hass: HomeAssistant, reply: str, then: str, sent: str
) -> None:
    """HA 2026.11 ends a failed turn with "Error: ..." or "(no response)": sent empty. A real
    reply, or such text before more of the same turn, is sent as it is."""
    log = ChatLog(hass, "c1")
    log.content += [
        conversation.UserContent("what time is it"),
        conversation.AssistantContent("a", reply),
    ]
    if then == "tool call":
        call = llm.ToolInput(tool_name="t", tool_args={}, id="c")
        log.content.append(conversation.AssistantContent("a", None, tool_calls=[call]))
    elif then == "user":
        log.content.append(conversation.UserContent("again"))
    messages = build_messages(
        log, layout=LAYOUT_HA_DEFAULT, max_turns=0, volatile_context=VolatileContext()
    )
    assert messages[2] == {"role": "assistant", "content": sent}
