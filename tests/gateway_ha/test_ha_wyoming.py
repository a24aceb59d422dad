"""Home Assistant's own `wyoming` integration drives the gateway (real piper + whisper behind it):
config entry setup from describe, STT entity, TTS entity plain and streaming, and the gateway
ending a turn itself (HA's WyomingSttProvider returns its transcript before the stream ends)."""

from __future__ import annotations

import asyncio
import io
import re
import urllib.request
import wave
from collections.abc import AsyncGenerator

from homeassistant.components import stt, tts
from homeassistant.components.tts.const import DATA_COMPONENT
from homeassistant.components.tts.entity import TTSAudioRequest
from homeassistant.config_entries import SOURCE_USER, ConfigEntry, ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import entity_registry as er
from homeassistant.setup import async_setup_component

from voice_stack_dev.procs import Service

PHRASE = "turn on the kitchen light"


def words(text: str) -> str:
    return re.sub(r"[^a-z ]", "", text.lower()).strip()


async def _setup(hass: HomeAssistant, port: int) -> ConfigEntry:
    """Add the gateway the way a user does: the wyoming config flow's host/port step."""
    # conversation (a wyoming dependency) needs the core integration's exposed-entities store
    assert await async_setup_component(hass, "homeassistant", {})
    result = await hass.config_entries.flow.async_init("wyoming", context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.FORM
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"host": "127.0.0.1", "port": port}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "voice-stack-stt"
    await hass.async_block_till_done()
    entry = result["result"]
    assert entry.state is ConfigEntryState.LOADED
    return entry


def _entity(hass: HomeAssistant, domain: str, entry: ConfigEntry) -> str:
    registry = er.async_get(hass)
    ids = [
        e.entity_id
        for e in er.async_entries_for_config_entry(registry, entry.entry_id)
        if e.domain == domain
    ]
    assert len(ids) == 1, ids
    return ids[0]


async def _one(text: str) -> AsyncGenerator[str]:
    yield text


async def _words(text: str) -> AsyncGenerator[str]:
    for i, word in enumerate(text.split(" ")):
        yield word if i == 0 else " " + word


def _pcm16k(wav_bytes: bytes) -> bytes:
    """HA's WAV from the gateway, resampled to what HA's STT sends (16 kHz)."""
    import audioop  # the audioop-lts wheel HA depends on

    with wave.open(io.BytesIO(wav_bytes)) as wav:
        rate = wav.getframerate()
    # a streamed WAV says 0 frames: everything after the data chunk header is audio
    frames = wav_bytes[wav_bytes.index(b"data") + 8 :]
    return audioop.ratecv(frames, 2, 1, rate, 16000, None)[0]


METADATA = stt.SpeechMetadata(
    language="en",
    format=stt.AudioFormats.WAV,
    codec=stt.AudioCodecs.PCM,
    bit_rate=stt.AudioBitRates.BITRATE_16,
    sample_rate=stt.AudioSampleRates.SAMPLERATE_16000,
    channel=stt.AudioChannels.CHANNEL_MONO,
)


async def _stt(entity: stt.SpeechToTextEntity, pcm: bytes) -> stt.SpeechResult:
    async def chunks() -> AsyncGenerator[bytes]:
        for i in range(0, len(pcm), 2048):
            yield pcm[i : i + 2048]

    return await entity.internal_async_process_audio_stream(METADATA, chunks())


async def _stream_tts(entity: tts.TextToSpeechEntity, gen: AsyncGenerator[str]) -> bytes:
    response = await entity.async_stream_tts_audio(TTSAudioRequest("en", {}, gen))
    assert response.extension == "wav"
    return b"".join([chunk async for chunk in response.data_gen])


async def test_ha_wyoming_uses_gateway(
    hass: HomeAssistant, socket_enabled: None, gateway_process: tuple[Service, int]
) -> None:
    _service, port = gateway_process
    entry = await _setup(hass, port)
    assert entry.runtime_data.service.get_name() == "voice-stack-stt"

    tts_entity_id = _entity(hass, "tts", entry)
    stt_entity_id = _entity(hass, "stt", entry)
    tts_entity = hass.data[DATA_COMPONENT].get_entity(tts_entity_id)
    stt_entity = stt.async_get_speech_to_text_entity(hass, stt_entity_id)
    assert tts_entity is not None
    assert stt_entity is not None
    assert "en" in stt_entity.supported_languages
    assert tts_entity.async_supports_streaming_input()
    voices = tts_entity.async_get_supported_voices("en")
    assert voices
    assert voices[0].voice_id == "joe"

    # plain TTS path (async_get_tts_audio: one synthesize, one envelope)
    extension, wav_plain = await tts_entity.async_get_tts_audio(
        "Turn on the kitchen light.", "en", {}
    )
    assert extension == "wav"
    assert wav_plain
    result = await _stt(stt_entity, _pcm16k(wav_plain))
    assert result.result is stt.SpeechResultState.SUCCESS
    assert words(result.text or "") == PHRASE

    # streaming TTS as HA uses it for every request (one chunk), and word by word (LLM deltas)
    for gen in (_one("Turn on the kitchen light."), _words("Sure. Turn on the kitchen light.")):
        wav_streamed = await _stream_tts(tts_entity, gen)
        with wave.open(io.BytesIO(wav_streamed)) as wav:
            assert wav.getframerate() == 22050
        result = await _stt(stt_entity, _pcm16k(wav_streamed))
        assert result.result is stt.SpeechResultState.SUCCESS
        assert PHRASE in words(result.text or "")

    assert await hass.config_entries.async_unload(entry.entry_id)


def _turn_ends(service: Service) -> dict[str, int]:
    with urllib.request.urlopen(f"{service.url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.findall(r'gateway_stt_turn_end_total\{by="(\w+)"\} (\d+)', text)
    return {by: int(n) for by, n in found}


async def test_ha_gets_the_transcript_before_the_stream_ends(
    hass: HomeAssistant, socket_enabled: None, gateway_process: tuple[Service, int]
) -> None:
    """A stream that never ends by itself (no audio-stop can come): HA's own provider returns
    the gateway's transcript of the request and its second of silence, and stops uploading."""
    service, port = gateway_process
    entry = await _setup(hass, port)
    tts_entity = hass.data[DATA_COMPONENT].get_entity(_entity(hass, "tts", entry))
    stt_entity = stt.async_get_speech_to_text_entity(hass, _entity(hass, "stt", entry))
    assert tts_entity is not None
    assert stt_entity is not None
    _extension, wav = await tts_entity.async_get_tts_audio("Turn on the kitchen light.", "en", {})
    pcm = _pcm16k(wav) + bytes(2 * 16000)  # the request, then a second of silence
    before = _turn_ends(service)
    stream: list[str] = []

    async def chunks() -> AsyncGenerator[bytes]:
        try:
            for i in range(0, len(pcm), 2048):
                yield pcm[i : i + 2048]
            stream.append("all audio sent")
            await asyncio.Event().wait()  # the stream goes on: only the gateway can end the turn
            stream.append("ended")  # never
        finally:
            stream.append("closed")

    result = await asyncio.wait_for(
        stt_entity.internal_async_process_audio_stream(METADATA, chunks()), 120
    )
    assert result.result is stt.SpeechResultState.SUCCESS
    assert words(result.text or "") == PHRASE
    # HA closed the stream, which never ended (whether every chunk was read by then is the
    # race between HA's upload and whisper: not what this test is about)
    assert stream[-1] == "closed"
    assert "ended" not in stream
    after = _turn_ends(service)
    assert after["gateway"] == before["gateway"] + 1
    assert after["client"] == before["client"]
    assert await hass.config_entries.async_unload(entry.entry_id)
