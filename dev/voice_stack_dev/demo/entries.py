"""The integrations' entries, created through their config flows as the "Add integration"
dialog does, and found again (re-pointed only if a server moved) on a second run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..ha_client import HomeAssistantClient, Json
from .errors import DemoError
from .flows import edit_dialog, run_flow
from .onboarding import ENTRIES
from .state import DemoState

DOMAIN = "voice_stack"


async def _entries(ha: HomeAssistantClient, domain: str) -> list[Json]:
    entries: list[Json] = await ha.request("GET", f"{ENTRIES}/entry?domain={domain}")
    return entries


async def ensure_voice_stack(
    ha: HomeAssistantClient,
    state: DemoState,
    *,
    proxy_url: str,
    agent_key: str,
    gateway_http_url: str,
) -> str:
    """The voice_stack entry through its config flow (reconfigured if the proxy moved), given
    the proxy's agent key: the reserved slots are the agents' alone.

    HA does not show an entry's URL over its API, so the state file remembers it.
    """
    answers = {"url": proxy_url, "api_key": agent_key, "gateway_url": gateway_http_url}
    for entry in await _entries(ha, DOMAIN):
        entry_id: str = entry["entry_id"]
        if state.proxy_url != proxy_url:  # the proxy got another port
            await run_flow(
                ha,
                f"{ENTRIES}/flow",
                {"handler": DOMAIN, "entry_id": entry_id},
                answers,
                what="Voice Stack reconfigure",
                done_reasons=("reconfigure_successful",),
            )
            await wait_loaded(ha, DOMAIN, entry_id)  # saving reloaded it
            state.proxy_url = proxy_url
        else:
            await _reload_if_retrying(ha, DOMAIN, entry)
        await edit_dialog(
            ha,
            f"{ENTRIES}/options/flow",
            {"handler": entry_id},
            {"gateway_url": gateway_http_url},
            what="Voice Stack options (gateway URL)",
        )
        await wait_loaded(ha, DOMAIN, entry_id)
        return entry_id
    result = await run_flow(
        ha,
        f"{ENTRIES}/flow",
        {"handler": DOMAIN, "show_advanced_options": False},
        answers,
        what="Voice Stack config flow",
    )
    entry_id = result["result"]["entry_id"]
    await wait_loaded(ha, DOMAIN, entry_id)
    state.proxy_url = proxy_url
    return entry_id


async def _reload_if_retrying(ha: HomeAssistantClient, domain: str, entry: Json) -> None:
    """HA boots alongside the servers: an entry that found its server not up yet waits for
    its next retry; reload it now (the entry menu's Reload) instead."""
    if entry["state"] != "loaded":
        # 403: it is being set up right now; waiting is enough.
        await ha.request("POST", f"{ENTRIES}/entry/{entry['entry_id']}/reload", ok=(200, 403))
    await wait_loaded(ha, domain, entry["entry_id"])


async def wait_loaded(ha: HomeAssistantClient, domain: str, entry_id: str) -> None:
    deadline = time.monotonic() + 60
    state = "?"
    while time.monotonic() < deadline:
        for entry in await _entries(ha, domain):
            if entry["entry_id"] == entry_id:
                state = entry["state"]
                if state == "loaded":
                    return
                if state in ("setup_error", "migration_error", "failed_unload"):
                    raise DemoError(
                        "Home Assistant",
                        f"{domain} entry did not load ({state}: {entry.get('reason')})",
                    )
        await asyncio.sleep(0.5)
    raise DemoError("Home Assistant", f"{domain} entry still {state} after 60 s")


async def ensure_wyoming(ha: HomeAssistantClient, port: int, state: DemoState) -> str:
    """HA's own wyoming integration pointed at the gateway (the "Add integration" dialog).

    HA does not show an entry's host/port over its API, so the state file remembers which
    gateway port the existing entry was created for.
    """
    for entry in await _entries(ha, "wyoming"):
        entry_id: str = entry["entry_id"]
        if state.wyoming_port == port:
            await _reload_if_retrying(ha, "wyoming", entry)
            return entry_id
        await ha.request("DELETE", f"{ENTRIES}/entry/{entry_id}")
    entry_id = await add_wyoming(ha, port, "gateway")
    state.wyoming_port = port
    return entry_id


async def add_wyoming(ha: HomeAssistantClient, port: int, server: str) -> str:
    """A new wyoming entry for the Wyoming server on 127.0.0.1:`port`, loaded; its id."""
    result = await run_flow(
        ha,
        f"{ENTRIES}/flow",
        {"handler": "wyoming", "show_advanced_options": False},
        {"host": "127.0.0.1", "port": port},
        what=f"Wyoming config flow ({server})",
    )
    entry_id: str = result["result"]["entry_id"]
    await wait_loaded(ha, "wyoming", entry_id)
    return entry_id


async def registry(ha: HomeAssistantClient) -> list[Json]:
    entities: list[Json] = await ha.ws("config/entity_registry/list")
    return entities


def pick(entities: list[Json], platform: str, domain: str, entry_id: str | None = None) -> Json:
    for ent in entities:
        if (
            ent["platform"] == platform
            and ent["entity_id"].startswith(domain + ".")
            and (entry_id is None or ent.get("config_entry_id") == entry_id)
        ):
            return ent
    raise DemoError("Home Assistant", f"no {domain} entity from {platform} was created")


@dataclass(frozen=True)
class Agent:
    """Our conversation agent as the pipeline uses it."""

    entity_id: str
    subentry_id: str
    slot: int | None


async def ensure_agent(ha: HomeAssistantClient, entry_id: str, options: Mapping[str, Any]) -> Agent:
    """Our conversation agent: the one the entry's flow created, else add one (a subentry flow);
    then its reconfigure dialog gets `options` (saved only if one differs)."""
    subentries: list[Json] = await ha.ws("config_entries/subentries/list", entry_id=entry_id)
    if not any(s.get("subentry_type") == "conversation" for s in subentries):
        await run_flow(
            ha,
            f"{ENTRIES}/subentries/flow",
            {"handler": [entry_id, "conversation"]},
            {"name": "Voice Stack conversation", "slots": ["0"], **options},
            what="Voice Stack agent (subentry flow)",
        )
    for _ in range(40):
        try:
            agent = pick(await registry(ha), DOMAIN, "conversation", entry_id)
        except DemoError:
            await asyncio.sleep(0.25)
            continue
        shown = await edit_dialog(
            ha,
            f"{ENTRIES}/subentries/flow",
            {"handler": [entry_id, "conversation"], "subentry_id": agent["config_subentry_id"]},
            options,
            what="Voice Stack agent (reconfigure)",
        )
        await wait_loaded(ha, DOMAIN, entry_id)  # saving reloads the entry
        slots = shown.get("slots") or []
        return Agent(
            agent["entity_id"], agent["config_subentry_id"], int(slots[0]) if slots else None
        )
    raise DemoError("Home Assistant", "the Voice Stack conversation entity did not appear")
