"""What the demo reads back: our sensors and repairs in HA, the agent's own timings of a reply
(its diagnostics), llama-server's /props and /slots, each service's /health."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp

from ..ha_client import HomeAssistantClient, Json

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


async def open_repairs(ha: HomeAssistantClient) -> list[str]:
    """The repair issues the voice_stack integration has raised (Settings > Repairs)."""
    listing = await ha.ws("repairs/list_issues")
    return sorted(
        str(issue.get("translation_key") or issue.get("issue_id"))
        for issue in listing.get("issues", [])
        if issue.get("domain") == DOMAIN
    )


@dataclass(frozen=True)
class AgentTimings:
    """What llama-server reported about the agent's latest reply, as the integration kept it."""

    slot: int
    prompt_tokens: int  # processed for this reply
    cached_tokens: int  # served from the slot's KV cache
    time_to_first_token_ms: float | None
    received_at: datetime

    @property
    def reuse_percent(self) -> float | None:
        total = self.prompt_tokens + self.cached_tokens
        return 100.0 * self.cached_tokens / total if total else None


async def agent_timings(
    ha: HomeAssistantClient, entry_id: str, subentry_id: str
) -> AgentTimings | None:
    """The integration's diagnostics (the "Download diagnostics" button) for one agent."""
    dump = await ha.request("GET", f"/api/diagnostics/config_entry/{entry_id}")
    raw = ((dump or {}).get("data") or {}).get("timings", {}).get(subentry_id)
    if not isinstance(raw, dict) or not isinstance(raw.get("received_at"), str):
        return None
    ttft = raw.get("time_to_first_token_ms")
    return AgentTimings(
        slot=int(raw.get("slot", -1)),
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        cached_tokens=int(raw.get("cached_tokens") or 0),
        time_to_first_token_ms=float(ttft) if isinstance(ttft, (int, float)) else None,
        received_at=datetime.fromisoformat(raw["received_at"]),
    )


async def _llama_get(llama_url: str, key: str, path: str) -> Any:
    """GET on llama-server itself (its own key, which only the demo and the proxy hold)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.get(f"{llama_url}{path}", headers={"Authorization": f"Bearer {key}"}) as resp,
        ):
            return await resp.json() if resp.status == 200 else None
    except aiohttp.ClientError, TimeoutError, ValueError:
        return None


async def llama_slots(llama_url: str, key: str) -> list[Json]:
    """llama-server's /slots, or [] when it does not answer."""
    slots = await _llama_get(llama_url, key, "/slots")
    return slots if isinstance(slots, list) else []


async def can_call_tools(llama_url: str, key: str) -> bool:
    """Whether the served model's chat template can call tools (/props), as the integration's
    "model cannot call tools" repair decides."""
    props = await _llama_get(llama_url, key, "/props")
    caps = (props or {}).get("chat_template_caps") if isinstance(props, dict) else None
    return bool(isinstance(caps, dict) and caps.get("supports_tool_calls"))


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
