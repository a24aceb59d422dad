"""Per-reply timings: the percentages and their JSON view."""

from __future__ import annotations

from datetime import UTC, datetime

from custom_components.voice_stack.timings import Timings, parse_timings


def test_timings_properties() -> None:
    """Percentages: None without data."""
    now = datetime(2026, 11, 30, tzinfo=UTC)
    t = parse_timings(
        {"cache_n": 3, "prompt_n": 1, "draft_n": 4, "draft_n_accepted": 3},
        slot=0,
        time_to_first_token_ms=None,
        received_at=now,
    )
    assert t.cache_reuse == 75
    assert t.draft_acceptance == 75
    empty = Timings(0, 0, 0, 0, None, None, None, None, None, now)
    assert empty.cache_reuse is None
    assert empty.draft_acceptance is None
    assert empty.as_dict()["received_at"] == now.isoformat()
