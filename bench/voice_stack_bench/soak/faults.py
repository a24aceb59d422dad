"""The faults the soak injects, evenly over the run's first minutes, each marking when its
service answered again (its window runs from its start until then plus GRACE_S), and the timer
that ends the run once the last fault is over and both kinds of client were answered after it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable

from voice_stack_dev.demo.provision import onboard_or_login, wait_running
from voice_stack_dev.demo.services import DemoError, Role
from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient
from voice_stack_dev.nginx import NginxProxy

from .primes import first_task_s
from .state import Fault, Soak, log, pause

PROXY_DOWN_S = 30.0
# At most this long past the planned end, waiting for requests after the last fault.
TAIL_LIMIT_S = 300.0
FAULTS = ("llama_kill", "speech_restart", "gateway_restart", "proxy_new_key", "proxy_down",
          "ha_restart")  # fmt: skip


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


async def restart_ha(soak: Soak) -> None:
    """Restart HA and log in again; meanwhile new turns find no HA, open ones see its
    websocket close."""
    old, soak.ha = soak.ha, None
    await _restart(soak, Role.HASS)
    if old is not None:
        await old.close()
    soak.ha = await connect(soak)


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
        await pause(soak, 0.5)
    soak.done.set()


def _answered_after(soak: Soak) -> bool:
    back = max((f.back or f.start for f in soak.faults), default=0.0)
    finished = [r for r in soak.requests if r.start >= back and r.end > r.start]
    return all(any(r.client.startswith(p) for r in finished) for p in ("satellite", "browser"))
