"""A soak with faults: the demo's real servers and a real Home Assistant 2026.11 for `--minutes`,
two satellites speaking through `assist_pipeline/run` and three browser-like clients on the
general key, while the services are killed, restarted and reconfigured on a schedule (issue 20).

    PYTHONPATH=dev .cache/venv/ha11/bin/python bench/soak.py --minutes 60 [--out FILE]

Servers (127.0.0.1 only, all stopped on exit, Ctrl-C or SIGTERM): llama-server (SmolLM2-135M,
-np 4, --cache-ram 512) behind the auth proxy, the speech server behind the Voice Stack
gateway, `hass` with the demo's config (recorder on). Each satellite speaks a question as a new
conversation, then its follow-up, in real time (20 ms chunks), every `--gap` s; the browsers
chat (each chat followed by its title request) every `--browser-gap` s. Faults, in this order,
each `--rounds` times (default 2 from 20 minutes on, else 1), evenly over the first
`--fault-minutes` (default: the first sixth of the run): llama-server killed (SIGKILL) and
restarted, the speech server restarted, the gateway restarted, the proxy reloaded with a new
general key (the browsers switch to it), the proxy down for 30 s, Home Assistant restarted. The
rest of the run is load alone, so each process that came back from a fault is then watched for
the last five sixths (50 minutes of a 60-minute run) without being restarted: growth there is
growth, not a restart's warm-up. A fault's window is from its start until the service is back
plus GRACE_S. Inside HA, a probe (dev/ha_probe, linked into this run's HA config only, loaded
by one restart of HA before the run begins) counts the event loop's tasks and those running our
integration's code; the gateway's /metrics gives its own. One JSON document to stdout (and
`--out`); progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from voice_stack_bench.browser_chats import browser_messages, stream, title_task
from voice_stack_bench.e2e.phases import BROWSER_PARAGRAPHS, BROWSER_TITLE_WORDS, utterances
from voice_stack_bench.e2e.servers import Servers
from voice_stack_bench.e2e.stacks import provision_voice_stack
from voice_stack_bench.e2e.turns import QUESTIONS as E2E_QUESTIONS
from voice_stack_bench.e2e.turns import Utterance
from voice_stack_dev.assist import AssistError, run_utterance
from voice_stack_dev.demo.ha_config import check_environment
from voice_stack_dev.demo.observe import llama_slots
from voice_stack_dev.demo.provision import onboard_or_login, registry, wait_running
from voice_stack_dev.demo.services import (
    CACHE_RAM_MIB,
    GATEWAY_HTTP_PORT,
    RESERVED_SLOTS,
    DemoError,
    Role,
)
from voice_stack_dev.demo.turns import clear_tts_cache
from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient
from voice_stack_dev.nginx import NginxProxy
from voice_stack_dev.paths import REPO
from voice_stack_dev.procs import Service, group_usage, jemalloc_env, tcp_peer_ports

GRACE_S = 30.0  # after a service is back: the integration's next poll (15 s) and a turn
PROXY_DOWN_S = 30.0
POLL_S = 15.0  # the integration's coordinator poll
TURN_LIMIT_S = 60.0  # HA's pipeline timeout for one run
HANG_S = TURN_LIMIT_S + 30.0  # a request still open after this is a hang
BROWSER_TIMEOUT_S = 60.0
WARM_UP_LIMIT_S = 120.0
PRIME_POLL_S = 0.25  # a prime followed at once by a voice turn may still be missed
# At most this long past the planned end, waiting for requests after the last fault.
TAIL_LIMIT_S = 300.0
SETTLE_S = 120.0  # a process's first minutes: its start-up, not growth
# After the load: the proxy closes an idle client connection after 65 s (keepalive_timeout),
# the gateway its pooled upstream ones after 4 s, aiohttp's pools in HA after 15 s.
AT_REST_S = 75.0
AT_REST_READINGS, AT_REST_EVERY_S = 6, 5.0  # the fewest of these: 30 s, two polls
MIN_SAMPLES = 6  # after settling, to judge a process's growth
WATCHED = (Role.HASS, Role.GATEWAY, Role.PROXY, Role.SPEECH, Role.LLAMA)
FAULTS = ("llama_kill", "speech_restart", "gateway_restart", "proxy_new_key", "proxy_down",
          "ha_restart")  # fmt: skip
QUESTIONS = E2E_QUESTIONS[:6]
PROBE = REPO / "dev" / "ha_probe" / "voice_stack_probe"
PROBE_PATH = "/api/voice_stack_probe/tasks"
READ_LIMIT_S = 5.0  # one reading of a task count


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Request:
    client: str  # "satellite-N" | "browser-N" | "title-N"
    kind: str  # "new" | "follow_up" | "chat" | "title"
    start: float  # s since the run began
    end: float
    ok: bool
    error: str | None = None  # the message the user got
    hang: bool = False
    first_audio_ms: float | None = None
    slot: int | None = None
    in_window: bool | None = None


@dataclass
class Fault:
    name: str
    start: float
    back: float | None = None  # the service answers again
    error: str | None = None
    first_task_s: float | None = None  # llama_kill: until the agent's slot began any task

    def window(self) -> tuple[float, float]:
        return self.start, (self.back if self.back is not None else self.start) + GRACE_S


@dataclass
class Soak:
    """The running soak: servers, HA session (replaced when HA restarts), what was seen."""

    servers: Servers
    began: float
    stop_at: float
    ha: HomeAssistantClient | None = None
    pipeline_id: str = ""
    general_key: str = ""
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)
    primes: list[float] = field(default_factory=list)  # s since the run began
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.began

    def service(self, role: Role) -> Service:
        return self.servers.stack.services[role]


async def connect(soak: Soak) -> HomeAssistantClient:
    """A fresh logged-in session (the demo's owner), once HA is RUNNING."""
    ha = HomeAssistantClient(soak.servers.url(Role.HASS))
    try:
        await onboard_or_login(ha, soak.servers.state)
        await ha.connect_ws()
        await wait_running(ha)
    except BaseException:
        await ha.close()
        raise
    return ha


# --- clients ---------------------------------------------------------------------------------


async def satellite(soak: Soak, n: int, speech: dict[str, Utterance], gap: float) -> None:
    """Conversations (a question, then its follow-up) until the run ends, one every `gap` s."""
    k = n  # the two satellites start on different questions
    while not soak.done.is_set():
        question, follow_up = QUESTIONS[k % len(QUESTIONS)]
        k += 1
        conversation: str | None = None
        for kind, text in (("new", question), ("follow_up", follow_up)):
            if soak.done.is_set():
                return
            conversation = await _turn(soak, n, kind, speech[text], conversation)
            await _pause(soak, gap)
            if conversation is None:
                break  # no conversation to follow up


async def _turn(
    soak: Soak, n: int, kind: str, utterance: Utterance, conversation: str | None
) -> str | None:
    start = soak.now()
    request = Request(f"satellite-{n}", kind, start, start, ok=False)
    soak.requests.append(request)
    try:
        ha = soak.ha
        if ha is None:  # HA restarting: the satellite cannot reach it
            request.error = "Home Assistant: restarting, no connection"
            return None
        async with asyncio.timeout(HANG_S):
            await clear_tts_cache(ha)
            run = await run_utterance(
                ha,
                soak.pipeline_id,
                utterance.pcm,
                conversation_id=conversation,
                limit_s=TURN_LIMIT_S,
            )
        if run.reply_type == "error":
            request.error = f"agent: {run.reply}"
        elif run.timings.to_first_audio_ms is None:
            request.error = "no reply audio arrived"
        else:
            request.ok = True
            request.first_audio_ms = round(run.timings.to_first_audio_ms, 1)
        return run.conversation_id if request.ok else None
    except TimeoutError:
        request.hang, request.error = True, f"no answer within {HANG_S:.0f} s"
    except AssistError as err:
        request.error = f"pipeline {err}"
    except (HomeAssistantApiError, OSError) as err:
        request.error = f"Home Assistant: {err}"
    finally:
        request.end = soak.now()
        if request.error:
            log(f"satellite-{n} {kind}: {request.error}")
    return None


async def browsers(soak: Soak, gap: float) -> None:
    """Each round: every client's chat, then its title request, on the current general key."""
    turn = 0
    while not soak.done.is_set():
        for client in range(3):
            for kind, messages in (
                ("chat", browser_messages(client, turn, BROWSER_PARAGRAPHS)),
                ("title", title_task(client, turn, BROWSER_TITLE_WORDS)),
            ):
                await asyncio.to_thread(_browser_request, soak, client, kind, messages)
        turn += 1
        await _pause(soak, gap)


def _browser_request(soak: Soak, client: int, kind: str, messages: list[dict[str, str]]) -> None:
    start = soak.now()
    request = Request(f"browser-{client}", kind, start, start, ok=False)
    soak.requests.append(request)
    headers = {"Authorization": f"Bearer {soak.general_key}"}
    try:
        result = stream(soak.servers.url(Role.PROXY), headers, {"messages": messages},
                        timeout=BROWSER_TIMEOUT_S)  # fmt: skip
        request.ok, request.slot = True, result.slot
    except TimeoutError:
        request.hang, request.error = True, f"no answer within {BROWSER_TIMEOUT_S:.0f} s"
    except (OSError, RuntimeError, ValueError) as err:
        request.error = f"{type(err).__name__}: {err}"
    finally:
        request.end = soak.now()


async def _pause(soak: Soak, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(soak.done.wait(), seconds)


# --- watching --------------------------------------------------------------------------------


async def watch(soak: Soak, every: float) -> None:
    """RSS and descriptors of every service's process group, HA's connections to the stack's
    servers and the task counts of HA (all, and ours) and the gateway, every `every` s."""
    while not soak.done.is_set():
        soak.usage.append(await sample(soak))
        await _pause(soak, every)


async def sample(soak: Soak, *, at_rest: bool = False) -> dict[str, Any]:
    """One reading of every service (`at_rest`: taken after the load stopped)."""
    row: dict[str, Any] = {"t": round(soak.now(), 1)}
    if at_rest:
        row["at_rest"] = True
    for role in WATCHED:
        proc = soak.servers.stack.services.get(role)
        pid = proc.proc.pid if proc is not None and proc.proc is not None else None
        usage = group_usage(pid) if pid is not None else None
        row[role.value] = asdict(usage) if usage is not None else None
    if (hass := row[Role.HASS.value]) is not None:
        hass["to_stack_by"] = _to_stack(soak, hass["pids"][0])
        hass["to_stack"] = sum(hass["to_stack_by"].values())
        hass["tasks"], hass["our_tasks"] = await _ha_tasks(soak)
    if (gateway := row[Role.GATEWAY.value]) is not None:
        gateway["tasks"], gateway["errors"] = await asyncio.to_thread(_gateway_metrics, soak)
    return row


def _to_stack(soak: Soak, pgid: int) -> dict[str, int]:
    """HA's open connections to the stack's servers by server (our integration's and HA's
    wyoming integration's: the proxy, llama-server, the gateway's two ports, the speech
    server): which one holds what a count at rest keeps."""
    names = {soak.servers.state.ports[name]: name for name in (*(r.value for r in WATCHED
             if r is not Role.HASS), GATEWAY_HTTP_PORT)}  # fmt: skip
    return {names[port]: n for port, n in tcp_peer_ports(pgid).items() if port in names}


async def _ha_tasks(soak: Soak) -> tuple[int | None, int | None]:
    """(all tasks, tasks running our integration's code) from the probe; None while HA is
    restarting or does not answer within READ_LIMIT_S."""
    if soak.ha is None:
        return None, None
    try:
        async with asyncio.timeout(READ_LIMIT_S):
            data = await soak.ha.request("GET", PROBE_PATH)
    except HomeAssistantApiError, TimeoutError:
        return None, None
    return int(data["tasks"]), int(data["ours"])


def _gateway_metrics(soak: Soak) -> tuple[int | None, dict[str, int] | None]:
    """gateway_asyncio_tasks and the error events sent so far (gateway_errors_total, by
    "kind code") from the gateway's /metrics; None if it does not answer."""
    url = f"http://127.0.0.1:{soak.servers.state.ports[GATEWAY_HTTP_PORT]}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=READ_LIMIT_S) as resp:
            text = resp.read().decode()
    except OSError:
        return None, None
    tasks = [x for x in text.splitlines() if x.startswith("gateway_asyncio_tasks ")]
    errors = {f"{kind} {code}": int(float(n)) for kind, code, n in _ERROR_LINE.findall(text)}
    return (int(tasks[0].split()[1]) if tasks else None), errors


_ERROR_LINE = re.compile(r'^gateway_errors_total\{kind="([^"]*)",code="([^"]*)"\} (\S+)$', re.M)


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
                            "in_window": _overlaps(since, t, windows)})  # fmt: skip
        last[pid] = (t, gateway["errors"])
    return out


async def first_task_s(soak: Soak, since: float) -> float | None:
    """Seconds from `since` until llama-server's reserved slot began its first task: the
    warm-up's prime, or a voice turn that came first (the prime gives way to a waiting turn by
    design, and the turn caches the same prefix); None within WARM_UP_LIMIT_S."""
    url, key = soak.servers.url(Role.LLAMA), soak.servers.state.llama_key
    deadline = time.monotonic() + WARM_UP_LIMIT_S
    while time.monotonic() < deadline:
        slots = {s.get("id"): s for s in await llama_slots(url, key)}
        task = (slots.get(RESERVED_SLOTS[0]) or {}).get("id_task")
        if isinstance(task, int) and task >= 0:  # a new process's slot shows -1 or nothing
            return round(soak.now() - since, 1)
        await asyncio.sleep(0.2)
    return None


async def watch_primes(soak: Soak) -> None:
    """The warm-up's primes on the reserved slot (a task with n_predict 0, what the
    integration's warm-up sends), from llama-server's /slots every PRIME_POLL_S."""
    url, key = soak.servers.url(Role.LLAMA), soak.servers.state.llama_key
    seen: set[tuple[int, int]] = set()  # (llama-server's pid, task): ids restart with it
    while not soak.done.is_set():
        service = soak.servers.stack.services.get(Role.LLAMA)
        pid = service.proc.pid if service is not None and service.proc is not None else 0
        for slot in await llama_slots(url, key):
            params = slot.get("params") or {}
            task = slot.get("id_task")
            if slot.get("id") not in RESERVED_SLOTS or not isinstance(task, int) or task < 0:
                continue
            if params.get("n_predict", params.get("max_tokens")) == 0 and (pid, task) not in seen:
                seen.add((pid, task))
                soak.primes.append(round(soak.now(), 1))
        await _pause(soak, PRIME_POLL_S)


# --- faults ----------------------------------------------------------------------------------


async def _restart(soak: Soak, role: Role, *, kill: bool = False) -> None:
    service = soak.service(role)
    if kill and service.proc is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(service.proc.wait, 10)
    await asyncio.to_thread(service.restart if not kill else service.start)


async def llama_kill(soak: Soak, fault: Fault) -> None:
    await _restart(soak, Role.LLAMA, kill=True)
    fault.back = soak.now()
    fault.first_task_s = await first_task_s(soak, fault.back)


async def proxy_new_key(soak: Soak, fault: Fault) -> None:
    proxy = soak.service(Role.PROXY)
    assert isinstance(proxy, NginxProxy)
    key = secrets.token_urlsafe(24)
    await asyncio.to_thread(proxy.reload_with_key, key)
    soak.servers.state.proxy_key = soak.general_key = key
    fault.back = soak.now()


async def proxy_down(soak: Soak, fault: Fault) -> None:
    proxy = soak.service(Role.PROXY)
    await asyncio.to_thread(proxy.stop)
    await asyncio.sleep(PROXY_DOWN_S)
    await asyncio.to_thread(proxy.start)
    fault.back = soak.now()


async def ha_restart(soak: Soak, fault: Fault) -> None:
    await restart_ha(soak)
    fault.back = soak.now()


def _simple(role: Role) -> Callable[[Soak, Fault], Awaitable[None]]:
    async def restart(soak: Soak, fault: Fault) -> None:
        await _restart(soak, role)
        fault.back = soak.now()

    return restart


async def faults(soak: Soak, rounds: int, span: float, tail_s: float) -> None:
    """Every fault `rounds` times, evenly over the first `span` s (late ones run once the one
    before is over); the run then goes on for at least `tail_s` s after the last one."""
    actions = {
        "llama_kill": llama_kill,
        "speech_restart": _simple(Role.SPEECH),
        "gateway_restart": _simple(Role.GATEWAY),
        "proxy_new_key": proxy_new_key,
        "proxy_down": proxy_down,
        "ha_restart": ha_restart,
    }
    plan = [name for _ in range(rounds) for name in FAULTS]
    for i, name in enumerate(plan):
        await _pause_until(soak, span * (i + 0.5) / len(plan))
        fault = Fault(name, soak.now())
        soak.faults.append(fault)
        log(f"fault {i + 1}/{len(plan)}: {name}")
        try:
            await actions[name](soak, fault)
        except (DemoError, HomeAssistantApiError, OSError, RuntimeError) as err:
            fault.error = str(err).split("\n", 1)[0]
            log(f"fault {name} failed: {fault.error}")
            raise
        log(f"{name}: back after {(fault.back or 0) - fault.start:.1f} s")
    soak.stop_at = max(soak.stop_at, time.monotonic() + tail_s)


async def _pause_until(soak: Soak, at: float) -> None:
    await asyncio.sleep(max(0.0, at - soak.now()))


async def timer(soak: Soak, fault_task: asyncio.Task[None]) -> None:
    """Ends the run at stop_at (which the faults may push back), once every fault is over and
    a voice turn and a browser request that started after the last one have finished (or
    TAIL_LIMIT_S after stop_at)."""
    while time.monotonic() < soak.stop_at or not fault_task.done():
        await asyncio.wait({fault_task}, timeout=1.0)
    while time.monotonic() < soak.stop_at + TAIL_LIMIT_S and not _answered_after(soak):
        await _pause(soak, 0.5)
    soak.done.set()


def _answered_after(soak: Soak) -> bool:
    back = max((f.back or f.start for f in soak.faults), default=0.0)
    finished = [r for r in soak.requests if r.start >= back and r.end > r.start]
    return all(any(r.client.startswith(p) for r in finished) for p in ("satellite", "browser"))


# --- the report ------------------------------------------------------------------------------


def _overlaps(lo: float, hi: float, windows: list[tuple[float, float]]) -> bool:
    """Whether the span from `lo` to `hi` overlaps any fault window."""
    return any(lo <= end and hi >= start for start, end in windows)


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


COUNTS = ("fds", "sockets", "to_stack", "tasks", "our_tasks")  # what a leak makes grow


def growth(usage: list[dict[str, Any]], role: Role, since: float) -> list[dict[str, Any]]:
    """RSS, descriptors and tasks of each of the service's processes (a restart starts a new
    one) from `since` on, each from SETTLE_S after it started. RSS: the median of the first
    tenth of its samples under load (at least three; five minutes of a 50-minute watch) against
    that of the last tenth: the level it holds, not the swing of a request in flight (one long
    synthesis moves the speech server's by 100 MB). Counts: the floor (fewest) of the first
    third of the samples under load against the fewest of the readings at rest after the load
    (`at_rest`), or against the floor of the last third without them (floors)."""
    lives: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    rest: dict[int, dict[str, int]] = {}  # the fewest of each count at rest
    for row in usage:
        if (u := row.get(role.value)) is not None:
            if row.get("at_rest"):
                least = rest.setdefault(u["pids"][0], {})
                for key in (*COUNTS, "rss_kb"):
                    if isinstance(u.get(key), int):
                        least[key] = min(least.get(key, u[key]), u[key])
            else:
                lives.setdefault(u["pids"][0], []).append((row["t"], u))
    out = []
    for pid, life in lives.items():
        began = life[0][0]
        rows = [(t, u) for t, u in life if t >= max(since, began + SETTLE_S)]
        if len(rows) < 2:
            continue
        rss = [u["rss_kb"] for _, u in rows]
        tenth = max(3, len(rss) // 10)
        rss0, rss1 = statistics.median(rss[:tenth]), statistics.median(rss[-tenth:])
        counts = {key: floors([u.get(key) for _, u in rows], rest.get(pid, {}).get(key))
                  for key in COUNTS if any(u.get(key) is not None for _, u in rows)}  # fmt: skip
        out.append({
            "pid": pid, "samples": len(rows), "from_s": rows[0][0], "to_s": rows[-1][0],
            "rss_mb": [round(rss0 / 1024, 1), round(rss1 / 1024, 1)],
            "rss_growth_pct": round(100 * (rss1 - rss0) / rss0, 2) if rss0 else None,
            "max_rss_mb": round(max(rss) / 1024, 1), "counts_at_rest": pid in rest,
            # reported, not judged: what the process holds with no request in flight
            "rss_at_rest_mb": round(rest[pid]["rss_kb"] / 1024, 1) if pid in rest else None,
            **counts,
        })  # fmt: skip
    return out


def floors(values: list[int | None], at_rest: int | None = None) -> list[int]:
    """The fewest of the first third of the readings against the reading at rest, or without
    one the fewest of the last third. What leaks is held in every later reading and at rest, so
    it lifts both; requests in flight lift only some readings, more of them as the machine slows
    down (a median of thirds rose by one or two in runs whose load grew, with nothing held), and
    a pool's idle connections, which a steady load keeps open, are closed at rest."""
    known = [v for v in values if v is not None]
    third = max(1, len(known) // 3)
    return [min(known[:third]), at_rest if at_rest is not None else min(known[-third:])]


def _no_count_growth(lives: list[dict[str, Any]]) -> bool | None:
    """No count (descriptors, sockets, HA's connections to the stack, tasks) ended higher in
    any judged process than it began."""
    judged = _judged(lives)
    if not judged:
        return None
    return all(life[k][1] <= life[k][0] for life in judged for k in COUNTS if k in life)


def _judged(lives: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes watched long enough to judge (MIN_SAMPLES after settling)."""
    return [life for life in lives if life["samples"] >= MIN_SAMPLES]


def _primed_after(primes: list[float], fault: Fault) -> float | None:
    """Seconds from llama-server's return until the warm-up primed the agent's slot."""
    if fault.back is None:
        return None
    back = fault.back
    first = min((p for p in primes if back <= p <= back + WARM_UP_LIMIT_S), default=None)
    return None if first is None else round(first - back, 1)


def _within_cache(lives: list[dict[str, Any]]) -> bool | None:
    """llama-server's growth after settling stays within its host prompt cache (--cache-ram)."""
    judged = _judged(lives)
    if not judged:
        return None
    return all(life["max_rss_mb"] - life["rss_mb"][0] <= CACHE_RAM_MIB for life in judged)


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


ROW_KINDS = ("first", "state", "attributes", "timestamps_only", "unchanged")


def recorder_rows(
    config_dir: Path, entity_ids: set[str], since_ts: float
) -> dict[str, Counter[str]]:
    """State rows HA's recorder wrote for these entities since `since_ts` (Unix time), each by
    what it changed against the entity's row before: its state, an attribute, only attributes
    that hold a time (the churn of a "last success" stamp), or nothing (HA writes every entity
    anew when it starts)."""
    db = config_dir / "home-assistant_v2.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        rows = conn.execute(
            "SELECT m.entity_id, s.state, a.shared_attrs FROM states s JOIN states_meta m"
            " ON s.metadata_id = m.metadata_id LEFT JOIN state_attributes a"
            " ON s.attributes_id = a.attributes_id WHERE s.last_updated_ts >= ?"
            " ORDER BY m.entity_id, s.last_updated_ts",
            (since_ts,),
        ).fetchall()
    kinds: dict[str, Counter[str]] = {}
    before: dict[str, tuple[str, dict[str, Any]]] = {}
    for entity_id, state, shared in rows:
        if entity_id not in entity_ids:
            continue
        now = (state, json.loads(shared) if shared else {})
        kinds.setdefault(entity_id, Counter())[_row_kind(before.get(entity_id), now)] += 1
        before[entity_id] = now
    return kinds


def _row_kind(before: tuple[str, dict[str, Any]] | None, now: tuple[str, dict[str, Any]]) -> str:
    if before is None:
        return "first"
    if before[0] != now[0]:
        return "state"
    changed = {k for k in before[1].keys() | now[1].keys() if before[1].get(k) != now[1].get(k)}
    if not changed:
        return "unchanged"
    return "timestamps_only" if all(_is_time(now[1].get(k)) for k in changed) else "attributes"


def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _rows_are_value_changes(kinds: dict[str, Counter[str]], ha_starts: int) -> bool:
    """No row for a time stamp alone, and no unchanged row beyond one per HA start."""
    return all(c["timestamps_only"] == 0 and c["unchanged"] <= ha_starts for c in kinds.values())


def report(soak: Soak, kinds: dict[str, Counter[str]], args: argparse.Namespace) -> dict[str, Any]:
    span = soak.now()
    windows = [f.window() for f in soak.faults]
    for r in soak.requests:
        r.in_window = _overlaps(r.start, r.end, windows)
    errors = [r for r in soak.requests if not r.ok]
    outside = [r for r in errors if not r.in_window]
    sent = gateway_errors(soak.usage, windows)
    usage = {role.value: growth(soak.usage, role, span / 6) for role in WATCHED}
    starts = [f.start for f in soak.faults[1:]] + [float("inf")]
    after = [{"fault": f.name, "at_s": round(f.start, 1), **first_after(soak.requests, f, nxt)}
             for f, nxt in zip(soak.faults, starts, strict=True)]  # fmt: skip
    browsers = [r for r in soak.requests if r.client.startswith("browser") and r.ok]
    evicted = [r for r in browsers if r.slot in RESERVED_SLOTS]
    kills = [f for f in soak.faults if f.name == "llama_kill"]
    primed = [_primed_after(soak.primes, f) for f in kills]
    warm = [f.first_task_s for f in kills]  # the prime or a voice turn, whichever came first
    # A restart of llama-server or HA (the entry set up anew) is expected to prime the slot.
    restarts = [f.window() for f in soak.faults if f.name in ("llama_kill", "ha_restart")]
    stray = [t for t in soak.primes if t > GRACE_S  # the set-up's own warm-up may run late
             and not any(lo <= t <= hi for lo, hi in restarts)]  # fmt: skip
    rows = {entity_id: sum(c.values()) for entity_id, c in kinds.items()}
    per_hour = round(sum(rows.values()) / (span / 3600), 1) if span else None
    counts = {name: sum(f.name == name for f in soak.faults) for name in FAULTS}
    goals = {
        "every_fault_happened": all(counts.values()) and not any(f.error for f in soak.faults),
        "no_error_outside_a_fault_window": not outside,
        "no_gateway_error_outside_a_fault_window": not any(not e["in_window"] for e in sent),
        "in_window_errors_clear_no_hang": all(r.error and not r.hang for r in errors),
        "first_request_after_back_succeeds": all(
            a[k] is None or a[k]["ok"] for a in after for k in ("voice", "browser")
        ),
        "rss_growth_under_5pct_last_5_6": {
            k: all(life["rss_growth_pct"] < 5 for life in _judged(v)) if _judged(v) else None
            for k, v in usage.items()
            if k != Role.LLAMA.value  # its host prompt cache fills: judged against --cache-ram
        },
        "no_fd_or_task_growth_last_5_6": {k: _no_count_growth(v) for k, v in usage.items()},
        "voice_slot_never_evicted_by_a_browser": not evicted,
        "warm_up_within_one_poll": all(w is not None and w <= POLL_S for w in warm),
        "llama_rss_growth_within_cache_ram": _within_cache(usage[Role.LLAMA.value]),
        "no_prime_while_nothing_restarted": not stray,
        "recorder_rows_are_value_changes": _rows_are_value_changes(kinds, counts["ha_restart"]),
    }
    return {
        "setup": {
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
        },
        "elapsed_s": round(span, 1),
        "requests": {
            "total": len(soak.requests),
            "errors": len(errors),
            "errors_outside_windows": len(outside),
            "gateway_errors_sent": sum(e["count"] for e in sent),
            "gateway_errors_sent_outside_windows": sum(
                e["count"] for e in sent if not e["in_window"]
            ),
            "voice_turns": sum(r.client.startswith("satellite") for r in soak.requests),
            "browser_requests": sum(r.client.startswith("browser") for r in soak.requests),
        },
        "errors": [asdict(r) for r in errors],
        "gateway_errors": sent,
        "faults": [{**asdict(f), "window": [round(x, 1) for x in f.window()]} for f in soak.faults],
        "fault_counts": counts,
        "first_after_back": after,
        "first_audio_by_quarter": latency_by_quarter(soak.requests, span),
        "usage_last_5_6": usage,
        "usage_samples": soak.usage,
        "voice_slot_evictions_by_browsers": len(evicted),
        "warm_up_s_after_llama_restart": warm,
        "prime_s_after_llama_restart": primed,
        "llama_cache_ram_mib": CACHE_RAM_MIB,
        "primes_s": soak.primes,
        "primes_while_nothing_restarted_s": stray,
        "recorder_rows": {
            "by_entity": rows,
            "per_hour": per_hour,
            "what_changed": {k: {kind: c[kind] for kind in ROW_KINDS} for k, c in kinds.items()},
        },
        "asyncio_tasks": {
            role.value: [
                {k: life.get(k) for k in ("pid", "tasks", "our_tasks")}
                for life in _judged(usage[role.value])
            ]
            for role in (Role.HASS, Role.GATEWAY)
        },
        "goals": goals,
        "load_average_end": os.getloadavg(),
    }


# --- the run ---------------------------------------------------------------------------------


def install_probe(servers: Servers) -> None:
    """Link the task probe into this run's HA config (loaded at HA's next start)."""
    link = servers.config_dir / "custom_components" / PROBE.name
    if not link.is_symlink():
        link.symlink_to(PROBE)
    config = servers.config_dir / "configuration.yaml"
    if f"\n{PROBE.name}:" not in config.read_text():
        with config.open("a") as f:
            f.write(f"{PROBE.name}:\n")


async def restart_ha(soak: Soak) -> None:
    """Restart HA and log in again; meanwhile new turns find no HA, open ones see its
    websocket close."""
    old, soak.ha = soak.ha, None
    await _restart(soak, Role.HASS)
    if old is not None:
        await old.close()
    soak.ha = await connect(soak)


async def run(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    check_environment()
    log(f"starting the servers (logs in {servers.logs})")
    await servers.start(stock=False)
    soak = Soak(servers, time.monotonic(), time.monotonic() + args.minutes * 60)
    soak.general_key = servers.state.proxy_key
    soak.ha = HomeAssistantClient(servers.url(Role.HASS))
    try:
        setup = await provision_voice_stack(soak.ha, servers)
        soak.pipeline_id = setup.pipeline_id
        ours = {e["entity_id"] for e in await registry(soak.ha)
                if e["platform"] in ("voice_stack", "wyoming")
                and e["entity_id"].split(".")[0] in ("sensor", "binary_sensor")}  # fmt: skip
        texts = {t for pair in QUESTIONS for t in pair}
        speech = await utterances(servers, texts)
        # HA, set up and onboarded (its database written), restarted once to load the probe
        install_probe(servers)
        await restart_ha(soak)
        began_unix = time.time()
        soak.began = time.monotonic()
        soak.stop_at = soak.began + args.minutes * 60
        log(f"soaking for {args.minutes} min: {args.rounds} round(s) of {len(FAULTS)} faults")
        async with asyncio.TaskGroup() as group:
            fault_task = group.create_task(
                faults(soak, args.rounds, args.fault_minutes * 60, args.tail)
            )
            group.create_task(timer(soak, fault_task))
            group.create_task(watch(soak, args.sample))
            group.create_task(watch_primes(soak))
            group.create_task(browsers(soak, args.browser_gap))
            for n in range(2):
                group.create_task(satellite(soak, n, speech, args.gap))
        # the counts once more at rest, after every idle connection's keep-alive has run out,
        # a few times: one reading may fall on the integration's poll (its requests in flight)
        log(f"load stopped; the counts at rest in {AT_REST_S:.0f} s")
        await asyncio.sleep(AT_REST_S)
        for _ in range(AT_REST_READINGS):
            soak.usage.append(await sample(soak, at_rest=True))
            await asyncio.sleep(AT_REST_EVERY_S)
        kinds = recorder_rows(servers.config_dir, ours, began_unix)
        return report(soak, kinds, args)
    finally:
        if soak.ha is not None:
            await soak.ha.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument(
        "--rounds", type=int, default=None, help="of every fault (default 2 from 20 min on)"
    )
    parser.add_argument(
        "--fault-minutes", type=float, default=None,
        help="the faults are spread over the run's first this many minutes (default: minutes/6)",
    )  # fmt: skip
    parser.add_argument("--gap", type=float, default=4.0, help="s between a satellite's turns")
    parser.add_argument("--browser-gap", type=float, default=10.0, help="s between browser rounds")
    parser.add_argument("--sample", type=float, default=10.0, help="s between /proc readings")
    parser.add_argument("--tail", type=float, default=30.0, help="s run after the last fault")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.minutes >= 20 else 1
    if args.fault_minutes is None:
        args.fault_minutes = args.minutes / 6
    return args


async def _until_stopped(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    """run(), cancelled by SIGTERM as asyncio.run cancels it on Ctrl-C, and bounded: faults that
    run late push the end back, never past an hour beyond the planned end."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    async with asyncio.timeout(args.minutes * 60 + 3600):
        return await run(args, servers)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    servers = Servers(Path(tempfile.mkdtemp(prefix="voice-soak-")))
    try:
        result = asyncio.run(_until_stopped(args, servers))
    except DemoError as err:
        print(f"soak failed: {err.describe()}", file=sys.stderr)
        return 1
    except (HomeAssistantApiError, TimeoutError) as err:
        print(f"soak failed: {err} (logs: {servers.logs})", file=sys.stderr)
        return 1
    except KeyboardInterrupt, asyncio.CancelledError:
        print("\nsoak: interrupted, stopping the servers", file=sys.stderr)
        return 130
    finally:
        servers.stop()
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
