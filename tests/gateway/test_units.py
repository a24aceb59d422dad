"""Pure parts: sentence splitting, audio conversion, WAV decoding, config, catalog, metrics."""

from __future__ import annotations

import asyncio
import gc
import struct

import aiohttp
import pytest

from voice_stack_gateway import __main__ as cli
from voice_stack_gateway.audio import Converter, PcmFormat, WavStream, check_format, wav_header
from voice_stack_gateway.catalog import voice_languages
from voice_stack_gateway.config import (
    env_table,
    parse_settings,
    public_url,
    redact_urls,
    split_list,
)
from voice_stack_gateway.discovery import Advertiser, advertised_address, resolve_address
from voice_stack_gateway.errors import GatewayError
from voice_stack_gateway.gateway import Gateway, parse_tcp_uri
from voice_stack_gateway.metrics import Metrics
from voice_stack_gateway.sentences import SentenceSplitter
from voice_stack_gateway.upstream import BodyDecoder, _error_detail

from .conftest import GatewayFactory
from .fake_backend import FakeBackend
from .fake_backend import wav_header as fake_wav


def split_stream(*deltas: str) -> list[str]:
    splitter = SentenceSplitter(max_chars=60)
    out: list[str] = []
    for delta in deltas:
        out += splitter.add(delta)
    return out + splitter.finish()


def test_sentences_incremental() -> None:
    s = SentenceSplitter()
    assert s.add("Sure, I turned") == []
    assert s.add(" on the light.") == ["Sure, I turned on the light."]  # delta ends at '.'
    assert s.add(" Dr. Smith paid 3.5 dollars") == []
    assert s.add(" today! Anything") == ["Dr. Smith paid 3.5 dollars today!"]
    assert s.finish() == ["Anything"]
    assert split_stream("Todo ", "listo. ", "¿Algo más?") == ["Todo listo.", "¿Algo más?"]
    assert split_stream("It cost 3.", "5 euros.") == ["It cost 3.5 euros."]
    quoted = "\u300cこんにちは。\u300d元気\uff1f"
    assert split_stream(quoted) == ["\u300cこんにちは。", "\u300d元気\uff1f"]
    long = split_stream("word " * 30)
    assert len(long) == 3
    assert all(len(p) <= 60 for p in long)
    assert split_stream("", "   ") == []


def test_converter_rates_widths_channels() -> None:
    src = PcmFormat(48000, 2, 2)
    conv = Converter(src, PcmFormat(16000, 2, 1))
    out = conv.convert(b"\x01\x00\x02\x00" * 4799 + b"\x01")  # partial frame carried
    out += conv.convert(b"\x00\x02\x00" + b"\x01\x00\x02\x00" * 0)
    assert abs(len(out) - 3200) <= 4
    up = Converter(PcmFormat(8000, 1, 1), PcmFormat(16000, 2, 2)).convert(b"\x80" * 800)
    assert abs(len(up) - 6400) <= 8
    down = Converter(PcmFormat(16000, 2, 1), PcmFormat(16000, 1, 1)).convert(b"\0\0" * 10)
    assert down == b"\x80" * 10
    same = Converter(PcmFormat(16000, 2, 1), PcmFormat(16000, 2, 1))
    assert same.convert(b"abcd") == b"abcd"
    with pytest.raises(GatewayError):
        check_format(16000, 2, 3)


def test_wav_stream_variants() -> None:
    data = b"\x01\x00" * 100
    header = wav_header(PcmFormat(22050, 2, 1), len(data))
    wav = WavStream()
    out = b"".join(wav.feed(header[i : i + 7] + b"") for i in range(0, len(header), 7))
    out += wav.feed(data + b"LIST\x04\x00\x00\x00junk")
    assert out == data
    assert wav.format == PcmFormat(22050, 2, 1)
    assert wav.feed(b"more") == b""
    # extensible float32 with an odd-sized extra chunk before data
    ext = struct.pack("<HHIIHHHHIH14s", 0xFFFE, 1, 16000, 64000, 4, 32, 22, 32, 4, 3, b"\0" * 14)
    body = struct.pack("<2f", 0.25, -1.5)
    raw = (
        b"RIFF"
        + struct.pack("<I", 0)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(ext))
        + ext
        + b"junk"
        + struct.pack("<I", 3)
        + b"abc\0"
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )
    wav = WavStream()
    assert wav.feed(raw + body) == struct.pack("<2h", 8191, -32767)
    for bad in (
        b"RIFX" + b"\0" * 20,
        fake_wav(16000, 12, 1, 0),
        fake_wav(16000, 64, 3, 0),
        b"RIFF\0\0\0\0WAVEdata\0\0\0\0",
        b"RIFF\0\0\0\0WAVEfmt \x04\0\0\0abcd",
    ):
        with pytest.raises(GatewayError):
            WavStream().feed(bad)
    with pytest.raises(GatewayError):
        WavStream().feed(b"RIFF\0\0\0\0WAVE" + b"LIST\xff\xff\x00\x00" + b"\0" * 70000)


def test_body_decoder_sniffs_wav_in_octet_stream() -> None:
    decoder = BodyDecoder("application/octet-stream", "TTS", 24000)
    fmt, pcm = decoder.feed(fake_wav(8000, 16, 1, 4) + b"\1\0\2\0")
    assert fmt == PcmFormat(8000, 2, 1)
    assert pcm == b"\1\0\2\0"
    assert _error_detail('{"detail": "nope"}') == "nope"
    assert _error_detail("[1]") == ""
    assert _error_detail("") == ""


def test_settings_from_env_and_flags() -> None:
    env = {
        "STT_OPENAI_URL": "http://asr:8000/v1/",
        "TTS_VOICES": "af_heart, am_adam",
        "TTS_SPEED": "1.25",
        "WYOMING_URI": "tcp://0.0.0.0:10300",
        "GATEWAY_TTS_STREAMING": "off",
        "STT_MODELS": "a b,c",
        "TTS_OPENAI_KEY": "secret",
    }
    s = parse_settings([], env)
    assert s.stt_url == "http://asr:8000/v1"
    assert s.tts_voices == ("af_heart", "am_adam")
    assert s.tts_speed == 1.25
    assert not s.tts_streaming
    assert s.stt_models == ("a", "b", "c")
    assert parse_settings(["--uri", "tcp://127.0.0.1:1"], env).uri == "tcp://127.0.0.1:1"
    assert split_list(" ") == ()
    assert parse_settings(["--zeroconf"], {}).zeroconf == "voice-stack-gateway"
    for bad in (["--tts-speed", "x"], ["--stt-rate", "-1"]):
        with pytest.raises(SystemExit):
            parse_settings(bad, {})
    assert "`STT_OPENAI_URL`" in env_table()
    assert parse_tcp_uri("tcp://0.0.0.0:10300") == ("0.0.0.0", 10300)
    with pytest.raises(SystemExit):
        parse_tcp_uri("unix:///tmp/x")


def test_wyoming_uri_alone_is_used() -> None:
    """A drop-in wyoming-openai user sets only WYOMING_URI (the image sets no GATEWAY_URI)."""
    assert parse_settings([], {"WYOMING_URI": "tcp://0.0.0.0:10555"}).uri == "tcp://0.0.0.0:10555"
    both = {"WYOMING_URI": "tcp://0.0.0.0:10555", "GATEWAY_URI": "tcp://0.0.0.0:10666"}
    assert parse_settings([], both).uri == "tcp://0.0.0.0:10666"
    assert parse_settings([], {}).uri == "tcp://0.0.0.0:10300"


def test_public_url_drops_credentials() -> None:
    assert public_url("http://user:pw@gpu-box:8000/v1?key=abc#x") == "http://gpu-box:8000/v1"
    assert public_url("https://tok@[fd00::1]/v1") == "https://[fd00::1]/v1"
    assert public_url("http://asr:8000/v1") == "http://asr:8000/v1"
    assert public_url("http://h:99999/") == "<invalid URL>"
    text = "Cannot GET 'http://u:secret@h/v1/models?api_key=secret2' (see https://x.org/a?b=c)"
    assert redact_urls(text) == "Cannot GET 'http://h/v1/models' (see https://x.org/a)"


def test_advertise_host_forms() -> None:
    host = parse_settings(["--advertise-host", "gpu-box.lan"], {}).advertise_host
    assert host == "gpu-box.lan"
    assert parse_settings(["--advertise-host", " 10.0.0.7 "], {}).advertise_host == "10.0.0.7"
    assert parse_settings([], {"GATEWAY_ADVERTISE_HOST": "fd00::2"}).advertise_host == "fd00::2"
    for bad in ("http://gpu-box", "gpu box", "-x.lan", "a..b"):
        with pytest.raises(SystemExit, match="IP address or a host name"):
            parse_settings([f"--advertise-host={bad}"], {})


async def test_advertise_host_name_is_resolved(caplog: pytest.LogCaptureFixture) -> None:
    assert await resolve_address("192.168.1.5") == "192.168.1.5"
    assert await resolve_address("localhost") in ("127.0.0.1", "::1")
    adv = Advertiser("voice-stack-test", "0.0.0.0", 10300, "localhost")
    await adv.start()  # no ValueError: the name is resolved before it is packed
    await adv.stop()
    assert adv.address in ("127.0.0.1", "::1")
    # a name that does not resolve: a warning, no advertisement, and no exception
    caplog.clear()
    adv = Advertiser("voice-stack-test", "0.0.0.0", 10300, "no-such-host.invalid")
    await adv.start()
    await adv.stop()
    assert adv.address == "no-such-host.invalid"
    assert "cannot resolve advertise host 'no-such-host.invalid'" in caplog.text


def test_voice_languages_and_address() -> None:
    assert voice_languages("af_heart", ("en",)) == ("en",)
    assert voice_languages("ef_dora", ("en",)) == ("es",)
    assert voice_languages("de_DE-thorsten-high", ("en",)) == ("de",)
    assert voice_languages("alloy", ("xx",)) == ("xx",)
    assert advertised_address("0.0.0.0", "192.168.1.5") == "192.168.1.5"
    assert advertised_address("10.0.0.2", "") == "10.0.0.2"
    assert advertised_address("0.0.0.0", "") != "0.0.0.0"


async def test_zeroconf_advertiser_never_fails() -> None:
    adv = Advertiser("voice-stack-test", "127.0.0.1", 10300, "")
    await adv.start()  # registers on loopback, or logs a warning where multicast is unavailable
    await adv.stop()
    assert adv.address == "127.0.0.1"


def test_metrics_text() -> None:
    m = Metrics("http://a", "http://t")
    m.latency["tts"].observe(3.0)
    m.latency["tts"].observe(99999.0)
    m.error("tts", "backend-timeout")
    m.requests["tts"] += 2
    text = m.prometheus()
    assert 'gateway_latency_seconds_bucket{kind="tts",le="0.005"} 1' in text
    assert 'gateway_latency_seconds_bucket{kind="tts",le="+Inf"} 2' in text
    assert 'gateway_errors_total{kind="tts",code="backend-timeout"} 1' in text
    assert m.health("0.1.0")["status"] == "ok"


async def test_http_side_and_catalog(
    fake_backend: FakeBackend, make_gateway: GatewayFactory
) -> None:
    gw = await make_gateway(
        fake_backend.url, tts_voices=("mine",), zeroconf="vs-test", advertise_host="127.0.0.1"
    )
    catalog = gw.catalog.current
    assert catalog.stt_models == ["whisper-fake"]
    assert catalog.tts_models == ["tts-fake", "kokoro"]
    assert list(catalog.voices) == ["mine", "af_heart", "en_GB-alan-medium", "v3"]
    info = catalog.describe.data
    assert [p["name"] for p in info["tts"]] == ["voice-stack-tts", "tts-fake", "kokoro"]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{gw.http_port}/health") as resp:
            health = await resp.json()
        async with session.get(f"http://127.0.0.1:{gw.http_port}/metrics") as resp:
            assert "gateway_active_sessions" in await resp.text()
    assert health["backends"]["tts"]["voices"][0] == "mine"
    assert health["backends"]["asr"]["status"] == "ok"
    assert "secret" not in str(health)
    # backend goes down: status flips, voices stay listed
    fake_backend.healthy = False
    await gw.catalog.refresh()
    assert gw.health()["status"] == "degraded"
    assert list(gw.catalog.current.voices) == list(catalog.voices)


async def test_main_runs_and_stops(
    fake_backend: FakeBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    await cli.main(["--print-env-table"])
    assert "TTS_OPENAI_URL" in capsys.readouterr().out
    task = asyncio.create_task(
        cli.main(
            [
                "--uri",
                "tcp://127.0.0.1:0",
                "--http-uri",
                "",
                "--stt-openai-url",
                fake_backend.url,
                "--tts-openai-url",
                fake_backend.url,
            ]
        )
    )
    # once started, the startup heap is kept out of the cyclic GC's passes (they stalled the loop)
    for _ in range(400):
        if gc.get_freeze_count() or task.done():
            break
        await asyncio.sleep(0.025)
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert isinstance(Gateway, type)
