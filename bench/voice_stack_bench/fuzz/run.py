"""One fuzzing run: the witness alone (the idle figures), then the same witness during the attack;
the gateway's memory sampled throughout; the report."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voice_stack_bench.stats import median_p90
from voice_stack_dev.procs import rss_mb

from .attack import Outcome, Target, run_case
from .cases import Case
from .witness import Seen, witness

AT_ONCE = 8  # bad clients' cases run this many at a time


@dataclass(frozen=True)
class Gateway:
    target: Target
    pid: int
    log: Path  # its log file: the lines a bad client made it write are counted there


async def _sample(pid: int, stop: asyncio.Event, into: list[float]) -> None:
    while not stop.is_set():
        into.append(rss_mb(pid))
        await asyncio.sleep(0.1)


async def _watched(gw: Gateway, work: Any) -> tuple[Any, Seen, list[float]]:
    """`work` run with the witness and the memory sampler beside it."""
    stop, seen, rss = asyncio.Event(), Seen(), [rss_mb(gw.pid)]
    beside = asyncio.gather(witness(gw.target.port, stop, seen), _sample(gw.pid, stop, rss))
    try:
        result = await work
    finally:
        stop.set()
        await beside
    return result, seen, rss


async def _attack(gw: Gateway, cases: list[Case]) -> dict[str, Outcome]:
    slots = asyncio.Semaphore(AT_ONCE)

    async def one(case: Case) -> tuple[str, Outcome]:
        async with slots:
            return case.name, await run_case(gw.target, case)

    return dict(await asyncio.gather(*(one(case) for case in cases)))


def _figures(seen: Seen) -> dict[str, Any]:
    return {
        "stt_ms": median_p90(seen.stt_ms) if seen.stt_ms else None,
        "tts_first_audio_ms": median_p90(seen.tts_ms) if seen.tts_ms else None,
        "ping_ms": median_p90(seen.ping_ms) if seen.ping_ms else None,
        "worst_ping_ms": round(max(seen.ping_ms), 1) if seen.ping_ms else None,
        "failures": seen.failures,
    }


def _ratio(attack: dict[str, Any], idle: dict[str, Any], key: str) -> float | None:
    if attack[key] is None or idle[key] is None:
        return None
    return round(float(attack[key]["median"]) / float(idle[key]["median"]), 2)


async def fuzz(gw: Gateway, cases: list[Case], idle_seconds: float) -> dict[str, Any]:
    _, idle_seen, _ = await _watched(gw, asyncio.sleep(idle_seconds))
    log_before = _lines(gw.log)
    outcomes, seen, rss = await _watched(gw, _attack(gw, cases))
    log_lines = _lines(gw.log) - log_before
    idle, attack = _figures(idle_seen), _figures(seen)
    bad_clients = sum(case.connections for case in cases)
    codes: Counter[str] = Counter()
    for outcome in outcomes.values():
        codes.update(outcome.codes)
    return {
        "cases": len(cases),
        "bad_clients": bad_clients,
        "by_group": dict(Counter(case.group for case in cases)),
        "answered": dict(sorted(codes.items())),
        "closed_by_gateway": sum(o.closed for o in outcomes.values()),
        "left_hanging": sorted(name for name, o in outcomes.items() if o.gave_up),
        "refused": sum(o.refused for o in outcomes.values()),
        "witness": {
            "idle": idle,
            "attack": attack,
            "ratio": {k: _ratio(attack, idle, k) for k in ("stt_ms", "tts_first_audio_ms")},
        },
        "worst_event_loop_stall_ms": attack["worst_ping_ms"],
        "rss_mb": {"before": rss[0], "peak": max(rss), "after": rss_mb(gw.pid)},
        "log_lines": {
            "written": log_lines,
            "per_bad_client": round(log_lines / bad_clients, 2),
        },
        "per_case": {
            name: {"answered": dict(o.codes), "closed": o.closed, "gave_up": o.gave_up}
            for name, o in sorted(outcomes.items())
        },
    }


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)
