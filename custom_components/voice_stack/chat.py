"""Chat completions through the openai SDK, with llama.cpp's own fields and timings.

Requests are built as plain dicts by the agent; the fields the OpenAI API does not know
(`id_slot`, `cache_prompt`, `chat_template_kwargs`, `n_predict`) travel in `extra_body`, and
llama.cpp's `timings` come back as extra fields of the final chunk. The SDK never retries (a
request may already have run upstream); every call has the caller's total timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import httpx2
import openai
from openai import AsyncStream

# The SDK imports its chat resources on first use, which would be the first request, inside the
# event loop (HA reports a blocking import); importing them here does it in HA's import executor.
from openai.resources.chat import AsyncChat
from openai.types.chat import ChatCompletionChunk

from .client import error_from_reply
from .const import CONNECT_TIMEOUT
from .errors import ReplyCutError, ServiceError, ServiceTimeoutError, ServiceUnreachableError

# HA 2026.10 hands the SDK a client of the legacy httpx package, 2026.11 one of httpx2: the
# errors raised while a stream is read come from whichever it is.
_TIMEOUTS = (TimeoutError, openai.APITimeoutError, httpx2.TimeoutException, httpx.TimeoutException)
_TRANSPORT = (httpx2.HTTPError, httpx.HTTPError)
# Fields of the OpenAI chat API that the SDK takes as arguments; the rest go in extra_body.
_SDK_FIELDS = frozenset(
    {"model", "messages", "tools", "temperature", "max_tokens", "response_format"}
)
_NO_MODEL = "default"  # llama-server serves its one model whatever the request names


def extra(model: Any, key: str) -> Any:
    """A field llama.cpp adds that the SDK's types do not declare (timings, reasoning...)."""
    extras = getattr(model, "model_extra", None)
    return extras.get(key) if isinstance(extras, dict) else None


class ChatClient:
    """POST /v1/chat/completions, streaming or not, on a shared AsyncOpenAI client."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        """Use the given client (its base URL ends in /v1)."""
        self._chat: AsyncChat = client.with_options(max_retries=0).chat

    def _arguments(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        args = {k: v for k, v in request.items() if k in _SDK_FIELDS}
        args["model"] = args.get("model") or _NO_MODEL
        args["extra_body"] = {k: v for k, v in request.items() if k not in _SDK_FIELDS}
        args["timeout"] = httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT)
        return args

    async def complete(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """A whole reply as a dict (choices, usage and llama.cpp's timings)."""
        with _mapped_errors():
            async with asyncio.timeout(timeout_s):
                reply = await self._chat.completions.create(
                    **self._arguments(request, timeout_s), stream=False
                )
        dumped: dict[str, Any] = reply.model_dump()
        return dumped

    async def stream(
        self, request: dict[str, Any], timeout_s: float
    ) -> AsyncGenerator[ChatCompletionChunk]:
        """Chunks as they arrive; raises ReplyCutError when the reply ends early.

        The deadline covers only this generator's own waits: a timeout scope spanning its
        yields would cancel whatever the consumer is doing at that moment instead.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        with _mapped_errors():
            async with asyncio.timeout_at(deadline):
                chunks: AsyncStream[ChatCompletionChunk] = await self._chat.completions.create(
                    **self._arguments(request, timeout_s),
                    stream=True,
                    stream_options={"include_usage": True},
                )
        finished = False
        async with chunks:
            while True:
                with _mapped_errors(replying=True):
                    async with asyncio.timeout_at(deadline):
                        chunk = await anext(chunks, None)
                if chunk is None:
                    break
                finished = finished or any(c.finish_reason for c in chunk.choices)
                yield chunk
        if not finished:
            raise ReplyCutError("The server closed the reply early")


@contextmanager
def _mapped_errors(*, replying: bool = False) -> Iterator[None]:
    """SDK and transport exceptions as the integration's own error family.

    Once the server has started replying (`replying`), a lost connection or an unreadable
    event means the reply broke off, not that the server cannot be reached.
    """
    try:
        yield
    except ServiceError:
        raise
    except _TIMEOUTS as err:
        raise ServiceTimeoutError("Timed out waiting for the server") from err
    except openai.APIStatusError as err:
        raise error_from_reply(err.status_code, err.body) from err
    except (openai.APIConnectionError, *_TRANSPORT) as err:
        if replying:
            raise ReplyCutError("The server closed the reply early") from err
        raise ServiceUnreachableError(str(err.__cause__ or err)) from err
    except openai.APIError as err:  # an error event inside the stream
        raise error_from_reply(500, err.body) from err
    except ValueError as err:  # an event that is not JSON
        if not replying:
            raise
        raise ReplyCutError("The server sent a malformed event") from err
