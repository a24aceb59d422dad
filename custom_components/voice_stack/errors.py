"""What can go wrong talking to a server of the stack (llama-server, the auth proxy, the
gateway), and how each failure reaches the user."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from homeassistant.exceptions import HomeAssistantError

from .const import DOMAIN

# A proxy in front of llama-server answers these when it cannot reach it (llama-server's own
# 503 while it loads a model says so in its body: see is_loading).
PROXY_UNREACHABLE_STATUSES = frozenset({502, 503, 504})


class LlamaError(Exception):
    """Base class of the client errors (client.py), for every server of the stack."""

    def __init__(self, *args: object, url: str | None = None) -> None:
        """Keep the URL the failed call went to (shown only through urls.shown_url)."""
        super().__init__(*args)
        self.url = url


class LlamaConnectionError(LlamaError):
    """The server could not be reached, dropped the connection, or its proxy could not reach it."""


class LlamaTimeoutError(LlamaError):
    """The server did not answer in time."""


class LlamaAuthError(LlamaError):
    """The API key was rejected (401/403)."""


class LlamaNotServerError(LlamaError):
    """The URL answers, but not like llama-server."""


class LlamaLoadingError(LlamaError):
    """llama-server is up but still loading its model (503)."""


class LlamaContextError(LlamaError):
    """The prompt does not fit in the slot's context."""

    def __init__(
        self, message: str, n_prompt_tokens: int | None, n_ctx: int | None, url: str | None = None
    ) -> None:
        """Keep the sizes the server reported."""
        super().__init__(message, url=url)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class LlamaResponseError(LlamaError):
    """The server answered with an error status or an error event."""

    def __init__(self, message: str, status: int | None = None, url: str | None = None) -> None:
        """Keep the HTTP status."""
        super().__init__(message, url=url)
        self.status = status


class LlamaStreamError(LlamaError):
    """The stream ended before the reply was complete."""


def is_loading(error: Any) -> bool:
    """Whether an error object (`{"type": ..., "message": ...}`) says the model is loading."""
    return isinstance(error, dict) and (
        error.get("type") == "unavailable_error" or "loading" in str(error.get("message")).lower()
    )


def error_from_reply(status: int, error: Any) -> LlamaError:
    """The exception for an error reply; `error` is the body's "error" object (or None)."""
    message = str(error.get("message") or "") if isinstance(error, dict) else ""
    message = message or f"HTTP {status}"
    if status in (401, 403):
        return LlamaAuthError(message)
    if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
        return LlamaContextError(message, error.get("n_prompt_tokens"), error.get("n_ctx"))
    if status == 503 and is_loading(error):
        return LlamaLoadingError(message)
    if status in PROXY_UNREACHABLE_STATUSES:
        return LlamaConnectionError(f"HTTP {status} from the proxy: {message}")
    return LlamaResponseError(message, status)


@contextmanager
def translate_errors(timeout: float) -> Iterator[None]:
    """Turn client errors into the short translated message the user hears."""
    try:
        yield
    except LlamaError as err:
        key, placeholders = _translation(err, timeout)
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key=key,
            translation_placeholders=placeholders,
        ) from err


# Errors whose message needs no placeholders, by the key of their translated text.
_PLAIN: tuple[tuple[type[LlamaError], str], ...] = (
    (LlamaAuthError, "invalid_auth"),
    (LlamaConnectionError, "cannot_connect"),
    (LlamaLoadingError, "model_loading"),
    (LlamaStreamError, "stream_broken"),
)


def _translation(err: LlamaError, timeout: float) -> tuple[str, dict[str, str]]:
    if isinstance(err, LlamaTimeoutError):
        return "timeout", {"seconds": f"{timeout:g}"}
    if isinstance(err, LlamaContextError):
        prompt, n_ctx = err.n_prompt_tokens or "?", err.n_ctx or "?"
        return "context_full", {"prompt": str(prompt), "n_ctx": str(n_ctx)}
    key = next((key for kind, key in _PLAIN if isinstance(err, kind)), None)
    return (key, {}) if key else ("server_error", {"message": str(err)[:200]})
