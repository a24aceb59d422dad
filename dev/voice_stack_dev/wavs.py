"""WAV headers and test tones for the harness's speech servers and clients (stdlib only: this
module is imported from every venv)."""

from __future__ import annotations

import math
import struct

UNKNOWN_SIZE = 0xFFFFFFFF  # what streaming servers write before they know the length
PCM, FLOAT = 1, 3


def wav_header(rate: int, size: int = UNKNOWN_SIZE, *, bits: int = 16, tag: int = PCM) -> bytes:
    """A 44-byte mono WAV header for `size` bytes of data (UNKNOWN_SIZE for a stream)."""
    align = bits // 8
    riff = UNKNOWN_SIZE if size == UNKNOWN_SIZE else 36 + size
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, tag, 1, rate, rate * align, align, bits)
        + b"data"
        + struct.pack("<I", size)
    )


def wav(pcm: bytes, rate: int) -> bytes:
    """A complete 16-bit mono WAV file."""
    return wav_header(rate, len(pcm)) + pcm


def tone(seconds: float, rate: int) -> bytes:
    """A 16-bit mono sine tone (some sound, not speech)."""
    n = int(seconds * rate)
    return struct.pack(f"<{n}h", *(int(8000 * math.sin(i / 8)) for i in range(n)))
