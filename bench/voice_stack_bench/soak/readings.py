"""The readings the soak samples under load and once more at rest: RSS and descriptors of every
service's process group, HA's connections to the stack's servers, the task counts of HA (from a
probe linked into this run's HA config) and of the gateway, and the gateway's error counters."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from dataclasses import asdict
from typing import Any

from voice_stack_dev.demo.services import GATEWAY_HTTP_PORT, Role
from voice_stack_dev.ha_client import HomeAssistantApiError
from voice_stack_dev.paths import REPO
from voice_stack_dev.procs import group_usage, tcp_peer_ports

from ..e2e.servers import Servers
from .state import WATCHED, Soak, log, pause

PROBE = REPO / "dev" / "ha_probe" / "voice_stack_probe"
PROBE_PATH = "/api/voice_stack_probe/tasks"
READ_LIMIT_S = 5.0  # one reading of a task count
# After the load: the proxy closes an idle client connection after 65 s (keepalive_timeout),
# the gateway its pooled upstream ones after 4 s, aiohttp's pools in HA after 15 s.
AT_REST_S = 75.0
AT_REST_READINGS, AT_REST_EVERY_S = 6, 5.0  # the fewest of these: 30 s, two polls


def install_probe(servers: Servers) -> None:
    """Link the task probe into this run's HA config (loaded at HA's next start)."""
    link = servers.config_dir / "custom_components" / PROBE.name
    if not link.is_symlink():
        link.symlink_to(PROBE)
    config = servers.config_dir / "configuration.yaml"
    if f"\n{PROBE.name}:" not in config.read_text():
        with config.open("a") as f:
            f.write(f"{PROBE.name}:\n")


async def watch(soak: Soak, every: float) -> None:
    """RSS and descriptors of every service's process group, HA's connections to the stack's
    servers and the task counts of HA (all, and ours) and the gateway, every `every` s."""
    while not soak.done.is_set():
        soak.usage.append(await sample(soak))
        await pause(soak, every)


async def read_at_rest(soak: Soak) -> None:
    """The counts once more at rest, after every idle connection's keep-alive has run out, a
    few times: one reading may fall on the integration's poll (its requests in flight)."""
    log(f"load stopped; the counts at rest in {AT_REST_S:.0f} s")
    await asyncio.sleep(AT_REST_S)
    for _ in range(AT_REST_READINGS):
        soak.usage.append(await sample(soak, at_rest=True))
        await asyncio.sleep(AT_REST_EVERY_S)


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
