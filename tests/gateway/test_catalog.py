"""catalog.py: the lists the gateway offers and the model and voice a request gets."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from wyoming.tts import SynthesizeVoice

from voice_stack_gateway.catalog import (
    VoiceChoice,
    build_catalog,
    model_entries,
    voice_entries,
    voice_languages,
)
from voice_stack_gateway.config import parse_settings
from voice_stack_gateway.errors import GatewayError

SETTINGS = parse_settings([], {})
MODELS: list[dict[str, Any]] = [
    {"id": "whisper-large", "task": "automatic-speech-recognition", "language": ["en", "de"]},
    {"id": "kokoro"},
    {"id": "piper", "task": "text-to-speech"},
    {"id": "other-thing"},
]
VOICES: list[dict[str, Any]] = [
    {"id": "af_heart", "model": "kokoro"},
    {"id": "de_DE-thorsten-high", "model": "piper"},
]


def test_lists_from_the_backends() -> None:
    catalog = build_catalog(SETTINGS, MODELS, VOICES)
    assert catalog.stt_models == ("whisper-large",)
    assert catalog.stt_languages == {"whisper-large": ("en", "de")}
    assert catalog.tts_models == ("kokoro", "piper")
    assert [(v.name, v.model, v.languages) for v in catalog.voices.values()] == [
        ("af_heart", "kokoro", ("en",)),
        ("de_DE-thorsten-high", "piper", ("de",)),
    ]


def test_configured_lists_first_and_fallbacks() -> None:
    settings = dataclasses.replace(SETTINGS, tts_voices=("mine",), stt_models=("a", "b"))
    catalog = build_catalog(settings, MODELS, VOICES)
    assert catalog.stt_models == ("a", "b")
    assert list(catalog.voices) == ["mine", "af_heart", "de_DE-thorsten-high"]
    empty = build_catalog(SETTINGS, [], [])
    assert (empty.stt_models, empty.tts_models, list(empty.voices)) == (
        ("whisper-1",), ("tts-1",), ["alloy"]
    )  # fmt: skip


def test_voice_choice() -> None:
    catalog = build_catalog(SETTINGS, MODELS, VOICES)
    assert catalog.voice(None, None) == VoiceChoice("af_heart", "kokoro")
    assert catalog.voice(None, "piper") == VoiceChoice("de_DE-thorsten-high", "piper")
    named = SynthesizeVoice(name="de_DE-thorsten-high")
    assert catalog.voice(named, None) == VoiceChoice("de_DE-thorsten-high", "piper")
    # a voice we have not listed is passed through: the backend decides
    assert catalog.voice(SynthesizeVoice(name="bf_emma"), None) == VoiceChoice("bf_emma", "kokoro")
    assert catalog.voice(SynthesizeVoice(name="x"), "piper") == VoiceChoice("x", "piper")


def test_model_choice_and_programs() -> None:
    catalog = build_catalog(dataclasses.replace(SETTINGS, stt_models=("a", "b")), MODELS, VOICES)
    assert catalog.stt_model(None, None) == "a"
    assert catalog.stt_model("b", None) == "b"
    assert catalog.stt_model("unknown", "b") == "b"
    assert catalog.program("voice-stack-stt") is None
    assert catalog.program("b") == ("stt", "b")
    assert catalog.program("piper") == ("tts", "piper")
    with pytest.raises(GatewayError, match="Unknown program 'nope'"):
        catalog.program("nope")


def test_backend_answers_of_any_shape() -> None:
    assert model_entries({"data": [{"id": "a"}, {"no": "id"}, "x"]}) == [{"id": "a"}]
    assert model_entries([{"id": "b"}]) == [{"id": "b"}]
    assert model_entries({"data": "nope"}) == []
    assert voice_entries(["a", {"voice_id": "b"}, {"name": "c"}, {"x": 1}, 5]) == [
        {"id": "a"}, {"voice_id": "b", "id": "b"}, {"name": "c", "id": "c"}
    ]  # fmt: skip
    assert voice_entries({"voices": None}) == []


def test_voice_languages() -> None:
    assert voice_languages("af_heart", ("en",)) == ("en",)
    assert voice_languages("ef_dora", ("en",)) == ("es",)
    assert voice_languages("de_DE-thorsten-high", ("en",)) == ("de",)
    assert voice_languages("alloy", ("xx",)) == ("xx",)
