"""Process-wide counters for /health (JSON, contract 2) and /metrics (Prometheus text)."""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .config import public_url

_BUCKETS_MS = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)


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
    status: str = "unknown"
    last_success: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    latency_ms: float | None = None
    models: list[str] = field(default_factory=list)
    voices: list[str] | None = None

    def record(self, ok: bool | None, latency_ms: float | None, error: str | None) -> None:
        """ok: a success; False: a failure that marks the backend down; None: a refused
        request (the error is kept, the status is not changed)."""
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
    """Requests, errors, latency histograms and active sessions."""

    def __init__(self, asr_url: str, tts_url: str) -> None:
        self.started = time.monotonic()
        self.active_sessions = 0
        self.requests: defaultdict[str, int] = defaultdict(int)  # by kind: stt, tts, tts_stream
        self.errors: defaultdict[tuple[str, str], int] = defaultdict(int)  # (kind, code)
        self.latency: defaultdict[str, Histogram] = defaultdict(Histogram)  # first result/audio
        self.backends = {  # URLs as shown: no credentials
            "asr": BackendState(public_url(asr_url)),
            "tts": BackendState(public_url(tts_url), voices=[]),
        }

    def error(self, kind: str, code: str) -> None:
        self.errors[(kind, code)] += 1

    def health(self, version: str) -> dict[str, object]:
        down = any(b.status == "down" for b in self.backends.values())
        return {
            "status": "degraded" if down else "ok",
            "version": version,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "active_sessions": self.active_sessions,
            "backends": {name: b.as_dict() for name, b in self.backends.items()},
        }

    def prometheus(self) -> str:
        lines = [
            "# HELP gateway_active_sessions Open Wyoming connections.",
            "# TYPE gateway_active_sessions gauge",
            f"gateway_active_sessions {self.active_sessions}",
            "# HELP gateway_uptime_seconds Seconds since start.",
            "# TYPE gateway_uptime_seconds gauge",
            f"gateway_uptime_seconds {time.monotonic() - self.started:.1f}",
            "# HELP gateway_requests_total Requests by kind.",
            "# TYPE gateway_requests_total counter",
        ]
        lines += [
            f'gateway_requests_total{{kind="{k}"}} {v}' for k, v in sorted(self.requests.items())
        ]
        lines += [
            "# HELP gateway_errors_total Error events sent, by kind and code.",
            "# TYPE gateway_errors_total counter",
        ]
        lines += [
            f'gateway_errors_total{{kind="{k}",code="{c}"}} {v}'
            for (k, c), v in sorted(self.errors.items())
        ]
        lines += [
            "# HELP gateway_backend_up 1 if the backend's last probe or request succeeded.",
            "# TYPE gateway_backend_up gauge",
        ]
        lines += [
            f'gateway_backend_up{{backend="{n}"}} {1 if b.status == "ok" else 0}'
            for n, b in self.backends.items()
        ]
        lines += [
            "# HELP gateway_latency_seconds Time to first audio (tts) or transcript (stt).",
            "# TYPE gateway_latency_seconds histogram",
        ]
        for kind, hist in sorted(self.latency.items()):
            cumulative = 0
            for bound, count in zip((*_BUCKETS_MS, float("inf")), hist.counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else f"{bound / 1000:g}"
                lines.append(
                    f'gateway_latency_seconds_bucket{{kind="{kind}",le="{le}"}} {cumulative}'
                )
            lines.append(f'gateway_latency_seconds_sum{{kind="{kind}"}} {hist.total / 1000:.6f}')
            lines.append(f'gateway_latency_seconds_count{{kind="{kind}"}} {hist.n}')
        return "\n".join(lines) + "\n"
