"""How each failure reaching llama-server becomes the message a user hears."""

from __future__ import annotations

import pytest
from homeassistant.exceptions import HomeAssistantError

from custom_components.voice_stack.errors import (
    LlamaAuthError,
    LlamaConnectionError,
    LlamaContextError,
    LlamaError,
    LlamaLoadingError,
    LlamaResponseError,
    LlamaStreamError,
    LlamaTimeoutError,
    error_from_reply,
    translate_errors,
)


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (401, None, LlamaAuthError),
        (403, {"message": "no"}, LlamaAuthError),
        (400, {"type": "exceed_context_size_error", "n_ctx": 9}, LlamaContextError),
        (503, {"type": "unavailable_error", "message": "Loading model"}, LlamaLoadingError),
        (502, None, LlamaConnectionError),  # the proxy cannot reach llama-server
        (503, {"message": "Service Unavailable"}, LlamaConnectionError),
        (504, None, LlamaConnectionError),
        (500, {"message": "boom"}, LlamaResponseError),
    ],
)
def test_error_from_reply(status: int, error: object, kind: type[LlamaError]) -> None:
    """Each status (and llama-server's error type) has its own exception."""
    assert type(error_from_reply(status, error)) is kind


@pytest.mark.parametrize(
    ("err", "key", "placeholders"),
    [
        (LlamaAuthError("x"), "invalid_auth", {}),
        (LlamaTimeoutError("x"), "timeout", {"seconds": "2.5"}),
        (LlamaConnectionError("x"), "cannot_connect", {}),
        (LlamaLoadingError("x"), "model_loading", {}),
        (LlamaContextError("x", 5000, None), "context_full", {"prompt": "5000", "n_ctx": "?"}),
        (LlamaStreamError("x"), "stream_broken", {}),
        (LlamaResponseError("fake 500", 500), "server_error", {"message": "fake 500"}),
    ],
)
def test_translated_message(err: LlamaError, key: str, placeholders: dict[str, str]) -> None:
    """The user hears a translated message with the figures that matter."""
    with pytest.raises(HomeAssistantError) as raised, translate_errors(2.5):
        raise err
    assert (raised.value.translation_key, raised.value.translation_placeholders) == (
        key,
        placeholders,
    )
