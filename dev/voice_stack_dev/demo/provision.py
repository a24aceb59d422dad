"""Set HA up as a user would in the UI: onboarding, config flows, exposure, an Assist pipeline.

Every step first looks at what exists, so a second run reuses the same owner, entries and
pipeline (and only re-points an entry whose server moved to another port).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..ha_client import HomeAssistantClient, Json
from . import ha_config
from .ha_config import LIGHT_UNIQUE_ID
from .services import DemoError, DemoState

# Drive HA data-entry flows over REST the way the frontend's dialogs do.
MAX_STEPS = 8


async def run_flow(
    ha: HomeAssistantClient,
    base: str,
    start: Json,
    answers: Mapping[str, Any],
    *,
    what: str,
    done_reasons: tuple[str, ...] = (),
) -> Json:
    """Start a flow at `base` and answer each form from `answers` until it finishes.

    Fields the answers do not name keep the form's defaults (as a user who only fills
    the required fields). Menus pick the option named in answers["next_step_id"], else the first.
    """
    result: Json = await ha.request("POST", base, json=start)
    for _ in range(MAX_STEPS):
        kind = result.get("type")
        if kind == "create_entry" or (kind == "abort" and result.get("reason") in done_reasons):
            return result
        if kind == "abort":
            raise DemoError("Home Assistant", f"{what}: aborted ({result.get('reason')})")
        if result.get("errors"):
            raise DemoError("Home Assistant", f"{what}: {result['errors']}")
        if kind == "menu":
            options = result.get("menu_options") or []
            choice = answers.get("next_step_id") or (options[0] if options else None)
            payload: Json = {"next_step_id": choice}
        elif kind == "form":
            payload = fill_form(result.get("data_schema") or [], answers)
        else:
            raise DemoError("Home Assistant", f"{what}: unexpected flow step {kind}")
        result = await ha.request("POST", f"{base}/{result['flow_id']}", json=payload)
    raise DemoError("Home Assistant", f"{what}: flow did not finish in {MAX_STEPS} steps")


async def edit_dialog(
    ha: HomeAssistantClient, base: str, start: Json, wanted: Mapping[str, Any], *, what: str
) -> dict[str, Any]:
    """Open an edit dialog (options, reconfigure); save only if a value differs from `wanted`.

    Returns the values the dialog showed (HA's API never returns entry data otherwise).
    Saving reloads the entry, so an unchanged dialog is closed without saving.
    """
    form: Json = await ha.request("POST", base, json=start)
    if form.get("type") != "form":
        raise DemoError("Home Assistant", f"{what}: {form.get('reason', form)}")
    schema: list[Json] = form.get("data_schema") or []
    shown = {
        str(f.get("name")): (f.get("description") or {}).get("suggested_value", f.get("default"))
        for f in schema
    }
    if all(shown.get(key) == value for key, value in wanted.items()):
        await ha.request("DELETE", f"{base}/{form['flow_id']}")
        return shown
    result = await ha.request("POST", f"{base}/{form['flow_id']}", json=fill_form(schema, wanted))
    if result.get("errors") or result.get("type") not in ("create_entry", "abort"):
        raise DemoError("Home Assistant", f"{what}: {result.get('errors') or result}")
    if result["type"] == "abort" and result.get("reason") != "reconfigure_successful":
        raise DemoError("Home Assistant", f"{what}: aborted ({result.get('reason')})")
    return shown


def fill_form(schema: list[Json], answers: Mapping[str, Any]) -> Json:
    """The form payload as the dialog submits it: our answers, else what it pre-fills."""
    payload: Json = {}
    for field in schema:
        name = str(field.get("name"))
        suggested = (field.get("description") or {}).get("suggested_value")
        if name in answers:
            payload[name] = answers[name]
        elif suggested is not None:
            payload[name] = suggested
        elif field.get("required") and "default" in field:
            payload[name] = field["default"]
        elif field.get("type") == "expandable":  # a section: fill its own fields
            payload[name] = fill_form(field.get("schema") or [], answers)
    return payload


# First contact with a Home Assistant: the onboarding wizard or the login form, then RUNNING.
LANGUAGE = "en"
ENTRIES = "/api/config/config_entries"
RUNNING_TIMEOUT = 120.0
ONBOARDING_EXTRAS = ("google_translate", "met", "radio_browser")
_STEPS = ("user", "core_config", "analytics", "integration")


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
    raise DemoError("Home Assistant", f"not RUNNING after {RUNNING_TIMEOUT:.0f} s")


# The integrations' entries, created through their config flows as the "Add integration"
# dialog does, and found again (re-pointed only if a server moved) on a second run.
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


PIPELINE_NAME = "Voice Stack demo"
ASSIST_API = "assist"  # HA's own LLM API: the agent controls exposed devices through its tools


@dataclass(frozen=True)
class AgentPlan:
    """How the agent and the pipeline are set up for the model being served."""

    model: str  # the GGUF's file name
    tool_calling: bool  # llama-server says the model's chat template can call tools
    control: bool  # the agent gets HA's Assist API (device control) and a longer answer
    commands_to_agent: bool  # the pipeline sends commands to the agent, not HA's intents

    @property
    def prefer_local_intents(self) -> bool:
        return not self.commands_to_agent

    def agent_options(self) -> dict[str, Any]:
        """The agent's reconfigure dialog: SmolLM2-135M wanders at the default temperature
        (0.6) and a short answer keeps a turn within seconds on a shared CPU."""
        if self.control:
            return {"max_tokens": 128, "temperature": 0.6, "llm_hass_api": [ASSIST_API]}
        return {"max_tokens": 64, "temperature": 0.2, "llm_hass_api": []}


@dataclass(frozen=True)
class Setup:
    """What the spoken requests need to know, and what a second run must find again."""

    pipeline_id: str
    voice_stack_entry: str
    agent: Agent
    light_entity: str
    prefer_local_intents: bool
    http: ha_config.HttpSettings


async def expose_light(ha: HomeAssistantClient) -> str:
    """Expose the demo light to Assist (Settings > Voice assistants > Expose)."""
    light = next(
        (e for e in await registry(ha) if e.get("unique_id") == LIGHT_UNIQUE_ID),
        None,
    )
    if light is None:
        raise DemoError("Home Assistant", "the demo light (template) was not created")
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


async def ensure_pipeline(
    ha: HomeAssistantClient,
    agent: str,
    stt: str,
    tts: str,
    *,
    prefer_local: bool,
    name: str = PIPELINE_NAME,
    preferred: bool = True,
) -> str:
    """An Assist pipeline: gateway STT/TTS, our agent, and HA's "prefer handling commands
    locally" (its own intents answer what they know, the agent the rest), made the preferred
    one. A benchmark adds others (another `name`, agent, STT and TTS; `preferred=False`)."""
    stt_language = await _language(ha, "stt", stt)
    tts_language = await _language(ha, "tts", tts)
    voices = await ha.ws("tts/engine/voices", engine_id=tts, language=tts_language)
    voice_list: list[Json] = voices.get("voices") or []
    fields: dict[str, Any] = {
        "name": name,
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
        "prefer_local_intents": prefer_local,
    }
    listing = await ha.ws("assist_pipeline/pipeline/list")
    existing = next((p for p in listing["pipelines"] if p["name"] == name), None)
    if existing is None:
        created = await ha.ws("assist_pipeline/pipeline/create", **fields)
        pipeline_id: str = created["id"]
    else:
        pipeline_id = existing["id"]
        await ha.ws("assist_pipeline/pipeline/update", pipeline_id=pipeline_id, **fields)
    if preferred:
        await ha.ws("assist_pipeline/pipeline/set_preferred", pipeline_id=pipeline_id)
    return pipeline_id


async def provision(
    ha: HomeAssistantClient,
    state: DemoState,
    plan: AgentPlan,
    *,
    hass_port: int,
    proxy_url: str,
    gateway_port: int,
    gateway_http_url: str,
) -> Setup:
    """Everything, in the order a user would click through it."""
    await onboard_or_login(ha, state)
    await ha.connect_ws()
    http = await ha_config.confirm(ha, hass_port)  # the countdown dialog's Confirm
    await wait_running(ha)
    light = await expose_light(ha)
    entry_id = await ensure_voice_stack(
        ha,
        state,
        proxy_url=proxy_url,
        agent_key=state.agent_key,
        gateway_http_url=gateway_http_url,
    )
    agent = await ensure_agent(ha, entry_id, plan.agent_options())
    wyoming_entry = await ensure_wyoming(ha, gateway_port, state)
    entities = await registry(ha)
    stt = pick(entities, "wyoming", "stt", wyoming_entry)["entity_id"]
    tts = pick(entities, "wyoming", "tts", wyoming_entry)["entity_id"]
    pipeline_id = await ensure_pipeline(
        ha, agent.entity_id, stt, tts, prefer_local=plan.prefer_local_intents
    )
    await remove_failed_onboarding_extras(ha)
    if http.imported_now:
        await ha_config.dismiss_yaml_notice(ha)
    return Setup(pipeline_id, entry_id, agent, light, plan.prefer_local_intents, http)
