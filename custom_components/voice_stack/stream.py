"""Turn llama-server's streamed chunks (openai SDK objects) into ChatLog deltas."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from homeassistant.components import conversation
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import llm
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from .chat import extra
from .const import DOMAIN

_OPEN, _CLOSE = "<think>", "</think>"


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that could begin `tag`."""
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


class ThinkFilter:
    """Split inline <think>…</think> out of streamed content (tags may be cut)."""

    def __init__(self) -> None:
        """Start outside a think block."""
        self._buf = ""
        self._thinking = False

    def feed(self, text: str) -> tuple[str, str]:
        """Return (visible, thinking) text that is certain so far."""
        self._buf += text
        visible: list[str] = []
        thinking: list[str] = []
        while self._buf:
            tag = _CLOSE if self._thinking else _OPEN
            out = thinking if self._thinking else visible
            if (idx := self._buf.find(tag)) >= 0:
                out.append(self._buf[:idx])
                self._buf = self._buf[idx + len(tag) :]
                self._thinking = not self._thinking
                continue
            keep = _partial_suffix(self._buf, tag)
            out.append(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            break
        return "".join(visible), "".join(thinking)

    def flush(self) -> tuple[str, str]:
        """Return whatever is still buffered."""
        rest, self._buf = self._buf, ""
        return ("", rest) if self._thinking else (rest, "")


@dataclass
class StreamResult:
    """What the stream told us besides the deltas."""

    started: float = field(default_factory=time.monotonic)
    first_token_ms: float | None = None
    timings: dict[str, Any] | None = None

    def mark_token(self) -> None:
        """Record the time to the first streamed token."""
        if self.first_token_ms is None:
            self.first_token_ms = (time.monotonic() - self.started) * 1000


def _tool_inputs(calls: dict[int, dict[str, str]]) -> list[llm.ToolInput]:
    inputs = []
    for index in sorted(calls):
        call = calls[index]
        try:
            args = json.loads(call["arguments"] or "{}")
        except ValueError as err:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="invalid_tool_call",
                translation_placeholders={"name": call["name"]},
            ) from err
        kwargs: dict[str, Any] = {"tool_name": call["name"], "tool_args": args}
        if call["id"]:
            kwargs["id"] = call["id"]
        inputs.append(llm.ToolInput(**kwargs))
    return inputs


def _merge_tool_call(calls: dict[int, dict[str, str]], frag: ChoiceDeltaToolCall) -> None:
    """Accumulate a streamed tool-call fragment by index."""
    call = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
    call["id"] = frag.id or call["id"]
    if frag.function is not None:
        call["name"] += frag.function.name or ""
        call["arguments"] += frag.function.arguments or ""


async def transform_stream(
    chunks: AsyncIterator[ChatCompletionChunk], result: StreamResult
) -> AsyncGenerator[conversation.AssistantContentDeltaDict]:
    """Yield ChatLog deltas: text, thinking (never spoken) and tool calls."""
    think = ThinkFilter()
    calls: dict[int, dict[str, str]] = {}
    yield {"role": "assistant"}
    async for chunk in chunks:
        if isinstance(timings := extra(chunk, "timings"), dict):
            result.timings = timings  # keep the last one (finish or usage chunk)
        for choice in chunk.choices:
            delta = choice.delta
            if reasoning := extra(delta, "reasoning_content"):
                result.mark_token()
                yield {"thinking_content": str(reasoning)}
            if text := delta.content:
                result.mark_token()
                visible, thinking = think.feed(text)
                if thinking:
                    yield {"thinking_content": thinking}
                if visible:
                    yield {"content": visible}
            for frag in delta.tool_calls or []:
                result.mark_token()
                _merge_tool_call(calls, frag)
    visible, thinking = think.flush()
    if thinking:
        yield {"thinking_content": thinking}
    if visible:
        yield {"content": visible}
    if calls:
        yield {"tool_calls": _tool_inputs(calls)}
