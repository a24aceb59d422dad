"""The benchmarks' own bookkeeping (percentiles, summaries, spreads), kept out of the bench
scripts so it is tested on its own: a benchmark whose arithmetic broke reports wrong figures."""

from __future__ import annotations

import statistics
from typing import Any


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "p95": round(pct(values, 0.95), 2),
        "n": len(values),
    }


def block_p95(values: list[float], size: int) -> dict[str, float]:
    """Spread of the p95 over consecutive blocks: how much one short run could have said."""
    blocks = [pct(values[i : i + size], 0.95) for i in range(0, len(values) - size + 1, size)]
    return {
        "min": round(min(blocks), 2),
        "median": round(statistics.median(blocks), 2),
        "max": round(max(blocks), 2),
        "blocks": len(blocks),
    }


def summary_with_blocks(values: list[float]) -> dict[str, Any]:
    """summary() plus the p95 spread over blocks of 10 rounds of 8 sessions."""
    return summary(values) | {"p95_by_10_rounds": block_p95(values, 80)}


def overhead(values: list[float], baseline: list[float]) -> dict[str, float]:
    """summary() of `values` less the baseline's median."""
    base = statistics.median(baseline)
    return summary([v - base for v in values])


def median_p90(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "p90": round(pct(values, 0.9), 1),
        "n": len(values),
    }
