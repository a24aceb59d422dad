"""voice_stack_gateway.errors: the failures a client sees."""

from __future__ import annotations

import pytest

from voice_stack_gateway.errors import BACKEND_ERROR, GatewayError


def test_an_error_becomes_a_wyoming_error_event() -> None:
    event = GatewayError(BACKEND_ERROR, "The speech server failed").event()
    assert event.type == "error"
    assert event.data == {"text": "The speech server failed", "code": BACKEND_ERROR}


def _refuse() -> None:
    raise GatewayError(BACKEND_ERROR, "refused", backend_healthy=True)


def test_a_copy_is_the_same_failure_without_the_original_s_traceback() -> None:
    with pytest.raises(GatewayError) as raised:
        _refuse()
    original = raised.value
    copy = original.copy()
    assert copy is not original
    assert (copy.code, copy.text, copy.backend_healthy) == (BACKEND_ERROR, "refused", True)
    assert copy.__traceback__ is None
    assert original.__traceback__ is not None  # the original keeps its own, untouched
