"""What can go wrong talking to a server of the stack (llama-server, the auth proxy, the
gateway), and how each failure reaches the user. Each error is named for what failed; the
Service* ones and KeyRejectedError come from any of the servers, ModelLoadingError and
ContextFullError only from llama-server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from homeassistant.exceptions import HomeAssistantError

from .const import DOMAIN


class ServiceError(Exception):
    """Base class of the client errors (client.py), for every server of the stack."""

    def __init__(self, *args: object, url: str | None = None, status: int | None = None) -> None:
        """Keep the URL the failed call went to (shown only through urls.shown_url) and the
        status of the reply that said it failed, if one did (client.py says what each means)."""
        super().__init__(*args)
        self.url = url
        self.status = status


class ServiceUnreachableError(ServiceError):
    """The server could not be reached, dropped the connection, or its proxy could not reach it."""


class ServiceTimeoutError(ServiceError):
    """The server did not answer in time."""


class KeyRejectedError(ServiceError):
    """The API key was rejected (401/403)."""


class NotTheServiceError(ServiceError):
    """The URL answers, but not like the service it should be (llama-server, the gateway): a
    foreign server, or a reply not in the format of its endpoint."""


class ModelLoadingError(ServiceError):
    """llama-server is up but still loading its model (503)."""


class ContextFullError(ServiceError):
    """The prompt does not fit in the slot's context."""

    def __init__(
        self,
        message: str,
        n_prompt_tokens: int | None,
        n_ctx: int | None,
        url: str | None = None,
        status: int | None = None,
    ) -> None:
        """Keep the sizes the server reported."""
        super().__init__(message, url=url, status=status)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class ServiceResponseError(ServiceError):
    """The server answered with an error status or an error event."""

    def __init__(self, message: str, status: int | None = None, url: str | None = None) -> None:
        """Keep the HTTP status."""
        super().__init__(message, url=url, status=status)


class ReplyCutError(ServiceError):
    """The stream ended before the reply was complete."""


@contextmanager
def translate_errors(timeout: float) -> Iterator[None]:
    """Turn client errors into the short translated message the user hears."""
    try:
        yield
    except ServiceError as err:
        key, placeholders = _translation(err, timeout)
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key=key,
            translation_placeholders=placeholders,
        ) from err


# Errors whose message needs no placeholders, by the key of their translated text.
_PLAIN: tuple[tuple[type[ServiceError], str], ...] = (
    (KeyRejectedError, "invalid_auth"),
    (ServiceUnreachableError, "cannot_connect"),
    (ModelLoadingError, "model_loading"),
    (ReplyCutError, "stream_broken"),
)


def _translation(err: ServiceError, timeout: float) -> tuple[str, dict[str, str]]:
    if isinstance(err, ServiceTimeoutError):
        return "timeout", {"seconds": f"{timeout:g}"}
    if isinstance(err, ContextFullError):
        prompt, n_ctx = err.n_prompt_tokens or "?", err.n_ctx or "?"
        return "context_full", {"prompt": str(prompt), "n_ctx": str(n_ctx)}
    key = next((key for kind, key in _PLAIN if isinstance(err, kind)), None)
    return (key, {}) if key else ("server_error", {"message": str(err)[:200]})
