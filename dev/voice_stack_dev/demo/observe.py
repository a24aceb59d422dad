"""What the demo reads back after the run: our sensors in HA, llama-server's slots, /health."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

from .ha_client import HomeAssistantClient, Json

TIMEOUT = aiohttp.ClientTimeout(total=10, connect=3)
DOMAIN = "voice_stack"


@dataclass
class EntityReading:
    entity_id: str
    name: str
    state: str
    unit: str | None
    device_class: str | None

    @property
    def has_value(self) -> bool:
        return self.state not in ("unknown", "unavailable", "")


async def read_our_entities(ha: HomeAssistantClient) -> list[EntityReading]:
    """States of every sensor and binary sensor the voice_stack integration created."""
    registry: list[Json] = await ha.ws("config/entity_registry/list")
    ours = [
        e["entity_id"]
        for e in registry
        if e["platform"] == DOMAIN
        and e["entity_id"].split(".")[0] in ("sensor", "binary_sensor")
        and not e.get("disabled_by")  # disabled-by-default diagnostics have no state
    ]
    if not ours:
        return []
    await _refresh(ha, ours)
    states = {s["entity_id"]: s for s in await ha.request("GET", "/api/states")}
    readings = []
    for entity_id in sorted(ours):
        state = states.get(entity_id)
        if state is None:
            continue
        attrs: dict[str, Any] = state.get("attributes", {})
        readings.append(
            EntityReading(
                entity_id=entity_id,
                name=attrs.get("friendly_name", entity_id),
                state=state["state"],
                unit=attrs.get("unit_of_measurement"),
                device_class=attrs.get("device_class"),
            )
        )
    return readings


async def _refresh(ha: HomeAssistantClient, entity_ids: list[str]) -> None:
    """Ask for a poll now (the dashboard's "update" action) rather than wait for the interval."""
    await ha.request(
        "POST",
        "/api/services/homeassistant/update_entity",
        json={"entity_id": entity_ids},
    )
    await asyncio.sleep(0.5)


async def llama_slots(llama_url: str, key: str) -> list[Json]:
    """llama-server's /slots (needs its own key, which only the demo and the proxy hold)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.get(f"{llama_url}/slots", headers={"Authorization": f"Bearer {key}"}) as resp,
        ):
            if resp.status != 200:
                return []
            slots: list[Json] = await resp.json()
            return slots
    except aiohttp.ClientError, TimeoutError:
        return []


def last_used_slot(slots: list[Json]) -> int | None:
    """The slot that served the latest task (highest id_task)."""
    used = [s for s in slots if isinstance(s.get("id_task"), int) and s["id_task"] >= 0]
    if not used:
        return None
    return int(max(used, key=lambda s: s["id_task"])["id"])


async def probe(url: str) -> tuple[str, str]:
    """(ok|down, detail) of one service's health URL."""
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.get(url) as resp,
        ):
            body = await resp.text()
            if resp.status == 200:
                return "ok", _short(body)
            return "down", f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as err:
        return "down", repr(err)


def _short(body: str) -> str:
    body = " ".join(body.split())
    return body if len(body) <= 80 else body[:77] + "..."
