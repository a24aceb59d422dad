"""voice_stack_bench.stats: the benchmarks' arithmetic."""

from __future__ import annotations

from voice_stack_bench.stats import block_p95, median_p90, overhead, pct, summary


def test_percentiles_and_summaries() -> None:
    values = [float(v) for v in range(1, 101)]
    assert pct(values, 0.5) == 51.0  # nearest rank
    assert pct(values, 0.95) == 95.0
    assert summary(values) == {"median": 50.5, "p95": 95.0, "n": 100}
    assert median_p90(values) == {"median": 50.5, "p90": 90.0, "n": 100}
    assert overhead([12.0, 14.0], [10.0, 10.0, 11.0]) == {"median": 3.0, "p95": 4.0, "n": 2}


def test_block_p95_spread() -> None:
    values = [1.0] * 80 + [2.0] * 70 + [9.0] * 10 + [100.0] * 5  # a partial block is left out
    assert block_p95(values, 80) == {"min": 1.0, "median": 5.0, "max": 9.0, "blocks": 2}
