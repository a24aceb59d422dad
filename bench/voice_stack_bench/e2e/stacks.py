"""Both stacks in one Home Assistant, set up only through its own APIs (the dialogs' calls).

- Voice Stack: the demo's provisioning (onboarding, our entry with the proxy's agent key, our
  agent on slot 0, HA's wyoming integration on the gateway, a pipeline).
- Stock: HA core's `llama_cpp` config flow pointed at llama-server itself as its docs say (the
  server's URL ending in `/v1`, its `--api-key`), the model it lists, HA's default prompt; and
  HA's wyoming config flow on wyoming-openai 0.8.0; a pipeline of its own.

Both agents get the same settings the demo gives SmolLM2: no LLM API (it cannot call tools, and
tools would only lengthen the prompt), temperature 0.2, at most 64 tokens. Neither pipeline
prefers local intents: every request is a question for the language model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voice_stack_dev.demo.provision import (
    ENTRIES,
    Agent,
    AgentPlan,
    Setup,
    add_wyoming,
    edit_dialog,
    ensure_agent,
    ensure_pipeline,
    pick,
    provision,
    registry,
    run_flow,
    wait_loaded,
)
from voice_stack_dev.demo.services import DemoError, Role
from voice_stack_dev.ha_client import HomeAssistantClient
from voice_stack_dev.paths import MODEL_FILES

from .servers import WYOMING_OPENAI, Servers

STOCK_PIPELINE = "Stock llama_cpp + wyoming-openai"
PLAN = AgentPlan(MODEL_FILES["smollm2"], tool_calling=False, control=False, commands_to_agent=True)
MAX_TOKENS = int(PLAN.agent_options()["max_tokens"])
# HA core's llama_cpp agent: its reconfigure dialog with "Recommended model settings" off, so
# that it samples as our agent does; its default prompt and top_p are kept.
STOCK_OPTIONS: dict[str, Any] = {"recommended": False, **PLAN.agent_options()}


@dataclass(frozen=True)
class Pipeline:
    """One stack as the satellites use it."""

    name: str  # "voice_stack" | "stock"
    pipeline_id: str
    agent: str  # its conversation entity


@dataclass(frozen=True)
class Stacks:
    voice_stack: Pipeline
    stock: Pipeline
    setup: Setup  # our entry and agent (to give the agent a slot pool later)


async def set_up(ha: HomeAssistantClient, servers: Servers, *, stock_via_proxy: bool) -> Stacks:
    """Onboard HA, then both stacks, each in its own pipeline.

    Stock talks to llama-server itself (its URL and --api-key), or with `stock_via_proxy` to
    the auth proxy with the general key, which keeps it off the reserved slots."""
    setup = await provision_voice_stack(ha, servers)
    ours = Pipeline("voice_stack", setup.pipeline_id, setup.agent.entity_id)
    if stock_via_proxy:
        url, key = servers.url(Role.PROXY), servers.state.proxy_key
    else:
        url, key = servers.url(Role.LLAMA), servers.state.llama_key
    agent = await add_llama_cpp(ha, f"{url}/v1", key)
    stt, tts = await wyoming_openai_entities(ha, servers.wyoming_openai_port)
    stock_id = await ensure_pipeline(
        ha, agent, stt, tts, prefer_local=False, name=STOCK_PIPELINE, preferred=False
    )
    return Stacks(ours, Pipeline("stock", stock_id, agent), setup)


async def provision_voice_stack(ha: HomeAssistantClient, servers: Servers) -> Setup:
    """Onboard HA and set up Voice Stack on these servers as the demo does (PLAN's agent)."""
    return await provision(
        ha,
        servers.state,
        PLAN,
        hass_port=servers.state.ports[Role.HASS],
        proxy_url=servers.url(Role.PROXY),
        gateway_port=servers.state.ports[Role.GATEWAY],
        gateway_http_url=servers.url(Role.GATEWAY),
    )


async def add_llama_cpp(ha: HomeAssistantClient, base_url: str, api_key: str) -> str:
    """HA core's llama.cpp integration: its config flow creates the entry and one agent; its
    reconfigure dialog then gets STOCK_OPTIONS. Returns the agent's entity id."""
    result = await run_flow(
        ha,
        f"{ENTRIES}/flow",
        {"handler": "llama_cpp", "show_advanced_options": False},
        {"base_url": base_url, "api_key": api_key},
        what="llama.cpp config flow",
    )
    entry_id = result["result"]["entry_id"]
    await wait_loaded(ha, "llama_cpp", entry_id)
    agent = pick(await registry(ha), "llama_cpp", "conversation", entry_id)
    await edit_dialog(
        ha,
        f"{ENTRIES}/subentries/flow",
        {"handler": [entry_id, "conversation"], "subentry_id": agent["config_subentry_id"]},
        STOCK_OPTIONS,
        what="llama.cpp agent (reconfigure)",
    )
    await wait_loaded(ha, "llama_cpp", entry_id)
    entity_id: str = agent["entity_id"]
    return entity_id


async def wyoming_openai_entities(ha: HomeAssistantClient, port: int) -> tuple[str, str]:
    """HA's wyoming integration on wyoming-openai; its STT and TTS entities."""
    entry_id = await add_wyoming(ha, port, WYOMING_OPENAI)
    entities = await registry(ha)
    stt = pick(entities, "wyoming", "stt", entry_id)["entity_id"]
    tts = pick(entities, "wyoming", "tts", entry_id)["entity_id"]
    return str(stt), str(tts)


async def give_pool(ha: HomeAssistantClient, stacks: Stacks, slots: tuple[int, ...]) -> Agent:
    """Our agent's slot pool (its reconfigure dialog's slot boxes); saving reloads the entry."""
    options = {**PLAN.agent_options(), "slots": [str(slot) for slot in slots]}
    agent = await ensure_agent(ha, stacks.setup.voice_stack_entry, options)
    if agent.entity_id != stacks.voice_stack.agent:
        raise DemoError("Home Assistant", f"our agent changed from {stacks.voice_stack.agent}")
    return agent
