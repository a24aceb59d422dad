"""Per-reply llama-server timings (from the final chunk of a reply), shared with the sensors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .const import DOMAIN


def signal_timings(entry_id: str) -> str:
    """Return the dispatcher signal carrying (subentry_id, Timings)."""
    return f"{DOMAIN}_timings_{entry_id}"


@dataclass(frozen=True, slots=True)
class Timings:
    """What llama-server reported about one reply."""

    slot: int
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    prompt_per_second: float | None
    generation_per_second: float | None
    time_to_first_token_ms: float | None
    draft_tokens: int | None
    draft_accepted: int | None
    received_at: datetime

    @property
    def cache_reuse(self) -> float | None:
        """Percent of the prompt served from the slot's KV cache."""
        total = self.cached_tokens + self.prompt_tokens
        if total == 0:
            return None
        return 100.0 * self.cached_tokens / total

    @property
    def draft_acceptance(self) -> float | None:
        """Percent of drafted tokens accepted (speculative decoding / MTP)."""
        if not self.draft_tokens or self.draft_accepted is None:
            return None
        return 100.0 * self.draft_accepted / self.draft_tokens

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly view (traces, diagnostics)."""
        return {
            "slot": self.slot,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "generated_tokens": self.generated_tokens,
            "prompt_per_second": self.prompt_per_second,
            "generation_per_second": self.generation_per_second,
            "time_to_first_token_ms": self.time_to_first_token_ms,
            "draft_tokens": self.draft_tokens,
            "draft_accepted": self.draft_accepted,
            "cache_reuse": self.cache_reuse,
            "draft_acceptance": self.draft_acceptance,
            "received_at": self.received_at.isoformat(),
        }


def _int(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return int(value) if isinstance(value, (int, float)) else None


def _float(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def parse_timings(
    raw: dict[str, Any],
    *,
    slot: int,
    time_to_first_token_ms: float | None,
    received_at: datetime,
) -> Timings:
    """Build Timings from llama-server's `timings` object (missing keys tolerated)."""
    return Timings(
        slot=slot,
        prompt_tokens=_int(raw, "prompt_n") or 0,
        cached_tokens=_int(raw, "cache_n") or 0,
        generated_tokens=_int(raw, "predicted_n") or 0,
        prompt_per_second=_float(raw, "prompt_per_second"),
        generation_per_second=_float(raw, "predicted_per_second"),
        time_to_first_token_ms=time_to_first_token_ms,
        draft_tokens=_int(raw, "draft_n"),
        draft_accepted=_int(raw, "draft_n_accepted"),
        received_at=received_at,
    )
