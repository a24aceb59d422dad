"""What the auth proxy and the gateway report, parsed into typed data (no I/O).

The formats are the ones docs/architecture.md describes: the proxy's GET /proxy/status, the
gateway's GET /health (JSON) and GET /metrics (Prometheus text).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from .llama_data import MalformedReplyError, ratio

type BackendStatus = Literal["ok", "down", "unknown"]
type KeyScope = Literal["agent", "general", "none"]

# The gateway's latency histograms: stt = audio-stop to transcript; tts and tts_stream = request
# (or first streamed sentence) to first audio. Home Assistant's pipeline streams, so both count.
STT_KIND: Final = "stt"
TTS_KIND: Final = "tts"
TTS_STREAM_KIND: Final = "tts_stream"
_LATENCY: Final = "gateway_latency_seconds"


@dataclass(frozen=True, slots=True)
class ProxyStatus:
    """The Voice Stack auth proxy's GET /proxy/status."""

    service: str
    reserved_slots: tuple[int, ...]
    total_slots: int | None
    scoped_keys: bool | None  # an agent key of its own is configured (None: older proxy)
    key_scope: KeyScope | None  # what the key Voice Stack sends counts as there


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_proxy_status(payload: Any) -> ProxyStatus | None:
    """The status, or None when the reply is not the Voice Stack proxy's."""
    if not isinstance(payload, dict) or not isinstance(payload.get("reserved_slots"), list):
        return None
    total = payload.get("total_slots")
    scoped = payload.get("scoped_keys")
    scope = payload.get("key_scope")
    return ProxyStatus(
        service=str(payload.get("service") or "unknown"),
        reserved_slots=tuple(s for s in payload["reserved_slots"] if isinstance(s, int)),
        total_slots=total if isinstance(total, int) else None,
        scoped_keys=scoped if isinstance(scoped, bool) else None,
        key_scope=scope if scope in ("agent", "general", "none") else None,
    )


@dataclass(frozen=True, slots=True)
class ProxyData:
    """What one poll of the auth proxy found."""

    latency_ms: float
    status: ProxyStatus | None  # None: not the Voice Stack proxy (e.g. llama-server itself)
    open_without_key: bool | None  # None: could not tell (unexpected status)
    open_with_wrong_key: bool | None

    @property
    def lets_requests_through(self) -> bool:
        """True when a request without the right key reached the server."""
        return bool(self.open_without_key or self.open_with_wrong_key)


@dataclass(frozen=True, slots=True)
class BackendHealth:
    """One speech backend as the gateway's own probe sees it."""

    url: str | None
    status: BackendStatus
    last_success: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    latency_ms: float | None
    models: tuple[str, ...]
    voices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GatewayHealth:
    """The gateway's GET /health reply."""

    status: str
    version: str | None
    uptime_s: float | None
    active_sessions: int | None
    asr: BackendHealth | None
    tts: BackendHealth | None

    def backend(self, kind: str) -> BackendHealth | None:
        """The ASR ("asr") or TTS ("tts") part of the report."""
        return self.asr if kind == "asr" else self.tts


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _backend(payload: Any) -> BackendHealth | None:
    if not isinstance(payload, dict):
        return None
    status = payload.get("status")
    return BackendHealth(
        url=payload.get("url") if isinstance(payload.get("url"), str) else None,
        status=status if status in ("ok", "down") else "unknown",
        last_success=_time(payload.get("last_success")),
        last_error=str(payload["last_error"]) if payload.get("last_error") else None,
        last_error_at=_time(payload.get("last_error_at")),
        latency_ms=_number(payload.get("latency_ms")),
        models=_names(payload.get("models")),
        voices=_names(payload.get("voices")),
    )


def parse_gateway_health(payload: Any) -> GatewayHealth:
    """Parse the gateway /health JSON, tolerating missing optional fields."""
    if not isinstance(payload, dict) or "status" not in payload:
        raise MalformedReplyError("gateway /health did not return the expected object")
    raw_backends = payload.get("backends")
    backends: dict[str, Any] = raw_backends if isinstance(raw_backends, dict) else {}
    sessions = _number(payload.get("active_sessions"))
    return GatewayHealth(
        status=str(payload["status"]),
        version=str(payload["version"]) if payload.get("version") else None,
        uptime_s=_number(payload.get("uptime_s")),
        active_sessions=int(sessions) if sessions is not None else None,
        asr=_backend(backends.get("asr")),
        tts=_backend(backends.get("tts")),
    )


@dataclass(frozen=True, slots=True)
class LatencyTotals:
    """A gateway latency histogram's running totals for one kind of request."""

    seconds: float
    count: float


def latency_totals(samples: dict[str, float], *kinds: str) -> LatencyTotals | None:
    """The summed _sum and _count of these kinds in parsed /metrics samples; None when absent."""
    found = [
        LatencyTotals(total, count)
        for kind in kinds
        if (total := samples.get(f'{_LATENCY}_sum{{kind="{kind}"}}')) is not None
        and (count := samples.get(f'{_LATENCY}_count{{kind="{kind}"}}')) is not None
    ]
    if not found:
        return None
    return LatencyTotals(sum(t.seconds for t in found), sum(t.count for t in found))


def mean_ms(later: LatencyTotals | None, earlier: LatencyTotals | None) -> float | None:
    """Mean latency of the requests between two scrapes (all so far without an earlier one).

    None when no request came in between, or when the gateway restarted (totals went back).
    """
    if later is None:
        return None
    if earlier is None or later.count < earlier.count:
        earlier = LatencyTotals(0.0, 0.0)
    return ratio(later.seconds - earlier.seconds, later.count - earlier.count, 1000.0)


@dataclass(frozen=True, slots=True)
class GatewayData:
    """What one poll of the gateway found: its health and the real speech requests' times."""

    health: GatewayHealth
    stt_ms: float | None  # mean time from end of speech (audio-stop) to the transcript
    tts_ms: float | None  # mean time from a synthesis request to its first audio
    totals: dict[str, LatencyTotals]
