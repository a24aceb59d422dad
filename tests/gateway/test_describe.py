"""describe.py: the info event Home Assistant reads."""

from __future__ import annotations

import dataclasses

from voice_stack_gateway.catalog import build_catalog
from voice_stack_gateway.config import parse_settings
from voice_stack_gateway.describe import describe_event

SETTINGS = parse_settings(["--stt-openai-url", "http://u:pw@asr:8000/v1?key=k"], {})


def test_one_program_of_each_kind_for_one_model() -> None:
    info = describe_event(SETTINGS, build_catalog(SETTINGS, [], [])).data
    assert [p["name"] for p in info["asr"]] == ["voice-stack-stt"]
    assert [p["name"] for p in info["tts"]] == ["voice-stack-tts"]
    stt, tts = info["asr"][0], info["tts"][0]
    assert stt["models"][0]["attribution"]["url"] == "http://asr:8000/v1"
    assert stt["supports_transcript_streaming"] is False
    assert tts["supports_synthesize_streaming"] is True
    assert tts["voices"][0]["name"] == "alloy"
    assert "pw" not in str(info)


def test_extra_programs_per_model() -> None:
    settings = dataclasses.replace(
        SETTINGS, stt_models=("a", "b"), stt_streaming_models=("b",), tts_models=("k", "p")
    )
    voices = [{"id": "v1", "model": "k"}, {"id": "v2", "model": "p"}]
    info = describe_event(settings, build_catalog(settings, [], voices)).data
    assert [p["name"] for p in info["asr"]] == ["voice-stack-stt", "a", "b"]
    assert [p["supports_transcript_streaming"] for p in info["asr"]] == [False, False, True]
    assert [p["name"] for p in info["tts"]] == ["voice-stack-tts", "k", "p"]
    assert [[v["name"] for v in p["voices"]] for p in info["tts"]] == [["v1", "v2"], ["v1"], ["v2"]]


def test_own_vad_says_no_external_vad_is_needed() -> None:
    """Home Assistant skips its own VAD for a program whose info says so (--stt-own-vad)."""
    settings = dataclasses.replace(SETTINGS, stt_models=("a", "b"))
    info = describe_event(settings, build_catalog(settings, [], [])).data
    assert [p["requires_external_vad"] for p in info["asr"]] == [True, True, True]
    own = dataclasses.replace(settings, stt_own_vad=True)
    info = describe_event(own, build_catalog(own, [], [])).data
    assert [p["requires_external_vad"] for p in info["asr"]] == [False, False, False]
