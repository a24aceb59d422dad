"""Failures that reach the Wyoming client as an `error` event with a stable code."""

from __future__ import annotations

from wyoming.error import Error
from wyoming.event import Event


class GatewayError(Exception):
    """A failure with a client-facing text and a machine-readable code."""

    def __init__(self, code: str, text: str, *, backend_healthy: bool = False) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        # a backend that refused a request (HTTP 4xx) is up: the error is not counted against it
        self.backend_healthy = backend_healthy

    def event(self) -> Event:
        return Error(text=self.text, code=self.code).event()

    def copy(self) -> GatewayError:
        """The same failure as a new exception, to raise where the original must stay unraised
        (a raise adds its frames to the exception's traceback, and they may hold its owner)."""
        return GatewayError(self.code, self.text, backend_healthy=self.backend_healthy)


class ProtocolError(GatewayError):
    """The client sent bytes that are not a valid Wyoming event; the connection must close."""


# Codes used across the gateway (documented in gateway/README.md).
BACKEND_TIMEOUT = "backend-timeout"
BACKEND_UNREACHABLE = "backend-unreachable"
BACKEND_ERROR = "backend-error"
BACKEND_BAD_RESPONSE = "backend-bad-response"
AUDIO_TOO_LONG = "audio-too-long"
BAD_AUDIO = "bad-audio-format"
BAD_REQUEST = "bad-request"
PROTOCOL = "protocol-error"
TOO_LARGE = "payload-too-large"
UNKNOWN_PROGRAM = "unknown-program"
BUSY = "busy"
IDLE = "idle-timeout"
NOT_ALLOWED = "not-allowed"
INTERNAL = "internal-error"
SHUTTING_DOWN = "shutting-down"
