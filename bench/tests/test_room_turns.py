"""voice_stack_bench/room/turns.py: real mode plays a scene through a lane's settings one after
the other, so a CPU whisper serves one setting's turn at a time (the turn itself is a stand-in
here that only counts how many run at once: nothing is timed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from voice_stack_bench.room import turns
from voice_stack_bench.room.turns import Target, play

LANE = {name: Target(port, None, True) for port, name in enumerate(("low", "medium", "high"))}


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    seen = {"now": 0, "most": 0}

    async def one(target: Target, scene: Any, backing: Any) -> dict[str, Any]:
        seen["now"] += 1
        seen["most"] = max(seen["most"], seen["now"])
        await asyncio.sleep(0)  # the others may start while this one streams
        seen["now"] -= 1
        return {"port": target.port}

    monkeypatch.setattr(turns, "_one", one)
    return seen


def test_alone_plays_one_setting_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    rows = asyncio.run(play(LANE, None, None, alone=True))  # type: ignore[arg-type]
    assert seen["most"] == 1
    assert rows == {name: {"port": t.port} for name, t in LANE.items()}


def test_by_default_the_settings_play_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    rows = asyncio.run(play(LANE, None, None))  # type: ignore[arg-type]
    assert seen["most"] == len(LANE)
    assert list(rows) == list(LANE)
