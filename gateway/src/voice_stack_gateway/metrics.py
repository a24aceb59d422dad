"""Process-wide counters for /health (JSON) and /metrics (Prometheus text).

The /health fields and the /metrics names and `kind` labels are read by the Home Assistant
integration (it derives the STT and TTS response times from the latency histogram's _sum/_count):
fields may be added, never removed or renamed.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from .urls import public_url

_BUCKETS_MS = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)


class Kind(StrEnum):
    """What a request, a latency or an error belongs to (the `kind` label)."""

    STT = "stt"  # audio-stop (or the gateway's own VAD's end) to the final transcript
    STT_TURN = "stt_turn"  # a turn the gateway ended on its words: end of speech to transcript
    TTS = "tts"  # synthesize to the first audio
    TTS_STREAM = "tts_stream"  # the first sentence sent to the TTS server to the first audio
    PROGRAM = "select-program"
    PROTOCOL = "protocol"
    CONNECTION = "connection"
    SHUTDOWN = "shutdown"


REQUEST_KINDS = (Kind.STT, Kind.TTS, Kind.TTS_STREAM)


class EarlyResult(StrEnum):
    """Early transcription outcomes: an utterance answered early (hit) or by the whole audio
    (miss), and early backend requests whose result went unused (wasted)."""

    HIT = "hit"
    MISS = "miss"
    WASTED = "wasted"


class EndedBy(StrEnum):
    """Who ended a turn while end of turn was on: the gateway, before audio-stop, or the
    client's audio-stop (the turns left to Home Assistant's own end of speech). With the
    gateway's own VAD (--stt-own-vad) it also ends the turns Home Assistant's VAD would have:
    after the longer hold or soon after HA's own, at the 15 s cap, and with no speech by then."""

    GATEWAY = "gateway"  # the words read complete after --stt-endpoint-ms
    CLIENT = "client"
    HOLD = "gateway_hold"  # own VAD: a pause of --stt-incomplete-hold-ms
    HA_HOLD = "gateway_ha_hold"  # own VAD: soon after HA's own hold would have ended it
    CAP = "gateway_cap"  # own VAD: 15 s of audio (Home Assistant's cap)
    NO_SPEECH = "gateway_no_speech"  # own VAD: 15 s without speech


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(slots=True)
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(_BUCKETS_MS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, value_ms: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS_MS, value_ms)] += 1
        self.total += value_ms
        self.n += 1


@dataclass(slots=True)
class BackendState:
    """What the gateway knows about one backend: probe results plus real request outcomes."""

    url: str
    status: str = "unknown"  # until the first probe or request: "ok" or "down" after
    last_success: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    latency_ms: float | None = None
    models: list[str] = field(default_factory=list)
    voices: list[str] | None = None
    observed: float = 0.0  # time.monotonic() of the outcome recorded last

    def record(
        self,
        ok: bool | None,
        latency_ms: float | None,
        error: str | None,
        *,
        at: float | None = None,
    ) -> None:
        """ok: a success; False: a failure that marks the backend down; None: a refused
        request (the error is kept, the status is not changed). `at` is when the outcome was
        seen (default: now): one older than the last recorded is stale and dropped (a probe
        recorded late must not hide a failure a request saw meanwhile)."""
        at = time.monotonic() if at is None else at
        if at < self.observed:
            return
        self.observed = at
        if ok:
            self.status = "ok"
            self.last_success = _now_iso()
            if latency_ms is not None:
                self.latency_ms = round(latency_ms, 1)
        else:
            if ok is False:
                self.status = "down"
            self.last_error = error
            self.last_error_at = _now_iso()

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "url": self.url,
            "status": self.status,
            "last_success": self.last_success,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "latency_ms": self.latency_ms,
            "models": list(self.models),
        }
        if self.voices is not None:
            data["voices"] = list(self.voices)
        return data


class Metrics:
    """Requests, errors, latency histograms, early transcription and end-of-turn outcomes,
    active sessions."""

    def __init__(self, stt_url: str, tts_url: str) -> None:
        self.started = time.monotonic()
        self.active_sessions = 0
        self.requests = dict.fromkeys(REQUEST_KINDS, 0)
        # to the first result or audio; a turn the gateway ended has no audio-stop to time from
        self.latency = {kind: Histogram() for kind in (*REQUEST_KINDS, Kind.STT_TURN)}
        self.errors: dict[tuple[Kind, str], int] = {}  # (kind, code)
        self.early = dict.fromkeys(EarlyResult, 0)
        self.turn_end = dict.fromkeys(EndedBy, 0)
        self.too_noisy = 0  # turns the room was too noisy for the gateway to judge pauses in
        self.refused: dict[tuple[str, str], int] = {}  # (port, reason): admission.Refused
        self.stt_backend = BackendState(public_url(stt_url))  # URLs as shown: no credentials
        self.tts_backend = BackendState(public_url(tts_url), voices=[])

    def error(self, kind: Kind, code: str) -> None:
        self.errors[(kind, code)] = self.errors.get((kind, code), 0) + 1

    def refuse(self, port: str, reason: str) -> None:
        self.refused[(port, reason)] = self.refused.get((port, reason), 0) + 1

    def _backends(self) -> dict[str, BackendState]:
        return {"asr": self.stt_backend, "tts": self.tts_backend}  # the /health names

    def health(self, version: str) -> dict[str, object]:
        backends = self._backends()
        down = any(b.status == "down" for b in backends.values())
        return {
            "status": "degraded" if down else "ok",
            "version": version,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "active_sessions": self.active_sessions,
            "backends": {name: b.as_dict() for name, b in backends.items()},
        }

    def prometheus(self) -> str:
        lines = [
            *_header("gateway_active_sessions", "gauge", "Open Wyoming connections."),
            f"gateway_active_sessions {self.active_sessions}",
            *_header("gateway_uptime_seconds", "gauge", "Seconds since start."),
            f"gateway_uptime_seconds {time.monotonic() - self.started:.1f}",
            *_header("gateway_asyncio_tasks", "gauge", "Live asyncio tasks (a leak shows here)."),
            f"gateway_asyncio_tasks {_live_tasks()}",
            *_header("gateway_requests_total", "counter", "Requests by kind."),
            *(f'gateway_requests_total{{kind="{k}"}} {v}' for k, v in self.requests.items()),
            *_header("gateway_errors_total", "counter", "Error events sent, by kind and code."),
            *(
                f'gateway_errors_total{{kind="{k}",code="{c}"}} {v}'
                for (k, c), v in sorted(self.errors.items())
            ),
            *_header(
                "gateway_refused_total",
                "counter",
                "Connections (wyoming) and requests (http) refused, by reason: not_allowed"
                " (outside --allow), host_limit, max_connections.",
            ),
            *(
                f'gateway_refused_total{{port="{p}",reason="{r}"}} {v}'
                for (p, r), v in sorted(self.refused.items())
            ),
            *_header(
                "gateway_backend_up", "gauge", "1 if the backend's last probe or request succeeded."
            ),
            *(
                f'gateway_backend_up{{backend="{n}"}} {1 if b.status == "ok" else 0}'
                for n, b in self._backends().items()
            ),
            *_header(
                "gateway_stt_early_total",
                "counter",
                "Early transcription: utterances answered early (hit) or by the whole"
                " audio (miss), and early requests whose result went unused (wasted).",
            ),
            *(f'gateway_stt_early_total{{result="{r}"}} {v}' for r, v in self.early.items()),
            *_header(
                "gateway_stt_turn_end_total",
                "counter",
                "End of turn: turns the gateway ended before audio-stop (gateway; with its own"
                " VAD also gateway_hold, gateway_ha_hold, gateway_cap, gateway_no_speech) and"
                " turns left to the"
                " client's audio-stop (client).",
            ),
            *(f'gateway_stt_turn_end_total{{by="{b}"}} {v}' for b, v in self.turn_end.items()),
            *_header(
                "gateway_stt_too_noisy_total",
                "counter",
                "Turns whose speech stood too little above the room's noise for the gateway to"
                " judge pauses: no early transcription, the end of turn left to the client's"
                " audio-stop (with its own VAD, to the hold and the cap).",
            ),
            f"gateway_stt_too_noisy_total {self.too_noisy}",
            *_header(
                "gateway_latency_seconds",
                "histogram",
                "Time to first audio (tts, tts_stream), from audio-stop to the transcript (stt),"
                " or, for a turn the gateway ended on its words, from the end of speech (the last"
                " speech frame, in audio time) to the transcript (stt_turn).",
            ),
        ]
        for kind, hist in self.latency.items():
            lines += _histogram_lines(kind, hist)
        return "\n".join(lines) + "\n"


def _live_tasks() -> int:
    """The event loop's unfinished tasks; 0 outside a running loop (the text is built in it)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


def _header(name: str, kind: str, text: str) -> tuple[str, str]:
    return f"# HELP {name} {text}", f"# TYPE {name} {kind}"


def _histogram_lines(kind: Kind, hist: Histogram) -> list[str]:
    lines = []
    cumulative = 0
    for bound, count in zip((*_BUCKETS_MS, float("inf")), hist.counts, strict=True):
        cumulative += count
        le = "+Inf" if bound == float("inf") else f"{bound / 1000:g}"
        lines.append(f'gateway_latency_seconds_bucket{{kind="{kind}",le="{le}"}} {cumulative}')
    lines.append(f'gateway_latency_seconds_sum{{kind="{kind}"}} {hist.total / 1000:.6f}')
    lines.append(f'gateway_latency_seconds_count{{kind="{kind}"}} {hist.n}')
    return lines
