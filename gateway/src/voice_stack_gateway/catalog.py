"""What the gateway offers (models, voices, languages), answered instantly from a cache that a
background task refreshes from the backends, with the configured lists as the fallback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Info, TtsProgram, TtsVoice

from . import __version__
from .config import Settings, public_url, redact_urls
from .errors import GatewayError
from .metrics import BackendState
from .upstream import Backend

_LOGGER = logging.getLogger(__name__)
ASR_PROGRAM = "voice-stack-stt"
TTS_PROGRAM = "voice-stack-tts"
_GATEWAY = Attribution(name="Voice Stack", url="https://github.com/voice-stack/voice-stack")
_ASR_HINTS = ("whisper", "parakeet", "transcribe", "asr", "stt", "canary", "moonshine")
_TTS_HINTS = ("tts", "kokoro", "piper", "speech", "voice", "orpheus", "chatterbox")
# Kokoro voice ids start with a language letter (af_heart = American English, female).
_KOKORO_LANG = {"a": "en", "b": "en", "e": "es", "f": "fr", "h": "hi", "i": "it", "j": "ja",
                "p": "pt", "z": "zh"}  # fmt: skip
_PIPER_LOCALE = re.compile(r"^([a-z]{2,3})[_-][A-Z]{2}-")


@dataclass(frozen=True, slots=True)
class Voice:
    name: str
    model: str
    description: str
    languages: tuple[str, ...]


@dataclass(slots=True)
class Catalog:
    """Current models and voices; `describe` is a prebuilt event, swapped atomically on refresh."""

    stt_models: list[str]
    stt_languages: dict[str, tuple[str, ...]]
    tts_models: list[str]
    voices: dict[str, Voice]
    describe: Event = field(init=False)

    def default_voice(self) -> Voice | None:
        return next(iter(self.voices.values()), None)


def _model_entries(data: Any) -> list[dict[str, Any]]:
    items = data.get("data", []) if isinstance(data, dict) else data
    return (
        [m for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if isinstance(items, list)
        else []
    )


def _task_of(model: dict[str, Any]) -> str | None:
    task = str(model.get("task", "")).lower()
    if "speech-recognition" in task or task in ("asr", "stt", "transcription"):
        return "asr"
    if "text-to-speech" in task or task in ("tts", "speech"):
        return "tts"
    name = model["id"].lower()
    if any(h in name for h in _ASR_HINTS):
        return "asr"
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


def voice_languages(name: str, fallback: tuple[str, ...]) -> tuple[str, ...]:
    """Languages implied by well-known voice naming schemes (Kokoro, Piper), else the fallback."""
    if m := _PIPER_LOCALE.match(name):
        return (m.group(1),)
    if len(name) > 3 and name[1] in "fm" and name[2] == "_" and name[0] in _KOKORO_LANG:
        return (_KOKORO_LANG[name[0]],)
    return fallback


def _voice_entries(data: Any) -> list[dict[str, Any]]:
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


class CatalogService:
    """Owns the cached catalog and the background refresh/probe loop."""

    def __init__(
        self, settings: Settings, stt: Backend, tts: Backend, states: dict[str, BackendState]
    ) -> None:
        self.settings = settings
        self._stt, self._tts = stt, tts
        self._states = states
        self._task: asyncio.Task[None] | None = None
        # last lists each backend returned: a backend that goes down keeps its voices listed
        self._seen: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        self.current = self._build([], [])
        self.refreshed = asyncio.Event()

    # --- building -------------------------------------------------------------------------------

    def _build(self, models: list[dict[str, Any]], voices: list[dict[str, Any]]) -> Catalog:
        s = self.settings
        langs = s.languages
        asr_found = [m for m in models if _task_of(m) == "asr"]
        tts_found = [m for m in models if _task_of(m) == "tts"]
        stt_models = list(s.stt_models) or [m["id"] for m in asr_found] or ["whisper-1"]
        by_id = {m["id"]: m for m in models}
        stt_languages = {name: _languages(by_id.get(name, {}), langs) for name in stt_models}
        tts_models = list(s.tts_models) or [m["id"] for m in tts_found] or ["tts-1"]
        found = {v["id"]: v for v in voices}
        names = list(s.tts_voices) + sorted(v for v in found if v not in s.tts_voices)
        if not names:
            names = ["alloy"]
        catalog_voices: dict[str, Voice] = {}
        for name in names:
            entry = found.get(name, {})
            model = entry.get("model") if entry.get("model") in tts_models else tts_models[0]
            label = entry.get("name") if isinstance(entry.get("name"), str) else name
            languages = _languages(entry, voice_languages(name, langs))
            catalog_voices[name] = Voice(name, str(model), str(label), languages)
        catalog = Catalog(stt_models, stt_languages, tts_models, catalog_voices)
        catalog.describe = self._info(catalog).event()
        return catalog

    def _info(self, c: Catalog) -> Info:
        s = self.settings
        attribution = Attribution(name="OpenAI-compatible server", url=public_url(s.stt_url))
        models = [
            AsrModel(name=m, attribution=attribution, installed=True, description=m,
                     version=None, languages=list(c.stt_languages[m]))
            for m in c.stt_models
        ]  # fmt: skip
        streaming = c.stt_models[0] in s.stt_streaming_models
        asr = [
            AsrProgram(
                name=ASR_PROGRAM, attribution=_GATEWAY, installed=True,
                description="Voice Stack gateway speech-to-text", version=__version__,
                models=models, supports_transcript_streaming=streaming,
            )
        ]  # fmt: skip
        tts_attr = Attribution(name="OpenAI-compatible server", url=public_url(s.tts_url))
        voices = [
            TtsVoice(name=v.name, attribution=tts_attr, installed=True, description=v.description,
                     version=None, languages=list(v.languages), speakers=None)
            for v in c.voices.values()
        ]  # fmt: skip
        tts = [
            TtsProgram(
                name=TTS_PROGRAM, attribution=_GATEWAY, installed=True,
                description="Voice Stack gateway text-to-speech", version=__version__,
                voices=voices, supports_synthesize_streaming=s.tts_streaming,
            )
        ]  # fmt: skip
        # One extra program per model when there are several, for select-program clients;
        # Home Assistant uses the first program, whose name and voices never change.
        if len(c.stt_models) > 1:
            asr += [
                AsrProgram(name=m.name, attribution=attribution, installed=True,
                           description=f"{m.name} only", version=__version__, models=[m],
                           supports_transcript_streaming=m.name in s.stt_streaming_models)
                for m in models
            ]  # fmt: skip
        if len(c.tts_models) > 1:
            tts += [
                TtsProgram(name=m, attribution=tts_attr, installed=True, description=f"{m} only",
                           version=__version__,
                           voices=[v for v in voices if c.voices[v.name].model == m],
                           supports_synthesize_streaming=s.tts_streaming)
                for m in c.tts_models
            ]  # fmt: skip
        return Info(asr=asr, tts=tts)

    # --- refreshing -----------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="catalog refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            self.refreshed.set()
            await asyncio.sleep(self.settings.refresh_interval)

    async def refresh(self) -> None:
        """Probe both backends and rebuild the catalog; failures keep the previous lists."""
        timeout = min(5.0, self.settings.total_timeout)
        (stt_models, _), (tts_models, voices) = await asyncio.gather(
            self._refresh_one(self._stt, "asr", timeout, with_voices=False),
            self._refresh_one(self._tts, "tts", timeout, with_voices=True),
        )
        same = self._stt.base_url == self._tts.base_url
        models = stt_models + ([] if same else tts_models)
        catalog = self._build(models, voices)
        self._states["asr"].models = list(catalog.stt_models)
        self._states["tts"].models = list(catalog.tts_models)
        self._states["tts"].voices = list(catalog.voices)
        if catalog.describe.data != self.current.describe.data:
            _LOGGER.info("Catalog: stt %s, tts %s, voices %s",
                         catalog.stt_models, catalog.tts_models, list(catalog.voices))  # fmt: skip
        self.current = catalog

    async def _refresh_one(
        self, backend: Backend, name: str, limit: float, *, with_voices: bool
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        state = self._states[name]
        models: list[dict[str, Any]] = []
        voices: list[dict[str, Any]] = []
        try:
            latency = await backend.probe(limit)
            state.record(True, latency, None)
        except (TimeoutError, GatewayError, OSError, Exception) as exc:
            text = exc.text if isinstance(exc, GatewayError) else f"{type(exc).__name__}: {exc}"
            text = redact_urls(text)
            state.record(False, None, f"{backend.kind} health probe failed: {text}")
            return self._seen.get(name, (models, voices))
        previous = self._seen.get(name, ([], []))
        try:
            models = _model_entries(await backend.get_json("/models", limit))
        except Exception:
            models = previous[0]
        if with_voices:
            try:
                voices = _voice_entries(await backend.get_json("/audio/voices", limit))
            except Exception:
                voices = previous[1]
        self._seen[name] = (models, voices)
        return models, voices
