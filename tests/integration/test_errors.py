"""How each failure reaching llama-server becomes the message a user hears."""

from __future__ import annotations

import pytest
from homeassistant.exceptions import HomeAssistantError

from custom_components.voice_stack.errors import (
    ContextFullError,
    KeyRejectedError,
    ModelLoadingError,
    ReplyCutError,
    ServiceError,
    ServiceResponseError,
    ServiceTimeoutError,
    ServiceUnreachableError,
    translate_errors,
)


@pytest.mark.parametrize(
    ("err", "key", "placeholders"),
    [
        (KeyRejectedError("x"), "invalid_auth", {}),
        (ServiceTimeoutError("x"), "timeout", {"seconds": "2.5"}),
        (ServiceUnreachableError("x"), "cannot_connect", {}),
        (ModelLoadingError("x"), "model_loading", {}),
        (ContextFullError("x", 5000, None), "context_full", {"prompt": "5000", "n_ctx": "?"}),
        (ReplyCutError("x"), "stream_broken", {}),
        (ServiceResponseError("fake 500", 500), "server_error", {"message": "fake 500"}),
    ],
)
def test_translated_message(err: ServiceError, key: str, placeholders: dict[str, str]) -> None:
    """The user hears a translated message with the figures that matter."""
    with pytest.raises(HomeAssistantError) as raised, translate_errors(2.5):
        raise err
    assert (raised.value.translation_key, raised.value.translation_placeholders) == (
        key,
        placeholders,
    )
