"""Turn a ChatLog into llama-server messages with a cache-stable layout.

llama-server reuses the longest common token prefix cached in a slot. HA puts
per-request sentences (satellite area, timer support, the time when no tool
provides it, the extra system prompt) at the end of the system text, which the
chat template follows with the tool block: one changed byte there re-processes
every tool definition. The cache-stable layout keeps the system text and the
name-sorted tools byte-identical and moves those sentences into the user
message they belong to.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import probatio
from homeassistant.components import conversation
from homeassistant.helpers import llm
from homeassistant.helpers.json import json_dumps

from .const import LAYOUT_CACHE_STABLE

# Lines HA adds to the system text that differ per request or per satellite.
_VOLATILE_PREFIXES = (
    "You are in area ",
    "Current time is ",
    "When a user asks to turn on all devices of a specific type, ask the user",
    "This device is not able to start timers.",
)
_MAX_CONVERSATIONS = 64


def split_system_prompt(system: str, extra: str | None) -> tuple[str, str]:
    """Split HA's system text into (stable part, volatile part)."""
    volatile: list[str] = []
    if extra and system.endswith(extra):
        system = system[: -len(extra)].rstrip("\n")
        volatile_extra: str | None = extra
    else:
        volatile_extra = None
    stable: list[str] = []
    for line in system.split("\n"):
        if line.startswith(_VOLATILE_PREFIXES):
            volatile.append(line)
        else:
            stable.append(line)
    if volatile_extra:
        volatile.append(volatile_extra)
    return "\n".join(stable).rstrip("\n"), "\n".join(volatile).strip()


def format_tools(llm_api: llm.APIInstance | None, *, stable_order: bool) -> list[dict[str, Any]]:
    """Format HA tools as OpenAI function tools, sorted by name when asked."""
    if llm_api is None:
        return []
    tools = sorted(llm_api.tools, key=lambda t: t.name) if stable_order else llm_api.tools
    return [_format_tool(tool, llm_api.custom_serializer) for tool in tools]


def _format_tool(tool: llm.Tool, serializer: Callable[[Any], Any] | None) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "parameters": probatio.to_openapi(
            tool.parameters, custom_serializer=serializer, openapi_version="3.1.0"
        ),
    }
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def trim_turns(content: list[conversation.Content], max_turns: int) -> list[int]:
    """Indices (into content) to send: system plus the newest whole turns.

    A turn starts at a user message, so an assistant tool call always stays with
    its results. Turns are dropped in chunks of half the limit, so the first
    kept message (and thus the cached prefix) only moves every few turns.
    """
    starts = [i for i, c in enumerate(content) if isinstance(c, conversation.UserContent)]
    if max_turns <= 0 or len(starts) <= max_turns:
        return list(range(len(content)))
    chunk = max(1, max_turns // 2)
    drop = math.ceil((len(starts) - max_turns) / chunk) * chunk
    first = starts[min(drop, len(starts) - 1)]
    return [0, *range(first, len(content))]


@dataclass(slots=True)
class _Conversation:
    injected: dict[int, str]
    last: str | None


class VolatileContext:
    """Remember which user message carried which volatile text, per conversation.

    Re-sending history byte-for-byte keeps the cached prefix valid for every
    earlier turn; the text is only repeated when it changed.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._convs: OrderedDict[str, _Conversation] = OrderedDict()

    def for_turn(self, conversation_id: str, index: int, volatile: str) -> dict[int, str]:
        """Record the volatile text for user message `index`; return the mapping."""
        conv = self._convs.pop(conversation_id, None) or _Conversation({}, None)
        self._convs[conversation_id] = conv
        while len(self._convs) > _MAX_CONVERSATIONS:
            self._convs.popitem(last=False)
        if index not in conv.injected and volatile and volatile != conv.last:
            conv.injected[index] = volatile
            conv.last = volatile
        return conv.injected


# what conversation/chat_log.py (HA 2026.11) writes as the assistant's part of a failed turn
HA_NO_RESPONSE = "(no response)"
HA_ERROR_PREFIX = "Error: "


def build_messages(
    chat_log: conversation.ChatLog,
    *,
    layout: str,
    max_turns: int,
    volatile_context: VolatileContext,
) -> list[dict[str, Any]]:
    """Convert the chat log to llama-server messages."""
    content = chat_log.content
    first = content[0]
    system = first.content if isinstance(first, conversation.SystemContent) else ""
    injected: dict[int, str] = {}
    if layout == LAYOUT_CACHE_STABLE:
        system, volatile = split_system_prompt(system, chat_log.extra_system_prompt)
        user_idx = [i for i, c in enumerate(content) if isinstance(c, conversation.UserContent)]
        if user_idx:
            injected = volatile_context.for_turn(chat_log.conversation_id, user_idx[-1], volatile)
    kept = trim_turns(content, max_turns)
    if injected and len(kept) > 1:
        injected = _carry_over(injected, kept[1])
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i in kept:
        if i == 0:
            continue
        if (msg := _convert(content[i], injected.get(i))) is not None:
            if _written_by_ha(content, i):
                msg["content"] = ""
            messages.append(msg)
    return messages


def _written_by_ha(content: list[conversation.Content], i: int) -> bool:
    """Whether item `i` is the assistant text HA 2026.11 writes itself at the end of a failed
    turn ("Error: <what failed>") or of one the agent added nothing to ("(no response)").

    Sent back, a small model repeats it ("Error: Cannot reach ..." as its reply to the next
    question), and it is nothing the model said. It is sent empty instead: the roles still
    alternate (Gemma's template refuses two user messages in a row), the user's unanswered
    question stays for a "try again", and the request's prefix is the same every time it is sent.
    """
    item = content[i]
    if not isinstance(item, conversation.AssistantContent) or item.tool_calls:
        return False
    text = item.content or ""
    ends_turn = i + 1 == len(content) or isinstance(content[i + 1], conversation.UserContent)
    return ends_turn and (text == HA_NO_RESPONSE or text.startswith(HA_ERROR_PREFIX))


def _carry_over(injected: dict[int, str], first: int) -> dict[int, str]:
    """Give the first kept message the volatile text in effect when it was sent.

    Trimming may drop the message that carried the current area, time or extra prompt,
    leaving the model without it. Repeating that text in the first kept message keeps the
    system prompt and tools untouched and is byte-stable: it depends only on where the
    history starts, which moves every few turns (trim_turns drops chunks), and a move
    re-processes everything after the tools anyway. Its cost is those few tokens once per
    move. Newer injections stay where they are, so the model reads them in order.
    """
    if first in injected:
        return injected
    earlier = [i for i in injected if i < first]
    return {**injected, first: injected[max(earlier)]} if earlier else injected


def _convert(item: conversation.Content, prefix: str | None) -> dict[str, Any] | None:
    """Convert one chat log item; thinking is never sent back."""
    if isinstance(item, conversation.ToolResultContent):
        return {
            "role": "tool",
            "tool_call_id": item.tool_call_id,
            "content": json_dumps({"data": item.result.data, "error": item.result.error}),
        }
    if isinstance(item, conversation.UserContent):
        text = item.content
        return {"role": "user", "content": f"{prefix}\n\n{text}" if prefix else text}
    if isinstance(item, conversation.AssistantContent):
        msg: dict[str, Any] = {"role": "assistant", "content": item.content or ""}
        if item.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.tool_name, "arguments": json_dumps(call.tool_args)},
                }
                for call in item.tool_calls
            ]
        return msg
    return None
