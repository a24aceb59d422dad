"""A Wyoming satellite through Home Assistant's own `wyoming` integration, with the gateway as the
pipeline's STT: when the gateway ends the turn, the satellite gets `transcript` and never
`voice-stopped` (HA sends that only on `stt-vad-end`, which its own segmenter fires; see
docs/gateway.md, "Satellites when the turn ends without stt-vad-end")."""

from __future__ import annotations

import asyncio
from typing import Any

from homeassistant.components import stt
from homeassistant.components.assist_pipeline.pipeline import (
    async_get_pipeline,
    async_update_pipeline,
)
from homeassistant.components.tts.const import DATA_COMPONENT
from homeassistant.config_entries import SOURCE_USER
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from wyoming.audio import AudioChunk
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, Satellite
from wyoming.pipeline import PipelineStage, RunPipeline
from wyoming.satellite import RunSatellite
from wyoming.server import AsyncEventHandler, AsyncServer

from voice_stack_dev.procs import Service, free_port

from .test_ha_wyoming import PHRASE, _entity, _pcm16k, _setup, _turn_ends, words


class FakeSatellite:
    """A Wyoming satellite: asks for a pipeline from ASR on, sends the request and a little
    silence (less than HA's 0.7 s hold, so HA's own segmenter cannot end it), and keeps the
    stream open; records what HA sends it."""

    def __init__(self, pcm: bytes) -> None:
        self.pcm = pcm
        self.port = free_port()
        self.received: list[Event] = []
        self.transcript = asyncio.Event()
        self._server = AsyncServer.from_uri(f"tcp://127.0.0.1:{self.port}")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._server.run(self._handler))

    async def stop(self) -> None:
        await self._server.stop()
        if self._task is not None:
            self._task.cancel()

    def _handler(self, *args: Any) -> AsyncEventHandler:
        satellite = self

        class Handler(AsyncEventHandler):
            async def handle_event(self, event: Event) -> bool:
                satellite.received.append(event)
                if Describe.is_type(event.type):
                    await self.write_event(satellite.info().event())
                elif RunSatellite.is_type(event.type):
                    await self.write_event(
                        RunPipeline(
                            start_stage=PipelineStage.ASR, end_stage=PipelineStage.ASR
                        ).event()
                    )
                    for at in range(0, len(satellite.pcm), 2048):
                        chunk = AudioChunk(16000, 2, 1, satellite.pcm[at : at + 2048])
                        await self.write_event(chunk.event())
                elif event.type == "transcript":
                    satellite.transcript.set()
                return True

        return Handler(*args)

    def info(self) -> Info:
        attribution = Attribution(name="test", url="")
        return Info(
            satellite=Satellite(
                name="fake-satellite",
                attribution=attribution,
                installed=True,
                description="fake",
                version="1",
            )
        )


async def test_a_satellite_turn_ended_by_the_gateway(
    hass: HomeAssistant, socket_enabled: None, gateway_process: tuple[Service, int]
) -> None:
    service, port = gateway_process
    entry = await _setup(hass, port)
    stt_id, tts_id = _entity(hass, "stt", entry), _entity(hass, "tts", entry)
    tts_entity = hass.data[DATA_COMPONENT].get_entity(tts_id)
    assert tts_entity is not None
    assert stt.async_get_speech_to_text_entity(hass, stt_id) is not None
    await async_update_pipeline(
        hass, async_get_pipeline(hass), stt_engine=stt_id, stt_language="en", language="en"
    )
    _extension, wav = await tts_entity.async_get_tts_audio("Turn on the kitchen light.", "en", {})
    satellite = FakeSatellite(_pcm16k(wav) + bytes(2 * 9600))  # 0.6 s of silence
    before = _turn_ends(service)
    satellite.start()
    try:
        result = await hass.config_entries.flow.async_init(
            "wyoming", context={"source": SOURCE_USER}
        )
        result = await hass.config_entries.flow.async_configure(
            result["flow_id"], {"host": "127.0.0.1", "port": satellite.port}
        )
        assert result["type"] is FlowResultType.CREATE_ENTRY
        await asyncio.wait_for(satellite.transcript.wait(), 120)
        types = [e.type for e in satellite.received]
        transcript = next(e for e in satellite.received if e.type == "transcript")
        assert words(transcript.data["text"]) == PHRASE
        assert "transcribe" in types
        assert "voice-started" in types  # HA's segmenter heard the speech begin (stt-vad-start)
        assert "voice-stopped" not in types  # no stt-vad-end: HA's segmenter did not end it
        after = _turn_ends(service)
        assert after["gateway"] == before["gateway"] + 1  # the gateway ended the turn
        sat_entry = result["result"]
        assert await hass.config_entries.async_unload(sat_entry.entry_id)
    finally:
        await satellite.stop()
    assert await hass.config_entries.async_unload(entry.entry_id)
