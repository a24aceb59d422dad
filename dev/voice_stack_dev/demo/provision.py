"""Set HA up as a user would in the UI: onboarding, config flows, exposure, an Assist pipeline.

Every step first looks at what exists, so a second run reuses the same owner, entries and
pipeline (and only re-points an entry whose server moved to another port).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from .errors import DemoError
from .flows import edit_dialog, run_flow
from .ha_client import HomeAssistantClient, Json
from .ha_config import LIGHT_UNIQUE_ID
from .state import DemoState

DOMAIN = "voice_stack"
PIPELINE_NAME = "Voice Stack demo"
LANGUAGE = "en"
ENTRIES = "/api/config/config_entries"
RUNNING_TIMEOUT = 120.0
# A 135M model on a shared CPU: short answers keep one turn within a few seconds.
AGENT_OPTIONS: dict[str, Any] = {"max_tokens": 64}
ONBOARDING_EXTRAS = ("google_translate", "met", "radio_browser")
_STEPS = ("user", "core_config", "analytics", "integration")


@dataclass
class Provisioned:
    """What the pipeline run needs to know."""

    pipeline_id: str
    voice_stack_entry: str
    agent_entity: str
    agent_slot: int | None
    stt_entity: str
    tts_entity: str
    light_entity: str


async def onboard_or_login(ha: HomeAssistantClient, state: DemoState) -> None:
    """Create the owner on a fresh HA (the onboarding wizard), else log in with the form."""
    # Once every step is done HA stops serving /api/onboarding (404).
    listing = await ha.request("GET", "/api/onboarding", auth=False, ok=(200, 404)) or []
    steps = {s["step"]: s["done"] for s in listing} or dict.fromkeys(_STEPS, True)
    if not steps.get("user"):
        created = await ha.request(
            "POST",
            "/api/onboarding/users",
            json={
                "client_id": ha.client_id,
                "name": "Demo Owner",
                "username": state.username,
                "password": state.password,
                "language": LANGUAGE,
            },
            auth=False,
        )
        await ha.token_from_code(created["auth_code"])
    else:
        await ha.login(state.username, state.password)
    if not steps.get("core_config"):
        await ha.request("POST", "/api/onboarding/core_config", json={})
    if not steps.get("analytics"):
        await ha.request("POST", "/api/onboarding/analytics", json={})
    if not steps.get("integration"):
        await ha.request(
            "POST",
            "/api/onboarding/integration",
            json={"client_id": ha.client_id, "redirect_uri": ha.redirect_uri},
        )
    state.onboarded = True


async def remove_failed_onboarding_extras(ha: HomeAssistantClient) -> None:
    """Onboarding also adds Google Translate TTS, Met and Radio Browser; their packages are not
    installed here (and they would go online), so delete whatever of them failed to set up."""
    entries: list[Json] = await ha.request("GET", f"{ENTRIES}/entry")
    for entry in entries:
        if entry["domain"] in ONBOARDING_EXTRAS and entry["state"] != "loaded":
            await ha.request("DELETE", f"{ENTRIES}/entry/{entry['entry_id']}")


async def wait_running(ha: HomeAssistantClient) -> None:
    """HA serves HTTP before every integration is set up; wait for state RUNNING."""
    deadline = time.monotonic() + RUNNING_TIMEOUT
    while time.monotonic() < deadline:
        config = await ha.request("GET", "/api/config")
        if config.get("state") == "RUNNING":
            return
        await asyncio.sleep(0.5)
    raise DemoError("Home Assistant", f"not RUNNING after {RUNNING_TIMEOUT:.0f} s", ha.log_path)


async def _entries(ha: HomeAssistantClient, domain: str) -> list[Json]:
    entries: list[Json] = await ha.request("GET", f"{ENTRIES}/entry?domain={domain}")
    return entries


async def ensure_voice_stack(
    ha: HomeAssistantClient, proxy_url: str, agent_key: str, gateway_http_url: str
) -> str:
    """The voice_stack entry through its config flow (reconfigured if the proxy moved), given
    the proxy's agent key: the reserved slots are the agents' alone."""
    answers = {"url": proxy_url, "api_key": agent_key, "gateway_url": gateway_http_url}
    for entry in await _entries(ha, DOMAIN):
        entry_id: str = entry["entry_id"]
        if entry["title"] != proxy_url.split("://", 1)[1]:  # the proxy got another port
            await run_flow(
                ha,
                f"{ENTRIES}/flow",
                {"handler": DOMAIN, "entry_id": entry_id},
                answers,
                what="Voice Stack reconfigure",
                done_reasons=("reconfigure_successful",),
            )
            await _wait_loaded(ha, DOMAIN, entry_id)  # saving reloaded it
        else:
            await _reload_if_retrying(ha, DOMAIN, entry)
        await edit_dialog(
            ha,
            f"{ENTRIES}/options/flow",
            {"handler": entry_id},
            {"gateway_url": gateway_http_url},
            what="Voice Stack options (gateway URL)",
        )
        await _wait_loaded(ha, DOMAIN, entry_id)
        return entry_id
    result = await run_flow(
        ha,
        f"{ENTRIES}/flow",
        {"handler": DOMAIN, "show_advanced_options": False},
        answers,
        what="Voice Stack config flow",
    )
    entry_id = result["result"]["entry_id"]
    await _wait_loaded(ha, DOMAIN, entry_id)
    return entry_id


async def _reload_if_retrying(ha: HomeAssistantClient, domain: str, entry: Json) -> None:
    """HA boots alongside the servers: an entry that found its server not up yet waits for
    its next retry; reload it now (the entry menu's Reload) instead."""
    if entry["state"] != "loaded":
        # 403: it is being set up right now; waiting is enough.
        await ha.request("POST", f"{ENTRIES}/entry/{entry['entry_id']}/reload", ok=(200, 403))
    await _wait_loaded(ha, domain, entry["entry_id"])


async def _wait_loaded(ha: HomeAssistantClient, domain: str, entry_id: str) -> None:
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
                        ha.log_path,
                    )
        await asyncio.sleep(0.5)
    raise DemoError("Home Assistant", f"{domain} entry still {state} after 60 s", ha.log_path)


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
    result = await run_flow(
        ha,
        f"{ENTRIES}/flow",
        {"handler": "wyoming", "show_advanced_options": False},
        {"host": "127.0.0.1", "port": port},
        what="Wyoming config flow (gateway)",
    )
    entry_id = result["result"]["entry_id"]
    await _wait_loaded(ha, "wyoming", entry_id)
    state.wyoming_port = port
    return entry_id


async def _registry(ha: HomeAssistantClient) -> list[Json]:
    entities: list[Json] = await ha.ws("config/entity_registry/list")
    return entities


def _pick(entities: list[Json], platform: str, domain: str, entry_id: str | None = None) -> Json:
    for ent in entities:
        if (
            ent["platform"] == platform
            and ent["entity_id"].startswith(domain + ".")
            and (entry_id is None or ent.get("config_entry_id") == entry_id)
        ):
            return ent
    raise DemoError("Home Assistant", f"no {domain} entity from {platform} was created")


async def ensure_agent(ha: HomeAssistantClient, entry_id: str) -> tuple[str, int | None]:
    """Our conversation agent: the one the entry's flow created, else add one (a subentry flow)."""
    subentries: list[Json] = await ha.ws("config_entries/subentries/list", entry_id=entry_id)
    if not any(s.get("subentry_type") == "conversation" for s in subentries):
        await run_flow(
            ha,
            f"{ENTRIES}/subentries/flow",
            {"handler": [entry_id, "conversation"]},
            {"name": "Voice Stack conversation", "slots": ["0"]},
            what="Voice Stack agent (subentry flow)",
        )
    for _ in range(40):
        try:
            agent = _pick(await _registry(ha), DOMAIN, "conversation", entry_id)
        except DemoError:
            await asyncio.sleep(0.25)
            continue
        shown = await edit_dialog(
            ha,
            f"{ENTRIES}/subentries/flow",
            {"handler": [entry_id, "conversation"], "subentry_id": agent["config_subentry_id"]},
            AGENT_OPTIONS,
            what="Voice Stack agent (reconfigure)",
        )
        await _wait_loaded(ha, DOMAIN, entry_id)  # saving reloads the entry
        slots = shown.get("slots") or []
        return agent["entity_id"], int(slots[0]) if slots else None
    raise DemoError("Home Assistant", "the Voice Stack conversation entity did not appear")


async def expose_light(ha: HomeAssistantClient) -> str:
    """Expose the demo light to Assist (Settings > Voice assistants > Expose)."""
    light = next(
        (e for e in await _registry(ha) if e.get("unique_id") == LIGHT_UNIQUE_ID),
        None,
    )
    if light is None:
        raise DemoError("Home Assistant", "the demo light (template) was not created", ha.log_path)
    await ha.ws(
        "homeassistant/expose_entity",
        assistants=["conversation"],
        entity_ids=[light["entity_id"]],
        should_expose=True,
    )
    entity_id: str = light["entity_id"]
    return entity_id


async def _language(ha: HomeAssistantClient, kind: str, engine: str) -> str:
    """The engine's language matching ours ("en", "en_US"...), as the pipeline dialog picks."""
    listing = await ha.ws(f"{kind}/engine/list", language=LANGUAGE)
    for provider in listing.get("providers", []):
        if provider.get("engine_id") == engine:
            langs: list[str] = provider.get("supported_languages") or []
            if langs:
                return langs[0]
    raise DemoError("Home Assistant", f"{engine} offers no language matching {LANGUAGE!r}")


async def ensure_pipeline(ha: HomeAssistantClient, agent: str, stt: str, tts: str) -> str:
    """An Assist pipeline: gateway STT/TTS, our agent, no local-intent shortcut; preferred."""
    stt_language = await _language(ha, "stt", stt)
    tts_language = await _language(ha, "tts", tts)
    voices = await ha.ws("tts/engine/voices", engine_id=tts, language=tts_language)
    voice_list: list[Json] = voices.get("voices") or []
    fields: dict[str, Any] = {
        "name": PIPELINE_NAME,
        "language": LANGUAGE,
        "conversation_engine": agent,
        "conversation_language": LANGUAGE,
        "stt_engine": stt,
        "stt_language": stt_language,
        "tts_engine": tts,
        "tts_language": tts_language,
        "tts_voice": voice_list[0]["voice_id"] if voice_list else None,
        "wake_word_entity": None,
        "wake_word_id": None,
        "prefer_local_intents": False,  # every request goes to our agent
    }
    listing = await ha.ws("assist_pipeline/pipeline/list")
    existing = next((p for p in listing["pipelines"] if p["name"] == PIPELINE_NAME), None)
    if existing is None:
        created = await ha.ws("assist_pipeline/pipeline/create", **fields)
        pipeline_id: str = created["id"]
    else:
        pipeline_id = existing["id"]
        await ha.ws("assist_pipeline/pipeline/update", pipeline_id=pipeline_id, **fields)
    await ha.ws("assist_pipeline/pipeline/set_preferred", pipeline_id=pipeline_id)
    return pipeline_id


async def provision(
    ha: HomeAssistantClient,
    state: DemoState,
    *,
    proxy_url: str,
    gateway_port: int,
    gateway_http_url: str,
) -> Provisioned:
    """Everything, in the order a user would click through it."""
    await onboard_or_login(ha, state)
    await wait_running(ha)
    await ha.connect_ws()
    light = await expose_light(ha)
    entry_id = await ensure_voice_stack(ha, proxy_url, state.agent_key, gateway_http_url)
    agent, slot = await ensure_agent(ha, entry_id)
    wyoming_entry = await ensure_wyoming(ha, gateway_port, state)
    entities = await _registry(ha)
    stt = _pick(entities, "wyoming", "stt", wyoming_entry)["entity_id"]
    tts = _pick(entities, "wyoming", "tts", wyoming_entry)["entity_id"]
    pipeline_id = await ensure_pipeline(ha, agent, stt, tts)
    await remove_failed_onboarding_extras(ha)
    return Provisioned(pipeline_id, entry_id, agent, slot, stt, tts, light)
