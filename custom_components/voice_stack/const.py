"""Constants for the Voice Stack integration."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

DOMAIN: Final = "voice_stack"
LOGGER: Final = logging.getLogger(__package__)

# Config entry data (contract 4).
CONF_URL: Final = "url"
CONF_API_KEY: Final = "api_key"
# Entry option (contract 4): the gateway's HTTP side port, e.g. http://host:10301.
CONF_GATEWAY_URL: Final = "gateway_url"

# Subentry types.
SUBENTRY_CONVERSATION: Final = "conversation"
SUBENTRY_AI_TASK: Final = "ai_task_data"

# Agent (subentry) options.
CONF_MODEL: Final = "model"
CONF_PROMPT: Final = "prompt"
CONF_LLM_HASS_API: Final = "llm_hass_api"
CONF_SLOT: Final = "slot"
CONF_TEMPERATURE: Final = "temperature"
CONF_MAX_TOKENS: Final = "max_tokens"
CONF_MAX_HISTORY: Final = "max_history"
CONF_TIMEOUT: Final = "timeout"
CONF_REASONING: Final = "reasoning"
CONF_PROMPT_LAYOUT: Final = "prompt_layout"
CONF_SAVE_SLOT: Final = "save_slot"

REASONING_HIDDEN: Final = "hidden"
REASONING_DISABLED: Final = "disabled"
REASONING_OPTIONS: Final = [REASONING_HIDDEN, REASONING_DISABLED]

LAYOUT_CACHE_STABLE: Final = "cache_stable"
LAYOUT_HA_DEFAULT: Final = "ha_default"
LAYOUT_OPTIONS: Final = [LAYOUT_CACHE_STABLE, LAYOUT_HA_DEFAULT]

DEFAULT_CONVERSATION_NAME: Final = "Voice Stack conversation"
DEFAULT_AI_TASK_NAME: Final = "Voice Stack AI Task"
DEFAULT_TEMPERATURE: Final = 0.6
DEFAULT_MAX_TOKENS: Final = 512
DEFAULT_MAX_HISTORY: Final = 10
DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_REASONING: Final = REASONING_HIDDEN
DEFAULT_PROMPT_LAYOUT: Final = LAYOUT_CACHE_STABLE
DEFAULT_SAVE_SLOT: Final = False

# What an agent uses for an option its subentry does not set; a new agent starts with these.
AGENT_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        CONF_TEMPERATURE: DEFAULT_TEMPERATURE,
        CONF_MAX_TOKENS: DEFAULT_MAX_TOKENS,
        CONF_MAX_HISTORY: DEFAULT_MAX_HISTORY,
        CONF_TIMEOUT: DEFAULT_TIMEOUT,
        CONF_REASONING: DEFAULT_REASONING,
        CONF_PROMPT_LAYOUT: DEFAULT_PROMPT_LAYOUT,
        CONF_SAVE_SLOT: DEFAULT_SAVE_SLOT,
    }
)

MIN_TIMEOUT: Final = 5.0
MAX_TIMEOUT: Final = 600.0

# Network timeouts (seconds) for the small metadata calls.
PROBE_TIMEOUT: Final = 10.0
CONNECT_TIMEOUT: Final = 10.0

# Max number of back and forth with the LLM for one turn.
MAX_TOOL_ITERATIONS: Final = 10

# How often the warm-slot watcher checks whether the server restarted.
WATCH_INTERVAL_S: Final = 30.0

# Repair issue ids (each suffixed per entry or subentry).
ISSUE_UNIFIED_KV: Final = "unified_kv_cache"
ISSUE_SHARED_SLOT: Final = "shared_slot"
ISSUE_SLOT_OUT_OF_RANGE: Final = "slot_out_of_range"
ISSUE_CONTEXT_TOO_SMALL: Final = "context_too_small"
ISSUE_NO_TOOL_CALLING: Final = "no_tool_calling"
ISSUE_SLOT_NOT_RESERVED: Final = "slot_not_reserved"
