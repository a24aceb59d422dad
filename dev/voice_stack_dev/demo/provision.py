"""Set HA up as a user would in the UI: onboarding, config flows, exposure, an Assist pipeline.

Every step first looks at what exists, so a second run reuses the same owner, entries and
pipeline (and only re-points an entry whose server moved to another port).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ha_client import HomeAssistantClient, Json
from . import http_config
from .entries import Agent, ensure_agent, ensure_voice_stack, ensure_wyoming, pick, registry
from .errors import DemoError
from .ha_config import LIGHT_UNIQUE_ID
from .onboarding import LANGUAGE, onboard_or_login, remove_failed_onboarding_extras, wait_running
from .state import DemoState

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
    http: http_config.HttpSettings


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
    http = await http_config.confirm(ha, hass_port)  # the countdown dialog's Confirm
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
        await http_config.dismiss_yaml_notice(ha)
    return Setup(pipeline_id, entry_id, agent, light, plan.prefer_local_intents, http)
