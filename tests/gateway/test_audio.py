"""audio.py: PCM conversion, WAV stream decoding, levels."""

from __future__ import annotations

import struct

import pytest

from voice_stack_dev.wavs import FLOAT
from voice_stack_dev.wavs import wav_header as dev_wav_header
from voice_stack_gateway.audio import (
    Converter,
    PcmFormat,
    WavStream,
    check_format,
    check_wav_format,
    rms,
    wav_header,
)
from voice_stack_gateway.errors import GatewayError


def test_converter_rates_widths_channels() -> None:
    conv = Converter(PcmFormat(48000, 2, 2), PcmFormat(16000, 2, 1))
    out = conv.convert(b"\x01\x00\x02\x00" * 4799 + b"\x01")  # a partial frame is carried
    out += conv.convert(b"\x00\x02\x00")
    assert abs(len(out) - 3200) <= 4
    up = Converter(PcmFormat(8000, 1, 1), PcmFormat(16000, 2, 2)).convert(b"\x80" * 800)
    assert abs(len(up) - 6400) <= 8
    down = Converter(PcmFormat(16000, 2, 1), PcmFormat(16000, 1, 1)).convert(b"\0\0" * 10)
    assert down == b"\x80" * 10
    same = Converter(PcmFormat(16000, 2, 1), PcmFormat(16000, 2, 1))
    assert same.convert(b"abcd") == b"abcd"
    assert same.convert(b"abc") + same.convert(b"d") == b"abcd"  # carried across calls


def test_formats_refused_clearly() -> None:
    for bad in ((16000, 2, 3), (16000, 7, 1), (0, 2, 1), ("16000", 2, 1)):
        with pytest.raises(GatewayError) as err:
            check_format(*bad)
        assert err.value.code == "bad-audio-format"
    with pytest.raises(GatewayError) as err:
        check_wav_format(500, 2, 1)
    assert err.value.code == "backend-bad-response"


def test_wav_stream_plain_in_pieces() -> None:
    data = b"\x01\x00" * 100
    header = wav_header(PcmFormat(22050, 2, 1), len(data))
    wav = WavStream()
    out = b"".join(wav.feed(header[i : i + 7]) for i in range(0, len(header), 7))
    out += wav.feed(data + b"LIST\x04\x00\x00\x00junk")  # trailing chunks are not audio
    assert out == data
    assert wav.format == PcmFormat(22050, 2, 1)
    assert wav.feed(b"more") == b""


def test_wav_stream_extensible_float() -> None:
    ext = struct.pack("<HHIIHHHHIH14s", 0xFFFE, 1, 16000, 64000, 4, 32, 22, 32, 4, 3, b"\0" * 14)
    raw = (
        b"RIFF" + struct.pack("<I", 0) + b"WAVE"
        + b"fmt " + struct.pack("<I", len(ext)) + ext
        + b"junk" + struct.pack("<I", 3) + b"abc\0"  # an odd-sized chunk before data
        + b"data" + struct.pack("<I", 0xFFFFFFFF)
    )  # fmt: skip
    assert WavStream().feed(raw + struct.pack("<2f", 0.25, -1.5)) == struct.pack(
        "<2h", 8191, -32767
    )


@pytest.mark.parametrize(
    "bad",
    [
        b"RIFX" + b"\0" * 20,
        dev_wav_header(16000, 0, bits=12),
        dev_wav_header(16000, 0, bits=64, tag=FLOAT),
        b"RIFF\0\0\0\0WAVEdata\0\0\0\0",
        b"RIFF\0\0\0\0WAVEfmt \x04\0\0\0abcd",
        b"RIFF\0\0\0\0WAVE" + b"LIST\xff\xff\x00\x00" + b"\0" * 70000,
    ],
)
def test_wav_stream_refuses_what_it_cannot_play(bad: bytes) -> None:
    with pytest.raises(GatewayError) as err:
        WavStream().feed(bad)
    assert err.value.code == "backend-bad-response"


def test_rms() -> None:
    assert rms(b"\0\0" * 10) == 0
    assert rms(struct.pack("<4h", 1000, -1000, 1000, -1000)) == 1000
