"""The arithmetic over the usage readings, kept apart from the servers so that it is tested on
its own: each process's growth once settled (RSS by the level it holds, counts by their floors)
and the error events the gateway sent between two readings."""

from __future__ import annotations

import statistics
from typing import Any

from voice_stack_dev.demo.services import Role

from .state import overlaps

SETTLE_S = 120.0  # a process's first minutes: its start-up, not growth
MIN_SAMPLES = 6  # after settling, to judge a process's growth
COUNTS = ("fds", "sockets", "to_stack", "tasks", "our_tasks")  # what a leak makes grow

type Readings = list[tuple[float, dict[str, Any]]]  # one process's (t, reading) under load


def growth(usage: list[dict[str, Any]], role: Role, since: float) -> list[dict[str, Any]]:
    """RSS, descriptors and tasks of each of the service's processes (a restart starts a new
    one) from `since` on, each from SETTLE_S after it started. RSS: the median of the first
    tenth of its samples under load (at least three; five minutes of a 50-minute watch) against
    that of the last tenth: the level it holds, not the swing of a request in flight (one long
    synthesis moves the speech server's by 100 MB). Counts: the floor (fewest) of the first
    third of the samples under load against the fewest of the readings at rest after the load
    (`at_rest`), or against the floor of the last third without them (floors)."""
    lives, rest = _by_process(usage, role)
    out = []
    for pid, life in lives.items():
        began = life[0][0]
        rows = [(t, u) for t, u in life if t >= max(since, began + SETTLE_S)]
        if len(rows) >= 2:
            out.append(_levels(pid, rows, rest.get(pid)))
    return out


def _by_process(
    usage: list[dict[str, Any]], role: Role
) -> tuple[dict[int, Readings], dict[int, dict[str, int]]]:
    """The service's readings under load by process, and the fewest of each count (and of RSS)
    each process showed at rest."""
    lives: dict[int, Readings] = {}
    rest: dict[int, dict[str, int]] = {}
    for row in usage:
        if (u := row.get(role.value)) is not None:
            if row.get("at_rest"):
                least = rest.setdefault(u["pids"][0], {})
                for key in (*COUNTS, "rss_kb"):
                    if isinstance(u.get(key), int):
                        least[key] = min(least.get(key, u[key]), u[key])
            else:
                lives.setdefault(u["pids"][0], []).append((row["t"], u))
    return lives, rest


def _levels(pid: int, rows: Readings, at_rest: dict[str, int] | None) -> dict[str, Any]:
    """One process's RSS and counts at the start and the end of its judged readings."""
    rss = [u["rss_kb"] for _, u in rows]
    tenth = max(3, len(rss) // 10)
    rss0, rss1 = statistics.median(rss[:tenth]), statistics.median(rss[-tenth:])
    counts = {key: floors([u.get(key) for _, u in rows], (at_rest or {}).get(key))
              for key in COUNTS if any(u.get(key) is not None for _, u in rows)}  # fmt: skip
    return {
        "pid": pid, "samples": len(rows), "from_s": rows[0][0], "to_s": rows[-1][0],
        "rss_mb": [round(rss0 / 1024, 1), round(rss1 / 1024, 1)],
        "rss_growth_pct": round(100 * (rss1 - rss0) / rss0, 2) if rss0 else None,
        "max_rss_mb": round(max(rss) / 1024, 1), "counts_at_rest": at_rest is not None,
        # reported, not judged: what the process holds with no request in flight
        "rss_at_rest_mb": round(at_rest["rss_kb"] / 1024, 1) if at_rest is not None else None,
        **counts,
    }  # fmt: skip


def floors(values: list[int | None], at_rest: int | None = None) -> list[int]:
    """The fewest of the first third of the readings against the reading at rest, or without
    one the fewest of the last third. What leaks is held in every later reading and at rest, so
    it lifts both; requests in flight lift only some readings, more of them as the machine slows
    down (a median of thirds rose by one or two in runs whose load grew, with nothing held), and
    a pool's idle connections, which a steady load keeps open, are closed at rest."""
    known = [v for v in values if v is not None]
    third = max(1, len(known) // 3)
    return [min(known[:third]), at_rest if at_rest is not None else min(known[-third:])]


def judged(lives: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes watched long enough to judge (MIN_SAMPLES after settling)."""
    return [life for life in lives if life["samples"] >= MIN_SAMPLES]


def gateway_errors(usage: list[dict[str, Any]], windows: list[tuple[float, float]]
                   ) -> list[dict[str, Any]]:  # fmt: skip
    """The error events the gateway sent its clients, from its counters between two samples
    (each gateway process counts from its start): when, what, how many, and whether the span
    overlapped a fault window. A client may not show these as a failed request: a reply whose
    later sentence timed out ends early after its first audio."""
    out: list[dict[str, Any]] = []
    last: dict[int, tuple[float, dict[str, int]]] = {}
    previous = 0.0  # a new process's errors happened since the sample before its first
    for row in usage:
        gateway, t = row.get(Role.GATEWAY.value), row["t"]
        if gateway is None or gateway.get("errors") is None:
            previous = t
            continue
        pid = gateway["pids"][0]
        since, before = last.get(pid, (previous, {}))
        previous = t
        for what, n in sorted(gateway["errors"].items()):
            if (count := n - before.get(what, 0)) > 0:
                out.append({"t": t, "since_t": since, "error": what, "count": count,
                            "in_window": overlaps(since, t, windows)})  # fmt: skip
        last[pid] = (t, gateway["errors"])
    return out
