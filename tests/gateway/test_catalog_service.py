"""catalog_service.py: the catalog from the configuration at once, then from the backends."""

from __future__ import annotations

import asyncio

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import free_port

from .conftest import GatewayFactory


async def test_catalog_from_the_backend_and_kept_while_it_is_down(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    gw = await make_gateway(fake_speech.url, tts_voices=("mine",))
    catalog = gw.catalog.current
    assert catalog.stt_models == ("whisper-fake",)
    assert catalog.tts_models == ("tts-fake", "kokoro")
    assert list(catalog.voices) == ["mine", "af_heart", "en_GB-alan-medium", "v3"]
    assert [p["name"] for p in gw.catalog.describe.data["tts"]] == [
        "voice-stack-tts", "tts-fake", "kokoro"
    ]  # fmt: skip
    tts = gw.metrics.tts_backend
    assert (tts.status, tts.voices, tts.models) == (
        "ok",
        list(catalog.voices),
        ["tts-fake", "kokoro"],
    )
    fake_speech.health = "down"  # the backend goes down: status flips, voices stay listed
    await gw.catalog.refresh()
    assert gw.health()["status"] == "degraded"
    assert gw.metrics.tts_backend.last_error == "TTS health probe failed: HTTP 503"
    assert list(gw.catalog.current.voices) == list(catalog.voices)


async def test_health_reports_a_backend_once_describe_holds_its_lists(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """A status other than "unknown" on /health means the first refresh is in: what a client
    (the dev harness, a deploy check) waits for before describe offers the backends' voices."""
    fake_speech.voices_gate = asyncio.Event()
    gw = await make_gateway(fake_speech.url, refreshed=False)
    await asyncio.wait_for(fake_speech.voices_asked.wait(), 30)  # both probes answered
    assert [b.status for b in (gw.metrics.stt_backend, gw.metrics.tts_backend)] == ["unknown"] * 2
    assert list(gw.catalog.current.voices) == ["alloy"]  # the configuration's placeholder
    fake_speech.voices_gate.set()
    await asyncio.wait_for(gw.catalog.refreshed.wait(), 30)
    assert [b.status for b in (gw.metrics.stt_backend, gw.metrics.tts_backend)] == ["ok"] * 2
    assert list(gw.catalog.current.voices) == ["af_heart", "en_GB-alan-medium", "v3"]


async def test_a_backend_down_is_probed_again_soon(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """While a backend is down it is probed every few seconds, not every refresh interval, so
    describe and /health follow it within seconds once it is back."""
    fake_speech.health = "down"
    gw = await make_gateway(fake_speech.url, refresh_interval=3600)
    assert gw.metrics.stt_backend.status == "down"
    assert gw.catalog.current.stt_models == ("whisper-1",)  # the configuration's fallback
    fake_speech.health = "ok"
    gw.catalog.refreshed.clear()
    await asyncio.wait_for(gw.catalog.refreshed.wait(), 30)
    assert gw.metrics.stt_backend.status == "ok"
    assert gw.catalog.current.stt_models == ("whisper-fake",)


async def test_unreachable_backends(make_gateway: GatewayFactory) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    gw = await make_gateway(url, tts_voices=("alloy",))
    backends = gw.health()["backends"]
    assert isinstance(backends, dict)
    assert backends["tts"]["status"] == "down"
    assert "TTS health probe failed: ClientConnectorError" in backends["tts"]["last_error"]
    assert list(gw.catalog.current.voices) == ["alloy"]


async def test_a_probe_recorded_late_never_hides_a_failure_seen_meanwhile(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """The refresh records its probes once both backends' lists are read: a request that failed
    meanwhile used to be overwritten by the older probe's "ok" (and the refresh then waited its
    long interval, so /health called a dead backend ok for about 30 s)."""
    gw = await make_gateway(fake_speech.url, refresh_interval=3600)
    tts = gw.metrics.tts_backend
    assert tts.status == "ok"
    fake_speech.voices_asked.clear()
    fake_speech.voices_gate = asyncio.Event()
    refresh = asyncio.create_task(gw.catalog.refresh())
    await asyncio.wait_for(fake_speech.voices_asked.wait(), 30)  # the probes answered "ok"
    gw.tts.record_failure(ConnectionResetError("gone"), "synthesis")  # a request fails now
    fake_speech.voices_gate.set()
    await refresh
    assert (tts.status, gw.health()["status"]) == ("down", "degraded")
    assert tts.last_error == "TTS backend synthesis failed: gone"
