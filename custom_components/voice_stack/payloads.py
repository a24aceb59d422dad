"""What the stack's services report, parsed into typed data (no I/O): llama-server's /props,
/slots and /metrics; the auth proxy's GET /proxy/status; the gateway's GET /health (JSON) and
GET /metrics (Prometheus text), in the formats docs/architecture.md describes; and what one poll
of each service found (LlamaData, ProxyData, GatewayData), with the rates between two polls.
"""

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


def ratio(part: float, whole: float, scale: float = 1.0) -> float | None:
    """part / whole * scale, or None when there is no whole."""
    return part / whole * scale if whole > 0 else None


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
    """Figures for the window between two scrapes, over every client of the server."""

    generation_throughput: float  # generated tokens per wall-clock second (idle time included)
    prompt_throughput: float  # prompt tokens processed per wall-clock second
    generation_speed: float | None  # tokens/s while generating; None if nothing generated
    prompt_speed: float | None  # tokens/s while processing prompts; None if no prompt
    cache_reuse: float | None  # % of prompt tokens served from the KV cache
    draft_acceptance: float | None  # % of drafted tokens accepted


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
        generation_speed=ratio(predicted, later.predicted_seconds - earlier.predicted_seconds),
        prompt_speed=ratio(prompt, later.prompt_seconds - earlier.prompt_seconds),
        cache_reuse=ratio(cached, cached + prompt, 100.0),
        draft_acceptance=ratio(later.draft_accepted - earlier.draft_accepted, drafts, 100.0),
    )


def keep_last_speeds(rates: Rates | None, last: Rates | None) -> Rates | None:
    """An idle window has no speed: keep showing the last one measured."""
    if rates is None or last is None:
        return rates

    def first(value: float | None, fallback: float | None) -> float | None:
        return value if value is not None else fallback

    return Rates(
        generation_throughput=rates.generation_throughput,
        prompt_throughput=rates.prompt_throughput,
        generation_speed=first(rates.generation_speed, last.generation_speed),
        prompt_speed=first(rates.prompt_speed, last.prompt_speed),
        cache_reuse=first(rates.cache_reuse, last.cache_reuse),
        draft_acceptance=first(rates.draft_acceptance, last.draft_acceptance),
    )


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """One entry of /slots."""

    id: int
    n_ctx: int
    is_processing: bool
    id_task: int | None  # the latest task that ran on the slot; None: none since start
    tokens: int  # tokens the latest task left in the slot (prompt + generated)


@dataclass(frozen=True, slots=True)
class SlotsSummary:
    """What /slots says about the server's parallel slots and their KV cache."""

    slots: tuple[SlotInfo, ...]

    @property
    def total(self) -> int:
        """Number of slots."""
        return len(self.slots)

    @property
    def busy(self) -> int:
        """Slots processing a request right now."""
        return sum(1 for slot in self.slots if slot.is_processing)

    @property
    def context_per_slot(self) -> int:
        """Tokens of context each slot holds."""
        return max((slot.n_ctx for slot in self.slots), default=0)

    @property
    def kv_use(self) -> float | None:
        """Share of the whole KV cache in use, in percent."""
        used = sum(slot.tokens for slot in self.slots)
        return ratio(used, sum(slot.n_ctx for slot in self.slots), 100.0)

    def slot(self, slot_id: int) -> SlotInfo | None:
        """One slot by id."""
        return next((s for s in self.slots if s.id == slot_id), None)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _slot(raw: dict[str, Any]) -> SlotInfo:
    n_ctx = _int(raw.get("n_ctx")) or 0
    steps = raw.get("next_token")
    if isinstance(steps, dict):  # older builds send one object instead of a list
        steps = [steps]
    decoded = sum(_int(s.get("n_decoded")) or 0 for s in steps or [] if isinstance(s, dict))
    prompt = _int(raw.get("n_prompt_tokens")) or 0
    return SlotInfo(
        id=_int(raw.get("id")) or 0,
        n_ctx=n_ctx,
        is_processing=bool(raw.get("is_processing")),
        id_task=_int(raw.get("id_task")),
        tokens=min(prompt + decoded, n_ctx),
    )


def parse_slots(payload: Any) -> SlotsSummary:
    """Summarise a /slots reply (a list with one object per slot)."""
    if not isinstance(payload, list) or not all(isinstance(s, dict) for s in payload):
        raise MalformedReplyError("/slots did not return a list of slots")
    return SlotsSummary(tuple(_slot(raw) for raw in payload))


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The facts /props gives about the loaded model, the build and the process."""

    model: str | None  # the alias, or the file name without .gguf
    build: str | None
    total_slots: int | None
    context_size: int | None  # per slot
    tool_calling: bool | None  # None: this build does not say
    model_path: str | None = None
    # media_marker: drawn at random at each start, but pinned by LLAMA_MEDIA_MARKER and absent
    # from builds before 2026-04, so only a change of it says anything (see observation.py)
    process: str | None = None

    @property
    def model_file(self) -> str | None:
        """The GGUF's file name without .gguf (an alias such as "local" says less)."""
        if not self.model_path:
            return self.model
        return model_name(self.model_path)

    @property
    def fingerprint(self) -> tuple[object, ...]:
        """What stays the same across restarts of one server setup (model, build, layout)."""
        return (self.model_path, self.build, self.total_slots, self.context_size)


def model_name(model: str) -> str:
    """What to show for a model: llama-server names one by its file's full path when it was
    started without --alias (/props, /v1/models); the file name without .gguf is the name."""
    return model.rsplit("/", 1)[-1].removesuffix(".gguf")


def _model_name(payload: dict[str, Any]) -> str | None:
    path = payload.get("model_alias") or payload.get("model_path")
    return model_name(str(path)) if path else None


def parse_props(payload: Any) -> ServerProps:
    """Model name, build, slot layout, tool support and process marker from /props."""
    if not isinstance(payload, dict):
        raise MalformedReplyError("/props did not return an object")
    settings = payload.get("default_generation_settings")
    caps = payload.get("chat_template_caps")
    tools = caps.get("supports_tool_calls") if isinstance(caps, dict) else None
    return ServerProps(
        model=_model_name(payload),
        build=str(payload["build_info"]) if payload.get("build_info") else None,
        total_slots=_int(payload.get("total_slots")),
        context_size=_int(settings.get("n_ctx")) if isinstance(settings, dict) else None,
        tool_calling=tools if isinstance(tools, bool) else None,
        model_path=str(payload["model_path"]) if payload.get("model_path") else None,
        process=str(payload["media_marker"]) if payload.get("media_marker") else None,
    )


@dataclass(frozen=True, slots=True)
class LlamaData:
    """What one poll of llama-server found."""

    loading: bool
    latency_ms: float
    props: ServerProps | None = None
    slots: SlotsSummary | None = None
    counters: Counters | None = None
    rates: Rates | None = None
    requests_processing: int | None = None
    requests_deferred: int | None = None
    metrics_enabled: bool = True
    slots_enabled: bool = True
    polled_at: float = 0.0  # monotonic time /slots was asked for
    # /metrics' Process-Start-Time-Unix header: the server's monotonic clock when it started (in
    # microseconds, not a Unix time), the same for the life of one process
    started: str | None = None

    @property
    def total_slots(self) -> int | None:
        """Slot count of the server (-np), once known."""
        if self.slots is not None:
            return self.slots.total
        return self.props.total_slots if self.props else None


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
