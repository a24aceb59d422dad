"""`scripts/demo --keep` stays up past HA's 5-minute trial of new HTTP settings, on 127.0.0.1 only.

HA 2026.11 restarts and falls back to listening on every interface when imported HTTP settings
are not confirmed within 5 minutes; the demo confirms them. Nothing here sends traffic beyond
the loopback range: 127.0.0.2 is loopback too, and answers only if HA bound every interface.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest

from voice_stack_dev.ha_client import HomeAssistantClient
from voice_stack_dev.procs import http_status

from .demo_process import kept_demo

KEEP_S = 6 * 60 + 30  # past HA's AUTO_REVERT_DELAY (5 min) with room for a restart
POLL_S = 10

pytestmark = [pytest.mark.slow, pytest.mark.timeout(KEEP_S + 600)]


def _listening_hosts(port: int) -> set[str]:
    """Local addresses of the sockets listening on `port` (from /proc, no traffic)."""
    hosts: set[str] = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port or len(address) != width:
                continue
            raw = bytes.fromhex(address)
            if width == 8:
                hosts.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                hosts.add(socket.inet_ntop(socket.AF_INET6, words))
    return hosts


def _refused(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) != 0


async def _http_settings(url: str, state_dir: Path) -> dict[str, object]:
    """What HA's Settings > System > Network shows (websocket http/config), as the demo owner."""
    login = json.loads((state_dir / "state.json").read_text())
    async with HomeAssistantClient(url) as ha:
        await ha.login(login["username"], login["password"])
        await ha.connect_ws()
        settings: dict[str, object] = await ha.ws("http/config")
    return settings


def test_kept_demo_stays_up_on_loopback_only(tmp_path: Path) -> None:
    state_dir, output = tmp_path / "state", tmp_path / "out"
    with kept_demo(state_dir, output) as (report, proc):
        url = report["ha_url"]
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + KEEP_S
        while time.monotonic() < deadline:  # HA must answer all along, not only at the end
            assert proc.poll() is None, "the demo exited while kept running"
            assert http_status(url + "/manifest.json", timeout=10) == 200
            time.sleep(POLL_S)
        assert _listening_hosts(port) == {"127.0.0.1"}
        assert _refused("127.0.0.2", port)
        settings = asyncio.run(_http_settings(url, state_dir))
        assert settings["active_config_type"] == "stable"
        assert settings["revert_at"] is None
        assert settings["pending"] is None
        stable = settings["stable"]
        assert isinstance(stable, dict)
        assert (stable["server_host"], stable["server_port"]) == (["127.0.0.1"], port)
    stored = json.loads((state_dir / "ha-config" / ".storage" / "http").read_text())["data"]
    assert stored["stable"]["server_host"] == ["127.0.0.1"]  # what the next run starts with
    assert stored["pending"] is None
