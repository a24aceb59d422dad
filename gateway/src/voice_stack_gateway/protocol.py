"""A Wyoming event reader that bounds every length and never crashes on bad input.

wyoming's own reader trusts `data_length`/`payload_length` and lets non-object headers raise,
which would let one bad client buffer gigabytes or kill its handler without a word.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from typing import Any

from wyoming.event import Event
from wyoming.version import __version__ as WYOMING_VERSION

from .errors import PROTOCOL, TOO_LARGE, ProtocolError

MAX_HEADER = 64 * 1024
MAX_DATA = 1024 * 1024
MAX_PAYLOAD = 4 * 1024 * 1024
BODY_TIMEOUT = 30.0  # once a header arrived, its data and payload must follow promptly
# a \\uD800-\\uDFFF escape: JSON may spell a lone surrogate, which no text can be encoded from
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ProtocolError(PROTOCOL, f"Invalid {key} in event header")
    if value > limit:
        raise ProtocolError(TOO_LARGE, f"{key} {value} exceeds the limit of {limit} bytes")
    return value


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        raise ProtocolError(PROTOCOL, f"Malformed event {what}: not JSON") from None
    except RecursionError:  # [[[[...]]]]: valid JSON nested deeper than the parser goes
        raise ProtocolError(PROTOCOL, f"Malformed event {what}: nested too deeply") from None
    if not isinstance(value, dict):
        raise ProtocolError(PROTOCOL, f"Malformed event {what}: not a JSON object")
    if _SURROGATE_ESCAPE.search(raw) and not _encodable(value):
        raise ProtocolError(PROTOCOL, f"Malformed event {what}: a lone surrogate is not text")
    return value


def _encodable(value: object) -> bool:
    """Whether every string in a parsed JSON value is valid Unicode (escaped surrogates pair)."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


class EventReader:
    """Reads events from one connection. Audio streams repeat the same header and data bytes
    chunk after chunk, so the last parse of each is reused (the hot path does no JSON work)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._last_header: tuple[bytes, dict[str, Any]] = (b"", {})
        self._last_data: tuple[bytes, dict[str, Any]] = (b"", {})
        self.last_size = 0  # the wire bytes of the last event read (the read-ahead bound)

    async def read(self) -> Event | None:
        """Next event, None on a clean EOF; ProtocolError on anything malformed."""
        header = await self._header()
        if header is None:
            return None
        event_type = header.get("type")
        if not isinstance(event_type, str) or not event_type:
            raise ProtocolError(PROTOCOL, "Event header has no type")
        data = header.get("data") or {}
        if not isinstance(data, dict):
            raise ProtocolError(PROTOCOL, "Event data is not a JSON object")
        data_length = _length(header, "data_length", MAX_DATA)
        payload_length = _length(header, "payload_length", MAX_PAYLOAD)
        self.last_size = len(self._last_header[0]) + data_length + payload_length
        if not (data_length or payload_length):
            return Event(type=event_type, data=dict(data))
        raw, payload = await self._body(data_length, payload_length)
        if raw:
            data = {**data, **self._data(raw)}
        return Event(type=event_type, data=dict(data), payload=payload)

    async def _header(self) -> dict[str, Any] | None:
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as err:
            if not err.partial.strip():
                return None
            raise ProtocolError(PROTOCOL, "Connection closed inside an event header") from None
        except asyncio.LimitOverrunError:
            raise ProtocolError(TOO_LARGE, f"Event header longer than {MAX_HEADER} bytes") from None
        if line != self._last_header[0]:
            self._last_header = (line, _json_object(line, "header"))
        return self._last_header[1]

    def _data(self, raw: bytes) -> dict[str, Any]:
        if raw != self._last_data[0]:
            self._last_data = (raw, _json_object(raw, "data"))
        return self._last_data[1]

    async def _body(self, data_length: int, payload_length: int) -> tuple[bytes, bytes | None]:
        """Once a header arrived, its data and payload must follow within BODY_TIMEOUT."""
        reader = self._reader
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                raw = await reader.readexactly(data_length) if data_length else b""
                payload = await reader.readexactly(payload_length) if payload_length else None
        except asyncio.IncompleteReadError:
            raise ProtocolError(PROTOCOL, "Connection closed inside an event body") from None
        except TimeoutError:
            raise ProtocolError(PROTOCOL, "Event body did not arrive in time") from None
        return raw, payload


def encode_event(event: Event) -> bytes:
    """The wire bytes of one event, as wyoming's writer lays them out (header, data, payload)."""
    header: dict[str, Any] = {"type": event.type, "version": WYOMING_VERSION}
    data = json.dumps(event.data, ensure_ascii=False).encode() if event.data else b""
    if data:
        header["data_length"] = len(data)
    if event.payload:
        header["payload_length"] = len(event.payload)
    line = json.dumps(header, ensure_ascii=False).encode() + b"\n"
    return line + data + event.payload if event.payload else line + data


@functools.cache
def _chunk_prefix(rate: int, width: int, channels: int) -> tuple[bytes, bytes]:
    data = json.dumps({"rate": rate, "width": width, "channels": channels}).encode()
    head = (
        f'{{"type": "audio-chunk", "version": "{WYOMING_VERSION}", '
        f'"data_length": {len(data)}, "payload_length": '
    ).encode()
    return head, data


def encode_audio_chunk(rate: int, width: int, channels: int, audio: bytes) -> bytes:
    """An audio-chunk event's bytes without building the event (the TTS hot path)."""
    head, data = _chunk_prefix(rate, width, channels)
    return b"".join((head, str(len(audio)).encode(), b"}\n", data, audio))
