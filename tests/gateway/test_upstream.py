"""upstream.py: calls to the speech servers, their timeouts and their errors."""

from __future__ import annotations

import pytest

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import free_port
from voice_stack_dev.wavs import wav_header
from voice_stack_gateway.audio import PcmFormat
from voice_stack_gateway.errors import GatewayError
from voice_stack_gateway.upstream import BodyDecoder, _confidence, _error_detail

from .conftest import Clients, GatewayFactory, first_error, stt_events, tts_events


def test_body_decoder() -> None:
    decoder = BodyDecoder("application/octet-stream", "TTS", 24000)  # WAV sniffed
    fmt, pcm = decoder.feed(wav_header(8000, 4) + b"\1\0\2\0")
    assert (fmt, pcm) == (PcmFormat(8000, 2, 1), b"\1\0\2\0")
    assert BodyDecoder("audio/pcm", "TTS", 22050).feed(b"\1\0") == (PcmFormat(22050, 2, 1), b"\1\0")
    with pytest.raises(GatewayError, match="content type 'text/html' instead of audio"):
        BodyDecoder("text/html", "TTS", 24000)


def test_error_detail() -> None:
    assert _error_detail('{"detail": "nope"}') == "nope"
    assert _error_detail('{"error": {"message": "bad voice"}}') == "bad voice"
    assert _error_detail("[1]") == ""
    assert _error_detail("") == ""
    assert _error_detail("Internal Server Error\nmore") == "Internal Server Error"


@pytest.mark.parametrize(
    ("segments", "confidence"),
    [
        ([{"avg_logprob": -0.2}, {"avg_logprob": -0.7}, {"avg_logprob": -1}], -1.0),  # least sure
        ([{"avg_logprob": -0.3}, {"text": "no figure"}, "garbage"], -0.3),
        ([], None),
        (None, None),  # plain json
        ("segments", None),
        ([{"avg_logprob": "-0.5"}, {"avg_logprob": True}, {"avg_logprob": float("nan")}], None),
        ([{"avg_logprob": float("-inf")}, {"avg_logprob": None}], None),
    ],
)
def test_the_confidence_of_a_verbose_answer(segments: object, confidence: float | None) -> None:
    """Whatever a server sends in segments, the confidence is a number or None, never a fault."""
    assert _confidence(segments) == confidence


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("status500", "backend-error"),
        ("hang", "backend-timeout"),
        ("bad_json", "backend-bad-response"),
        ("no_text", "backend-bad-response"),
    ],
)
async def test_transcription_faults(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients, mode: str, code: str
) -> None:
    gw = await make_gateway(fake_speech.url, first_byte_timeout=0.3, total_timeout=2.0)
    fake_speech.mode = mode
    async with client(gw) as c:
        assert first_error(await stt_events(c)).data["code"] == code
    assert gw.metrics.stt_backend.status == "down"


async def test_keys_sent_but_never_logged_or_reported(
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    key = "sk-very-secret-123"
    gw = await make_gateway(fake_speech.url, tts_key=key, stt_key=key)
    for mode in ("ok", "status500"):
        fake_speech.mode = mode
        async with client(gw) as c:
            await tts_events(c)
    assert fake_speech.auth[-1] == f"Bearer {key}"
    assert key not in caplog.text
    assert key not in str(gw.health())
    assert key not in gw.metrics.prometheus()


async def test_refused_request_does_not_mark_backend_down(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.mode = "status404"
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["code"] == "backend-error"
    assert "HTTP 404 voice not found" in err.data["text"]
    assert gw.metrics.tts_backend.status == "ok"
    assert gw.metrics.tts_backend.last_error is not None


async def test_backend_url_credentials_never_shown(
    make_gateway: GatewayFactory, client: Clients
) -> None:
    """user:password@ and query strings stay out of error texts and /health."""
    port = free_port()
    url = f"http://user:pw-sekrit@127.0.0.1:{port}/v1?api_key=q-sekrit"
    shown = f"http://127.0.0.1:{port}/v1"
    gw = await make_gateway(url, tts_voices=("alloy",), stt_models=("whisper-1",))
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["text"].startswith(f"TTS backend {shown} is unreachable: ")
    health = gw.health()
    backends = health["backends"]
    assert isinstance(backends, dict)
    assert backends["asr"]["url"] == shown
    for text in (str(err.data), str(health)):
        assert "sekrit" not in text
        assert "user" not in text
