"""The Wyoming `info` event for a catalog: built once per catalog, so describe costs nothing.

Home Assistant uses the first program of each kind: `voice-stack-stt` holds every STT model and
`voice-stack-tts` every voice, under names that never change. With several models, one extra
program per model follows, for clients that send select-program.
"""

from __future__ import annotations

from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Info, TtsProgram, TtsVoice

from . import __version__
from .catalog import STT_PROGRAM, TTS_PROGRAM, Catalog
from .config import Settings
from .urls import public_url

_GATEWAY = Attribution(name="Voice Stack", url="https://github.com/voice-stack/voice-stack")


def _backend(url: str) -> Attribution:
    return Attribution(name="OpenAI-compatible server", url=public_url(url))


def _stt_program(
    name: str,
    description: str,
    models: list[AsrModel],
    streaming: bool,
    by: Attribution,
    *,
    own_vad: bool,
) -> AsrProgram:
    """`requires_external_vad` false makes Home Assistant skip its own VAD: the gateway then
    ends every stream itself (--stt-own-vad)."""
    return AsrProgram(
        name=name,
        attribution=by,
        installed=True,
        description=description,
        version=__version__,
        models=models,
        supports_transcript_streaming=streaming,
        requires_external_vad=not own_vad,
    )


def _tts_program(
    name: str, description: str, voices: list[TtsVoice], streaming: bool, by: Attribution
) -> TtsProgram:
    return TtsProgram(
        name=name,
        attribution=by,
        installed=True,
        description=description,
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=streaming,
    )


def describe_event(settings: Settings, catalog: Catalog) -> Event:
    s, c = settings, catalog
    stt_by, tts_by = _backend(s.stt_url), _backend(s.tts_url)
    models = [
        AsrModel(
            name=m,
            attribution=stt_by,
            installed=True,
            description=m,
            version=None,
            languages=list(c.stt_languages[m]),
        )
        for m in c.stt_models
    ]
    voices = [
        TtsVoice(
            name=v.name,
            attribution=tts_by,
            installed=True,
            description=v.description,
            version=None,
            languages=list(v.languages),
            speakers=None,
        )
        for v in c.voices.values()
    ]
    streams = s.stt_streaming_models
    stt = [
        _stt_program(
            STT_PROGRAM,
            "Voice Stack gateway speech-to-text",
            models,
            c.stt_models[0] in streams,
            _GATEWAY,
            own_vad=s.stt_own_vad,
        )
    ]
    tts = [
        _tts_program(
            TTS_PROGRAM, "Voice Stack gateway text-to-speech", voices, s.tts_streaming, _GATEWAY
        )
    ]
    if len(c.stt_models) > 1:
        stt += [
            _stt_program(
                m.name, f"{m.name} only", [m], m.name in streams, stt_by, own_vad=s.stt_own_vad
            )
            for m in models
        ]
    if len(c.tts_models) > 1:
        tts += [
            _tts_program(
                m,
                f"{m} only",
                [v for v in voices if c.voices[v.name].model == m],
                s.tts_streaming,
                tts_by,
            )
            for m in c.tts_models
        ]
    return Info(asr=stt, tts=tts).event()
