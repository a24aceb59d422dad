"""The soak's one JSON document, built part by part from the run's record and its findings: the
set-up, the requests and faults, the readings and their levels, the recorder's rows, the goals.
tests/e2e/test_soak.py and the figures in docs/benchmarks.md read its keys."""

from __future__ import annotations

import argparse
import os
import statistics
from collections import Counter
from dataclasses import asdict
from typing import Any

from voice_stack_dev.demo.services import CACHE_RAM_MIB, RESERVED_SLOTS, Role
from voice_stack_dev.procs import jemalloc_env

from .faults import PROXY_DOWN_S
from .goals import Findings, Lives, findings, goals
from .recorder import rows_report
from .state import GRACE_S, Fault, Request, Soak
from .usage import judged


def report(soak: Soak, kinds: dict[str, Counter[str]], args: argparse.Namespace) -> dict[str, Any]:
    """The whole document (`kinds`: the recorder's rows, `args`: the command line)."""
    seen = findings(soak)
    return {
        "setup": _setup(soak, args),
        "elapsed_s": round(seen.span, 1),
        "requests": _request_counts(soak.requests, seen),
        "errors": [asdict(r) for r in seen.errors],
        "gateway_errors": seen.sent,
        "faults": [_fault(f) for f in soak.faults],
        "fault_counts": seen.counts,
        "first_after_back": seen.after,
        "first_audio_by_quarter": latency_by_quarter(soak.requests, seen.span),
        "usage_last_5_6": seen.usage,
        "usage_samples": soak.usage,
        "voice_slot_evictions_by_browsers": len(seen.evicted),
        "warm_up_s_after_llama_restart": seen.warm,
        "prime_s_after_llama_restart": seen.primed,
        "llama_cache_ram_mib": CACHE_RAM_MIB,
        "primes_s": soak.primes,
        "primes_while_nothing_restarted_s": seen.stray,
        "recorder_rows": rows_report(kinds, seen.span),
        "asyncio_tasks": _asyncio_tasks(seen.usage),
        "goals": goals(soak, seen, kinds),
        "load_average_end": os.getloadavg(),
    }


def _setup(soak: Soak, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "minutes": args.minutes,
        "rounds": args.rounds,
        "fault_minutes": args.fault_minutes,
        "gap_s": args.gap,
        "browser_gap_s": args.browser_gap,
        "grace_s": GRACE_S,
        "proxy_down_s": PROXY_DOWN_S,
        "reserved_slots": list(RESERVED_SLOTS),
        "cpus": os.cpu_count(),
        "logs": str(soak.servers.logs),
        # HA and the speech server preload jemalloc, as HA's own image runs HA
        "jemalloc_for_hass_and_speech": bool(jemalloc_env()),
    }


def _request_counts(requests: list[Request], seen: Findings) -> dict[str, int]:
    return {
        "total": len(requests),
        "errors": len(seen.errors),
        "errors_outside_windows": len(seen.outside),
        "gateway_errors_sent": sum(e["count"] for e in seen.sent),
        "gateway_errors_sent_outside_windows": sum(
            e["count"] for e in seen.sent if not e["in_window"]
        ),
        "voice_turns": sum(r.client.startswith("satellite") for r in requests),
        "browser_requests": sum(r.client.startswith("browser") for r in requests),
    }


def _fault(fault: Fault) -> dict[str, Any]:
    return {**asdict(fault), "window": [round(x, 1) for x in fault.window()]}


def latency_by_quarter(requests: list[Request], span: float) -> list[dict[str, Any]]:
    """End of speech -> first reply audio of the answered voice turns, by quarter of the run."""
    quarters = []
    for q in range(4):
        lo, hi = span * q / 4, span * (q + 1) / 4
        ms = [
            r.first_audio_ms
            for r in requests
            if r.first_audio_ms is not None and lo <= r.start < hi
        ]
        quarters.append({
            "quarter": q + 1, "turns": len(ms),
            "median_ms": round(statistics.median(ms), 1) if ms else None,
            "p95_ms": round(statistics.quantiles(ms, n=20)[-1], 1) if len(ms) >= 2 else None,
        })  # fmt: skip
    return quarters


def _asyncio_tasks(usage: dict[str, Lives]) -> dict[str, list[dict[str, Any]]]:
    """HA's and the gateway's task counts, by judged process."""
    return {
        role.value: [
            {k: life.get(k) for k in ("pid", "tasks", "our_tasks")}
            for life in judged(usage[role.value])
        ]
        for role in (Role.HASS, Role.GATEWAY)
    }
