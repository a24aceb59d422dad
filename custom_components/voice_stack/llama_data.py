"""What llama-server reports (/props, /slots, /metrics), parsed into typed data (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

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
