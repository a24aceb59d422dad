"""What the gateway offers (models, voices, languages) and which of them a request gets: the
configured lists first, then what the backends list, with fixed fallbacks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wyoming.tts import SynthesizeVoice

from .config import Settings
from .errors import UNKNOWN_PROGRAM, GatewayError

STT_PROGRAM = "voice-stack-stt"
TTS_PROGRAM = "voice-stack-tts"
_STT_HINTS = ("whisper", "parakeet", "transcribe", "asr", "stt", "canary", "moonshine")
_TTS_HINTS = ("tts", "kokoro", "piper", "speech", "voice", "orpheus", "chatterbox")
# Kokoro voice ids start with a language letter (af_heart = American English, female).
_KOKORO_LANG = dict(
    zip("abefhijpz", ("en", "en", "es", "fr", "hi", "it", "ja", "pt", "zh"), strict=True)
)
_PIPER_LOCALE = re.compile(r"^([a-z]{2,3})[_-][A-Z]{2}-")


@dataclass(frozen=True, slots=True)
class Voice:
    name: str
    model: str
    description: str
    languages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    """The voice and model one synthesis request is sent with."""

    name: str
    model: str


@dataclass(frozen=True, slots=True)
class Catalog:
    """Current models and voices, and the choice of model and voice for a request."""

    stt_models: tuple[str, ...]
    stt_languages: dict[str, tuple[str, ...]]
    tts_models: tuple[str, ...]
    voices: dict[str, Voice]

    def stt_model(self, requested: object, pinned: str | None) -> str:
        """The model a `transcribe` names if it is ours, else the pinned one, else the first."""
        if isinstance(requested, str) and requested in self.stt_models:
            return requested
        return pinned or self.stt_models[0]

    def voice(self, requested: SynthesizeVoice | None, pinned_model: str | None) -> VoiceChoice:
        """The voice a request names (an unknown one is passed through: the backend decides),
        else the first voice of the pinned model, else the first voice."""
        name = requested.name if requested is not None and requested.name else None
        if name is not None:
            known = self.voices.get(name)
            model = known.model if known is not None else self.tts_models[0]
            return VoiceChoice(name, pinned_model or model)
        voices = list(self.voices.values())
        of_model = [v for v in voices if v.model == pinned_model] if pinned_model else []
        default = (of_model or voices)[0]
        return VoiceChoice(default.name, pinned_model or default.model)

    def program(self, name: object) -> tuple[str, str] | None:
        """select-program: ("stt" or "tts", model) to pin, None for our own program names."""
        if name in (STT_PROGRAM, TTS_PROGRAM):
            return None
        if isinstance(name, str) and name in self.stt_models:
            return "stt", name
        if isinstance(name, str) and name in self.tts_models:
            return "tts", name
        raise GatewayError(UNKNOWN_PROGRAM, f"Unknown program {name!r}")


def build_catalog(
    settings: Settings, models: list[dict[str, Any]], voices: list[dict[str, Any]]
) -> Catalog:
    """The catalog from the backends' model and voice lists (empty when they are unknown)."""
    s = settings
    stt_found = [m["id"] for m in models if _task_of(m) == "stt"]
    tts_found = [m["id"] for m in models if _task_of(m) == "tts"]
    stt_models = tuple(s.stt_models) or tuple(stt_found) or ("whisper-1",)
    tts_models = tuple(s.tts_models) or tuple(tts_found) or ("tts-1",)
    by_id = {m["id"]: m for m in models}
    stt_languages = {name: _languages(by_id.get(name, {}), s.languages) for name in stt_models}
    found = {v["id"]: v for v in voices}
    names = list(s.tts_voices) + sorted(v for v in found if v not in s.tts_voices)
    catalog_voices: dict[str, Voice] = {}
    for name in names or ["alloy"]:
        entry = found.get(name, {})
        model = entry.get("model") if entry.get("model") in tts_models else tts_models[0]
        label = entry.get("name") if isinstance(entry.get("name"), str) else name
        languages = _languages(entry, voice_languages(name, s.languages))
        catalog_voices[name] = Voice(name, str(model), str(label), languages)
    return Catalog(stt_models, stt_languages, tts_models, catalog_voices)


def model_entries(data: Any) -> list[dict[str, Any]]:
    """The entries of a /v1/models answer that have an id."""
    items = data.get("data", []) if isinstance(data, dict) else data
    if not isinstance(items, list):
        return []
    return [m for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]


def voice_entries(data: Any) -> list[dict[str, Any]]:
    """The voices of a /v1/audio/voices answer (strings, or objects with an id or a name)."""
    items = data.get("voices", data.get("data", [])) if isinstance(data, dict) else data
    out: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            out.append({"id": item})
        elif isinstance(item, dict):
            vid = item.get("id", item.get("voice_id", item.get("name")))
            if isinstance(vid, str):
                out.append({**item, "id": vid})
    return out


def voice_languages(name: str, fallback: tuple[str, ...]) -> tuple[str, ...]:
    """Languages implied by well-known voice naming schemes (Kokoro, Piper), else the fallback."""
    if m := _PIPER_LOCALE.match(name):
        return (m.group(1),)
    if len(name) > 3 and name[1] in "fm" and name[2] == "_" and name[0] in _KOKORO_LANG:
        return (_KOKORO_LANG[name[0]],)
    return fallback


def _task_of(model: dict[str, Any]) -> str | None:
    task = str(model.get("task", "")).lower()
    if "speech-recognition" in task or task in ("asr", "stt", "transcription"):
        return "stt"
    if "text-to-speech" in task or task in ("tts", "speech"):
        return "tts"
    name = model["id"].lower()
    if any(h in name for h in _STT_HINTS):
        return "stt"
    if any(h in name for h in _TTS_HINTS):
        return "tts"
    return None


def _languages(entry: dict[str, Any], fallback: tuple[str, ...]) -> tuple[str, ...]:
    for key in ("languages", "language"):
        value = entry.get(key)
        if isinstance(value, str) and value:
            return (value,)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
    return fallback
