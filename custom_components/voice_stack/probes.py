"""Pure parsers for what the polled services return (no I/O, so they test in isolation)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

# llama-server /metrics counters (monotonic); its gauges reset on every scrape, so rates are
# computed here from counter deltas instead.
PROMPT_TOKENS: Final = "llamacpp:prompt_tokens_total"
PROMPT_TOKENS_CACHED: Final = "llamacpp:prompt_tokens_cached_total"
PROMPT_SECONDS: Final = "llamacpp:prompt_seconds_total"
PREDICTED_TOKENS: Final = "llamacpp:tokens_predicted_total"
PREDICTED_SECONDS: Final = "llamacpp:tokens_predicted_seconds_total"
DRAFT_TOKENS: Final = "llamacpp:spec_decode_num_draft_tokens_total"
DRAFT_ACCEPTED: Final = "llamacpp:spec_decode_num_accepted_tokens_total"
REQUESTS_PROCESSING: Final = "llamacpp:requests_processing"
REQUESTS_DEFERRED: Final = "llamacpp:requests_deferred"

type BackendStatus = Literal["ok", "down", "unknown"]


class MalformedReplyError(ValueError):
    """A service answered, but not with what its API promises."""


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of a Prometheus text exposition, keyed by name (with its labels, if any)."""
    samples: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        # `name value [timestamp]` or `name{labels} value [timestamp]`
        cut = line.rindex("}") + 1 if "}" in line else line.find(" ")
        if cut <= 0:
            continue
        try:
            samples[line[:cut].strip()] = float(line[cut:].split()[0])
        except ValueError, IndexError:
            continue
    return samples


@dataclass(frozen=True, slots=True)
class Counters:
    """One scrape of the counters that rates are computed from."""

    at: float  # monotonic seconds of the scrape
    prompt_tokens: float
    prompt_cached: float
    prompt_seconds: float
    predicted_tokens: float
    predicted_seconds: float
    draft_tokens: float
    draft_accepted: float

    @classmethod
    def from_samples(cls, samples: dict[str, float], at: float) -> Counters:
        """Read the counters out of parsed /metrics samples (missing ones count as 0)."""
        return cls(
            at=at,
            prompt_tokens=samples.get(PROMPT_TOKENS, 0.0),
            prompt_cached=samples.get(PROMPT_TOKENS_CACHED, 0.0),
            prompt_seconds=samples.get(PROMPT_SECONDS, 0.0),
            predicted_tokens=samples.get(PREDICTED_TOKENS, 0.0),
            predicted_seconds=samples.get(PREDICTED_SECONDS, 0.0),
            draft_tokens=samples.get(DRAFT_TOKENS, 0.0),
            draft_accepted=samples.get(DRAFT_ACCEPTED, 0.0),
        )

    def went_back(self, earlier: Counters) -> bool:
        """True when a counter decreased, i.e. the server restarted between scrapes."""
        return (
            self.prompt_tokens < earlier.prompt_tokens
            or self.predicted_tokens < earlier.predicted_tokens
            or self.prompt_cached < earlier.prompt_cached
        )


@dataclass(frozen=True, slots=True)
class Rates:
    """Figures for the window between two scrapes."""

    generation_throughput: float  # generated tokens per wall-clock second
    prompt_throughput: float  # prompt tokens processed per wall-clock second
    generation_speed: float | None  # tokens/s while generating; None if nothing generated
    prompt_speed: float | None  # tokens/s while processing prompts; None if no prompt
    cache_reuse: float | None  # % of prompt tokens served from the KV cache
    draft_acceptance: float | None  # % of drafted tokens accepted


def _ratio(part: float, whole: float, scale: float = 1.0) -> float | None:
    return part / whole * scale if whole > 0 else None


def compute_rates(earlier: Counters, later: Counters) -> Rates | None:
    """Rates between two scrapes; None when they cannot be compared (restart, no time)."""
    elapsed = later.at - earlier.at
    if elapsed <= 0 or later.went_back(earlier):
        return None
    prompt = later.prompt_tokens - earlier.prompt_tokens
    cached = later.prompt_cached - earlier.prompt_cached
    predicted = later.predicted_tokens - earlier.predicted_tokens
    drafts = later.draft_tokens - earlier.draft_tokens
    return Rates(
        generation_throughput=predicted / elapsed,
        prompt_throughput=prompt / elapsed,
        generation_speed=_ratio(predicted, later.predicted_seconds - earlier.predicted_seconds),
        prompt_speed=_ratio(prompt, later.prompt_seconds - earlier.prompt_seconds),
        cache_reuse=_ratio(cached, cached + prompt, 100.0),
        draft_acceptance=_ratio(later.draft_accepted - earlier.draft_accepted, drafts, 100.0),
    )


@dataclass(frozen=True, slots=True)
class SlotsSummary:
    """What /slots says about the server's parallel slots and their KV cache."""

    total: int
    busy: int
    context_per_slot: int
    kv_used_tokens: int  # tokens held by each slot's latest task (prompt + generated)

    @property
    def kv_use(self) -> float | None:
        """Share of the whole KV cache in use, in percent."""
        return _ratio(self.kv_used_tokens, self.total * self.context_per_slot, 100.0)


def _slot_tokens(slot: dict[str, Any]) -> int:
    prompt = int(slot.get("n_prompt_tokens") or 0)
    steps = slot.get("next_token")
    if isinstance(steps, dict):  # older builds send one object instead of a list
        steps = [steps]
    decoded = sum(int(step.get("n_decoded") or 0) for step in steps or [] if isinstance(step, dict))
    return min(prompt + decoded, int(slot.get("n_ctx") or 0))


def parse_slots(payload: Any) -> SlotsSummary:
    """Summarise a /slots reply (a list with one object per slot)."""
    if not isinstance(payload, list) or not all(isinstance(s, dict) for s in payload):
        raise MalformedReplyError("/slots did not return a list of slots")
    return SlotsSummary(
        total=len(payload),
        busy=sum(1 for slot in payload if slot.get("is_processing")),
        context_per_slot=max((int(slot.get("n_ctx") or 0) for slot in payload), default=0),
        kv_used_tokens=sum(_slot_tokens(slot) for slot in payload),
    )


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The stable facts /props gives about the loaded model and build."""

    model: str | None
    build: str | None
    total_slots: int | None
    context_size: int | None


def parse_props(payload: Any) -> ServerProps:
    """Model name (file name without .gguf), build and slot count from /props."""
    if not isinstance(payload, dict):
        raise MalformedReplyError("/props did not return an object")
    path = payload.get("model_alias") or payload.get("model_path")
    model = str(path).rsplit("/", 1)[-1].removesuffix(".gguf") if path else None
    settings = payload.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    slots = payload.get("total_slots")
    return ServerProps(
        model=model,
        build=str(payload["build_info"]) if payload.get("build_info") else None,
        total_slots=int(slots) if isinstance(slots, int) else None,
        context_size=int(n_ctx) if isinstance(n_ctx, int) else None,
    )


@dataclass(frozen=True, slots=True)
class BackendHealth:
    """One speech backend as the gateway's own probe sees it (contract 2)."""

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


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
