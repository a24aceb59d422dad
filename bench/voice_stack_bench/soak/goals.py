"""The soak's judgement: what the run's record shows (its errors against the fault windows, the
first requests after each fault, evictions, warm-ups, stray primes, each process's growth), found
once, and the goals judged from it; the report states both."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from voice_stack_dev.demo.services import CACHE_RAM_MIB, RESERVED_SLOTS, Role

from .faults import FAULTS
from .primes import primed_after
from .recorder import rows_are_value_changes
from .state import GRACE_S, WATCHED, Fault, Request, Soak, overlaps
from .usage import COUNTS, gateway_errors, growth, judged

POLL_S = 15.0  # the integration's coordinator poll

type Lives = list[dict[str, Any]]  # one service's processes, as growth() finds them


@dataclass
class Findings:
    span: float  # s since the run began
    errors: list[Request]  # every failed request, marked in or out of a fault window
    outside: list[Request]  # those out of every window
    sent: list[dict[str, Any]]  # the error events the gateway sent
    usage: dict[str, Lives]  # by service, over the run's last five sixths
    after: list[dict[str, Any]]  # each fault's first requests once its service was back
    evicted: list[Request]  # browser requests served on a reserved slot
    warm: list[float | None]  # after each llama_kill: until the slot's first task
    primed: list[float | None]  # after each llama_kill: until the warm-up's prime
    stray: list[float]  # primes while nothing restarted
    counts: dict[str, int]  # how often each fault happened


def findings(soak: Soak) -> Findings:
    """What the run's record shows, found once; marks every request in or out of a window."""
    span = soak.now()
    windows = [f.window() for f in soak.faults]
    for r in soak.requests:
        r.in_window = overlaps(r.start, r.end, windows)
    errors = [r for r in soak.requests if not r.ok]
    browsers = [r for r in soak.requests if r.client.startswith("browser") and r.ok]
    kills = [f for f in soak.faults if f.name == "llama_kill"]
    return Findings(
        span=span,
        errors=errors,
        outside=[r for r in errors if not r.in_window],
        sent=gateway_errors(soak.usage, windows),
        usage={role.value: growth(soak.usage, role, span / 6) for role in WATCHED},
        after=_first_after_back(soak),
        evicted=[r for r in browsers if r.slot in RESERVED_SLOTS],
        warm=[f.first_task_s for f in kills],  # the prime or a voice turn, whichever came first
        primed=[primed_after(soak.primes, f) for f in kills],
        stray=_stray_primes(soak),
        counts={name: sum(f.name == name for f in soak.faults) for name in FAULTS},
    )


def goals(soak: Soak, seen: Findings, kinds: dict[str, Counter[str]]) -> dict[str, Any]:
    """Each goal, met (True) or not, or None where too little was watched to judge."""
    return {
        "every_fault_happened": all(seen.counts.values()) and not any(f.error for f in soak.faults),
        "no_error_outside_a_fault_window": not seen.outside,
        "no_gateway_error_outside_a_fault_window": not any(not e["in_window"] for e in seen.sent),
        "in_window_errors_clear_no_hang": all(r.error and not r.hang for r in seen.errors),
        "first_request_after_back_succeeds": all(
            a[k] is None or a[k]["ok"] for a in seen.after for k in ("voice", "browser")
        ),
        "rss_growth_under_5pct_last_5_6": _rss_under_5pct(seen.usage),
        "no_fd_or_task_growth_last_5_6": {k: _no_count_growth(v) for k, v in seen.usage.items()},
        "voice_slot_never_evicted_by_a_browser": not seen.evicted,
        "warm_up_within_one_poll": all(w is not None and w <= POLL_S for w in seen.warm),
        "llama_rss_growth_within_cache_ram": _within_cache(seen.usage[Role.LLAMA.value]),
        "no_prime_while_nothing_restarted": not seen.stray,
        "recorder_rows_are_value_changes": rows_are_value_changes(kinds, seen.counts["ha_restart"]),
    }


def _first_after_back(soak: Soak) -> list[dict[str, Any]]:
    """Each fault with the first requests after it (over before the next fault began)."""
    starts = [f.start for f in soak.faults[1:]] + [float("inf")]
    return [{"fault": f.name, "at_s": round(f.start, 1), **first_after(soak.requests, f, nxt)}
            for f, nxt in zip(soak.faults, starts, strict=True)]  # fmt: skip


def first_after(requests: list[Request], fault: Fault, next_start: float) -> dict[str, Any]:
    """The first voice turn and the first browser request started after the service was back
    and over before the next fault began (one that ran into it is judged by that fault's window);
    None if there was none."""
    back = fault.back if fault.back is not None else float("inf")
    out: dict[str, Any] = {}
    for kind, prefix in (("voice", "satellite"), ("browser", "browser")):
        ours = [r for r in requests if r.client.startswith(prefix)]
        first = min((r for r in ours if back <= r.start and r.end < next_start),
                    key=lambda r: r.start, default=None)  # fmt: skip
        if first is None:
            out[kind] = None
            continue
        out[kind] = {"ok": first.ok, "error": first.error, "after_s": round(first.start - back, 1)}
    return out


def _stray_primes(soak: Soak) -> list[float]:
    """Primes outside every restart of llama-server or HA (the entry set up anew), which are
    expected to prime the slot."""
    restarts = [f.window() for f in soak.faults if f.name in ("llama_kill", "ha_restart")]
    return [t for t in soak.primes if t > GRACE_S  # the set-up's own warm-up may run late
            and not any(lo <= t <= hi for lo, hi in restarts)]  # fmt: skip


def _rss_under_5pct(usage: dict[str, Lives]) -> dict[str, bool | None]:
    """By service: no judged process's RSS grew 5 % or more."""
    return {
        k: all(life["rss_growth_pct"] < 5 for life in judged(v)) if judged(v) else None
        for k, v in usage.items()
        if k != Role.LLAMA.value  # its host prompt cache fills: judged against --cache-ram
    }


def _no_count_growth(lives: Lives) -> bool | None:
    """No count (descriptors, sockets, HA's connections to the stack, tasks) ended higher in
    any judged process than it began."""
    ones = judged(lives)
    if not ones:
        return None
    return all(life[k][1] <= life[k][0] for life in ones for k in COUNTS if k in life)


def _within_cache(lives: Lives) -> bool | None:
    """llama-server's growth after settling stays within its host prompt cache (--cache-ram)."""
    ones = judged(lives)
    if not ones:
        return None
    return all(life["max_rss_mb"] - life["rss_mb"][0] <= CACHE_RAM_MIB for life in ones)
