"""Home Assistant's HTTP server settings for the demo: 127.0.0.1 on the demo's port, confirmed.

HA 2026.11 keeps these settings in its own store (`.storage/http`), not in YAML: a `http:`
block is imported once, as a *pending* configuration on trial. Unless it is confirmed within
5 minutes (the countdown dialog's Confirm, websocket `http/config/promote`), HA marks it
failed, restarts, and from then on uses the *stable* one, whose default listens on every
interface at port 8123. Later boots ignore the YAML. So the demo does what HA asks a user to
do: the first boot imports the block, the demo confirms it at once, and the block is removed.
Before each start the store is checked: anything but a confirmed 127.0.0.1-only configuration
on this run's port (a reverted trial, a port that moved) is reset, and imported again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ha_client import HomeAssistantClient
from .errors import DemoError

LOOPBACK = ["127.0.0.1"]
STORE = Path(".storage") / "http"


@dataclass(frozen=True)
class HttpSettings:
    """What HA reported after the demo confirmed its configuration."""

    hosts: list[str]
    port: int
    active: str  # HA's active_config_type: "stable" once confirmed
    imported_now: bool  # this run imported the YAML block and confirmed it


def _stored(config_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((config_dir / STORE).read_text())["data"]
    except OSError, ValueError, KeyError, TypeError:
        return None
    return data


def _is_ours(config: object, port: int) -> bool:
    return (
        isinstance(config, dict)
        and config.get("server_host") == LOOPBACK
        and config.get("server_port") == port
    )


def needs_import(config_dir: Path, port: int) -> bool:
    """Before HA starts: True when configuration.yaml must carry the `http:` block.

    A store that is not exactly "confirmed, 127.0.0.1 only, this port, nothing pending" is
    removed, so HA imports the block afresh instead of falling back to listening everywhere.
    """
    data = _stored(config_dir)
    if data is not None and _is_ours(data.get("stable"), port) and data.get("pending") is None:
        return False
    (config_dir / STORE).unlink(missing_ok=True)
    return True


async def confirm(ha: HomeAssistantClient, port: int) -> HttpSettings:
    """After login: confirm an imported configuration and check what HA now runs."""
    current = await ha.ws("http/config")
    imported = current.get("active_config_type") == "pending"
    if imported:
        if not _is_ours(current.get("pending"), port):
            raise DemoError("Home Assistant", f"unexpected pending HTTP settings {current}")
        await ha.ws("http/config/promote")
        current = await ha.ws("http/config")
    stable = current.get("stable") or {}
    if not _is_ours(stable, port) or current.get("revert_at") is not None:
        raise DemoError(
            "Home Assistant",
            f"HTTP settings are not 127.0.0.1:{port} only: {stable} (revert at "
            f"{current.get('revert_at')})",
        )
    return HttpSettings(
        hosts=list(stable["server_host"]),
        port=int(stable["server_port"]),
        active=str(current.get("active_config_type")),
        imported_now=imported,
    )


async def dismiss_yaml_notice(ha: HomeAssistantClient) -> None:
    """The import leaves a "remove the http: block" repair; the demo has removed it."""
    listing = await ha.ws("repairs/list_issues")
    for issue in listing.get("issues", []):
        if issue.get("domain") == "http" and issue.get("issue_id") == "deprecated_yaml":
            await ha.ws(
                "repairs/ignore_issue", domain="http", issue_id="deprecated_yaml", ignore=True
            )
