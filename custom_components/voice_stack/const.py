"""Constants for the Voice Stack integration."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

DOMAIN: Final = "voice_stack"
LOGGER: Final = logging.getLogger(__package__)

# Config entry data: the server (usually the auth proxy) and the key Voice Stack sends it.
CONF_URL: Final = "url"
CONF_API_KEY: Final = "api_key"
# Entry option: the gateway's HTTP side port, e.g. http://host:10301.
CONF_GATEWAY_URL: Final = "gateway_url"

# Subentry types.
SUBENTRY_CONVERSATION: Final = "conversation"
SUBENTRY_AI_TASK: Final = "ai_task_data"

# Agent (subentry) options.
CONF_MODEL: Final = "model"
CONF_PROMPT: Final = "prompt"
CONF_LLM_HASS_API: Final = "llm_hass_api"
CONF_SLOTS: Final = "slots"  # the agent's slot pool, e.g. [0] or [0, 1]
CONF_SLOT: Final = "slot"  # entries of version 1.1 held one slot number; migrated to CONF_SLOTS
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

# A warm-up evaluates a long prompt, maybe on a slow CPU; it runs in the background.
WARM_TIMEOUT: Final = 300.0

# Service devices of a config entry (and the coordinator that feeds each).
DEVICE_LLM: Final = "llm_server"
DEVICE_PROXY: Final = "auth_proxy"
DEVICE_GATEWAY: Final = "gateway"
DEVICE_ASR: Final = "asr"
DEVICE_TTS: Final = "tts"
GATEWAY_DEVICES: Final = (DEVICE_GATEWAY, DEVICE_ASR, DEVICE_TTS)

DOCS_URL: Final = "https://github.com/voice-stack/voice-stack/blob/main/docs"

# Repair issues (translation keys; the ids add the entry, and the agent or slot: see repairs.py).
ISSUE_UNIFIED_KV: Final = "unified_kv_cache"
ISSUE_METRICS_DISABLED: Final = "metrics_disabled"
ISSUE_SLOTS_DISABLED: Final = "slots_endpoint_disabled"
ISSUE_PROXY_OPEN: Final = "proxy_accepts_without_key"
ISSUE_SERVER_OPEN: Final = "server_has_no_api_key"
ISSUE_GENERAL_KEY: Final = "general_key_in_use"
ISSUE_PROXY_SLOT_COUNT: Final = "proxy_slot_count_mismatch"
ISSUE_SHARED_SLOT: Final = "shared_slot"
ISSUE_SLOT_OUT_OF_RANGE: Final = "slot_out_of_range"
ISSUE_NO_TOOL_CALLING: Final = "no_tool_calling"
ISSUE_SLOT_NOT_RESERVED: Final = "slot_not_reserved"
ISSUE_CONTEXT_TOO_SMALL: Final = "context_too_small"
