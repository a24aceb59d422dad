"""The gateway's own end of speech (STT_OWN_VAD=1) through Home Assistant's own `wyoming`
integration and `assist_pipeline`: the info's `requires_external_vad: false` makes HA skip its
segmenter (no stt-vad-start/stt-vad-end), a pause longer than HA's 0.7 s hold where the request
cannot end is not cut, the transcript comes when the gateway ends the turn on a stream that never
ends, and a stream without speech ends with HA's own "No text recognized", not a hang."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncGenerator, Iterator

import pytest
from homeassistant.components import stt
from homeassistant.components.assist_pipeline import (
    PipelineEvent,
    PipelineEventType,
    PipelineStage,
    async_pipeline_from_audio_stream,
)
from homeassistant.components.assist_pipeline.pipeline import (
    async_get_pipeline,
    async_update_pipeline,
)
from homeassistant.components.tts.const import DATA_COMPONENT
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import Context, HomeAssistant

from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.procs import Service, free_port

from .test_ha_wyoming import METADATA, _entity, _pcm16k, _setup, _turn_ends, words


@pytest.fixture(scope="module")
def own_vad_gateway(
    speech_server: Service, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, int]]:
    port = free_port()
    service = start_gateway(
        speech_server.url,
        tmp_path_factory.mktemp("gateway-own-vad") / "gateway.log",
        port=port,
        env={"STT_OWN_VAD": "1", "GATEWAY_TTS_OUTPUT_RATE": "22050", "WYOMING_LOG_LEVEL": "DEBUG"},
    )
    try:
        yield service, port
    finally:
        service.stop()


def _trim(pcm: bytes, floor: int = 200) -> bytes:
    """Piper's leading and trailing quiet cut off, so a gap put in is the whole pause."""
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm[: len(pcm) // 2 * 2])
    loud = [i for i, v in enumerate(samples) if abs(v) > floor]
    return pcm[2 * loud[0] : 2 * (loud[-1] + 1)]


async def _speech(hass: HomeAssistant, entry: ConfigEntry, text: str) -> bytes:
    tts_entity = hass.data[DATA_COMPONENT].get_entity(_entity(hass, "tts", entry))
    assert tts_entity is not None
    _extension, wav = await tts_entity.async_get_tts_audio(text, "en", {})
    return _trim(_pcm16k(wav))


async def _stt_pipeline(hass: HomeAssistant, pcm: bytes) -> list[PipelineEvent]:
    """HA's pipeline from STT to STT on a stream that never ends by itself: only the STT (the
    gateway) can end it; the events HA fired."""
    events: list[PipelineEvent] = []

    async def chunks() -> AsyncGenerator[bytes]:
        for at in range(0, len(pcm), 2048):
            yield pcm[at : at + 2048]
        await asyncio.Event().wait()  # a microphone that stays open

    await asyncio.wait_for(
        async_pipeline_from_audio_stream(
            hass,
            context=Context(),
            event_callback=events.append,
            stt_metadata=METADATA,
            stt_stream=chunks(),
            start_stage=PipelineStage.STT,
            end_stage=PipelineStage.STT,
        ),
        120,
    )
    return events


async def _own_vad_entry(hass: HomeAssistant, port: int) -> ConfigEntry:
    entry = await _setup(hass, port)
    stt_id = _entity(hass, "stt", entry)
    stt_entity = stt.async_get_speech_to_text_entity(hass, stt_id)
    assert stt_entity is not None
    assert stt_entity.audio_processing.requires_external_vad is False  # from the gateway's info
    await async_update_pipeline(
        hass, async_get_pipeline(hass), stt_engine=stt_id, stt_language="en", language="en"
    )
    return entry


async def test_ha_skips_its_vad_and_a_long_pause_is_not_cut(
    hass: HomeAssistant, socket_enabled: None, own_vad_gateway: tuple[Service, int]
) -> None:
    service, port = own_vad_gateway
    entry = await _own_vad_entry(hass, port)
    head = await _speech(hass, entry, "Turn on the")
    tail = await _speech(hass, entry, "kitchen light.")
    gap = bytes(2 * 16000)  # 1 s where the request cannot end: HA's 0.7 s hold would cut it
    before = _turn_ends(service)
    events = await _stt_pipeline(hass, head + gap + tail + bytes(2 * 16000))
    types = [e.type for e in events]
    assert PipelineEventType.STT_VAD_START not in types  # HA ran no segmenter
    assert PipelineEventType.STT_VAD_END not in types
    assert PipelineEventType.ERROR not in types, events
    (end,) = (e for e in events if e.type is PipelineEventType.STT_END)
    assert end.data is not None
    heard = words(end.data["stt_output"]["text"])
    # the whole request, not its head (tiny.en hears this gapped "the" as "the" or "that")
    assert heard.startswith("turn on th"), heard
    assert heard.endswith("kitchen light"), heard
    after = _turn_ends(service)
    assert after["gateway"] == before["gateway"] + 1  # "kitchen light." read complete
    assert after["gateway_hold"] == before["gateway_hold"]  # the gap did not end the turn
    assert await hass.config_entries.async_unload(entry.entry_id)


async def test_no_speech_ends_with_has_no_text_recognized(
    hass: HomeAssistant, socket_enabled: None, own_vad_gateway: tuple[Service, int]
) -> None:
    service, port = own_vad_gateway
    entry = await _own_vad_entry(hass, port)
    before = _turn_ends(service)
    events = await _stt_pipeline(hass, bytes(2 * 16000 * 16))  # 16 s of silence, then none
    types = [e.type for e in events]
    assert PipelineEventType.STT_VAD_END not in types
    (error,) = (e for e in events if e.type is PipelineEventType.ERROR)
    assert error.data == {"code": "stt-no-text-recognized", "message": "No text recognized"}
    assert types[-1] is PipelineEventType.RUN_END
    after = _turn_ends(service)
    assert after["gateway_no_speech"] == before["gateway_no_speech"] + 1
    assert await hass.config_entries.async_unload(entry.entry_id)
