"""PCM conversion and WAV stream decoding: any backend or client audio becomes one format."""

from __future__ import annotations

import struct
import sys
import warnings
from array import array
from dataclasses import dataclass

from .errors import BACKEND_BAD_RESPONSE, BAD_AUDIO, GatewayError

with warnings.catch_warnings():  # 3.11 and 3.12 warn that the stdlib module goes away in 3.13
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # stdlib before 3.13; the audioop-lts wheel (same C module) after


@dataclass(frozen=True, slots=True)
class PcmFormat:
    """Signed little-endian PCM: rate in Hz, width in bytes, channel count."""

    rate: int
    width: int
    channels: int

    @property
    def frame_bytes(self) -> int:
        return self.width * self.channels


def rms(pcm16: bytes) -> int:
    """Root mean square of 16-bit PCM samples."""
    return int(audioop.rms(pcm16, 2))


def check_format(rate: object, width: object, channels: object) -> PcmFormat:
    """A client-declared format, refused with a clear error when it cannot be converted."""
    if not (type(rate) is int and 1000 <= rate <= 384000):
        raise GatewayError(BAD_AUDIO, f"Unsupported sample rate {rate!r}")
    if not (type(width) is int and width in (1, 2, 3, 4)):  # not 2.0, not True
        raise GatewayError(BAD_AUDIO, f"Unsupported sample width {width!r} (bytes)")
    if not (type(channels) is int and channels in (1, 2)):
        raise GatewayError(BAD_AUDIO, f"Unsupported channel count {channels!r}")
    return PcmFormat(rate, width, channels)


class Converter:
    """Streaming rate/width/channel conversion; keeps resampler state and partial frames."""

    def __init__(self, source: PcmFormat, target: PcmFormat) -> None:
        self.source = source
        self.target = target
        self._state: tuple[int, tuple[tuple[int, int], ...]] | None = None
        self._carry = b""
        self.passthrough = source == target

    def convert(self, data: bytes) -> bytes:
        if self.passthrough and not self._carry and not len(data) % self.source.frame_bytes:
            return data  # the common case: nothing to do
        if self._carry:
            data = self._carry + data
        extra = len(data) % self.source.frame_bytes
        self._carry = data[len(data) - extra :] if extra else b""
        if extra:
            data = data[: len(data) - extra]
        if self.passthrough or not data:
            return data
        src, dst = self.source, self.target
        width = src.width
        if src.width == 1:  # Wyoming 8-bit audio is unsigned; audioop wants signed
            data = audioop.bias(data, 1, -128)
        if width != dst.width:
            data = audioop.lin2lin(data, width, dst.width)
            width = dst.width
        channels = src.channels
        if channels != dst.channels:
            if dst.channels == 1:
                data = audioop.tomono(data, width, 0.5, 0.5)
            else:
                data = audioop.tostereo(data, width, 1.0, 1.0)
            channels = dst.channels
        if src.rate != dst.rate:
            data, self._state = audioop.ratecv(
                data, width, channels, src.rate, dst.rate, self._state
            )
        if dst.width == 1:
            data = audioop.bias(data, 1, 128)
        return data


_RIFF = struct.Struct("<4sI4s")
_CHUNK = struct.Struct("<4sI")
_FMT = struct.Struct("<HHIIHH")
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_MAX_HEADER = 64 * 1024


def _float32_to_int16(data: bytes) -> bytes:
    samples = array("f")
    samples.frombytes(data)
    out = array("h", (int(max(-1.0, min(1.0, s)) * 32767) for s in samples))
    if sys.byteorder != "little":  # pragma: no cover
        out.byteswap()
    return out.tobytes()


class WavStream:
    """Decodes a streamed WAV body: finds fmt/data, honours the data size (drops trailing
    chunks such as LIST), converts IEEE float to 16-bit, and yields PCM as it arrives."""

    def __init__(self) -> None:
        self._buf = b""
        self.format: PcmFormat | None = None
        self._float = False
        self._remaining: int | None = None  # bytes of data left; None = until EOF
        self._in_data = False
        self._done = False

    def feed(self, data: bytes) -> bytes:
        if self._done:
            return b""
        if not self._in_data:
            self._buf += data
            if not self._parse_header():
                if len(self._buf) > _MAX_HEADER:
                    raise GatewayError(BACKEND_BAD_RESPONSE, "TTS backend sent a WAV without data")
                return b""
            data, self._buf = self._buf, b""
        if self._remaining is not None:
            data = data[: self._remaining]
            self._remaining -= len(data)
            self._done = self._remaining <= 0
        return _float32_to_int16(data) if self._float else data

    def _parse_header(self) -> bool:
        buf = self._buf
        if len(buf) < _RIFF.size:
            return False
        riff, _size, wave = _RIFF.unpack_from(buf)
        if riff != b"RIFF" or wave != b"WAVE":
            raise GatewayError(BACKEND_BAD_RESPONSE, "TTS backend sent audio that is not WAV")
        pos = _RIFF.size
        while len(buf) >= pos + _CHUNK.size:
            cid, size = _CHUNK.unpack_from(buf, pos)
            pos += _CHUNK.size
            if cid == b"data":
                if self.format is None:
                    raise GatewayError(BACKEND_BAD_RESPONSE, "TTS backend WAV has no fmt chunk")
                self._in_data = True
                self._remaining = None if size in (0, 0xFFFFFFFF) else size
                self._buf = buf[pos:]
                return True
            if len(buf) < pos + size:
                return False
            if cid == b"fmt ":
                self._read_fmt(buf[pos : pos + size])
            pos += size + (size & 1)
        return False

    def _read_fmt(self, fmt: bytes) -> None:
        if len(fmt) < _FMT.size:
            raise GatewayError(BACKEND_BAD_RESPONSE, "TTS backend WAV has a short fmt chunk")
        tag, channels, rate, _brate, _align, bits = _FMT.unpack_from(fmt)
        if tag == _EXTENSIBLE and len(fmt) >= 26:
            tag = struct.unpack_from("<H", fmt, 24)[0]
        if tag == _FLOAT and bits == 32:
            self._float = True
            self.format = check_wav_format(rate, 2, channels)
        elif tag == _PCM and bits in (8, 16, 24, 32):
            self.format = check_wav_format(rate, bits // 8, channels)
        else:
            raise GatewayError(
                BACKEND_BAD_RESPONSE, f"TTS backend WAV encoding {tag}/{bits} bit is unsupported"
            )


def check_wav_format(rate: int, width: int, channels: int) -> PcmFormat:
    try:
        return check_format(rate, width, channels)
    except GatewayError as err:
        raise GatewayError(BACKEND_BAD_RESPONSE, f"TTS backend WAV: {err.text}") from None


def wav_header(fmt: PcmFormat, nbytes: int) -> bytes:
    """A 44-byte PCM WAV header for an upload whose size is known."""
    return (
        _RIFF.pack(b"RIFF", 36 + nbytes, b"WAVE")
        + _CHUNK.pack(b"fmt ", 16)
        + _FMT.pack(
            _PCM, fmt.channels, fmt.rate, fmt.rate * fmt.frame_bytes, fmt.frame_bytes, fmt.width * 8
        )
        + _CHUNK.pack(b"data", nbytes)
    )
