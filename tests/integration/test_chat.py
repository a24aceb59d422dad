"""The openai-SDK chat client: llama.cpp's fields and timings, and every fault mapped."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from homeassistant.core import HomeAssistant
from homeassistant.helpers.httpx_client import get_async_client

from custom_components.voice_stack.chat import ChatClient, extra
from custom_components.voice_stack.errors import (
    ContextFullError,
    ModelLoadingError,
    ReplyCutError,
    ServiceError,
    ServiceResponseError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from voice_stack_dev.fakes.integration import (
    FAKE_KEY,
    FakeLlama,
    Handler,
    chunk,
    slow,
    sse,
    status,
    streaming,
)
from voice_stack_dev.llama import LlamaServer


def _client(hass: HomeAssistant, url: str, key: str) -> ChatClient:
    sdk = openai.AsyncOpenAI(
        api_key=key, base_url=f"{url}/v1", http_client=get_async_client(hass), max_retries=0
    )
    return ChatClient(sdk)


REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 8,
    "id_slot": 2,
    "cache_prompt": True,
}


async def test_real_server_slot_and_timings(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """id_slot and cache_prompt reach llama-server; its timings come back, streamed or not."""
    chat = _client(hass, llama_text.url, llama_text.api_key or "")
    text, timings = "", None
    async for piece in chat.stream(REQUEST, 30):
        text += "".join(c.delta.content or "" for c in piece.choices)
        timings = extra(piece, "timings") or timings
    assert text == "Hello from the tiny test model."
    assert timings["predicted_n"] > 0
    reply = await chat.complete(REQUEST, 30)
    assert reply["timings"]["cache_n"] > 0  # same slot, same prompt: cached
    assert reply["choices"][0]["message"]["content"] == "Hello from the tiny test model."


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        (status(500), ServiceResponseError),
        (
            status(400, "exceed_context_size_error", n_prompt_tokens=5000, n_ctx=4096),
            ContextFullError,
        ),
        (status(503, "unavailable_error"), ModelLoadingError),
        (status(502), ServiceUnreachableError),
        (slow(3), ServiceTimeoutError),
        (streaming(sse(chunk({"content": "Hi"})), close_early=True), ReplyCutError),
        (streaming(sse(chunk({"content": "Hi"}))), ReplyCutError),  # no finish_reason
        (streaming(b"data: {not json\n\n"), ServiceError),
        (
            streaming(sse(chunk({"content": "Hi"}), {"error": {"code": 500, "message": "boom"}})),
            ServiceResponseError,
        ),
    ],
    ids=[
        "500",
        "context",
        "loading",
        "502",
        "timeout",
        "dropped",
        "unfinished",
        "garbage",
        "error-event",
    ],
)
async def test_faults(
    hass: HomeAssistant, fake: FakeLlama, handler: Handler, kind: type[Exception]
) -> None:
    """Each fault raises the integration's own error, never an SDK or transport exception."""
    fake.chat = handler
    chat = _client(hass, fake.url, FAKE_KEY)
    with pytest.raises(kind):
        async for _ in chat.stream(REQUEST, 0.5):
            pass


async def test_unreachable_and_complete_faults(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A closed port is a connection error; a hung non-streamed call times out."""
    await fake.stop()
    chat = _client(hass, fake.url, FAKE_KEY)
    with pytest.raises(ServiceUnreachableError):
        await chat.complete(REQUEST, 5)
    slow_server = await FakeLlama().start()
    try:
        slow_server.overrides.clear()
        chat = _client(hass, slow_server.url, FAKE_KEY)
        slow_server.chat = slow(3)
        with pytest.raises(ServiceTimeoutError):
            async for _ in chat.stream(REQUEST, 0.3):
                pass
    finally:
        await slow_server.stop()
