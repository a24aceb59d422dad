"""Diagnostics: server facts and last timings, never the key or prompts."""

from __future__ import annotations

from typing import Any

from homeassistant.components.diagnostics import async_redact_data
from homeassistant.core import HomeAssistant

from .const import CONF_API_KEY, CONF_GATEWAY_URL, CONF_PROMPT, CONF_URL
from .coordinator import health_diagnostics
from .models import VoiceStackConfigEntry

# URLs can carry user:pass@ or a host name the user does not want to share.
TO_REDACT = {CONF_API_KEY, CONF_PROMPT, CONF_URL, CONF_GATEWAY_URL}
_PROPS_KEYS = (
    "total_slots",
    "model_path",
    "model_alias",
    "build_info",
    "chat_template_caps",
    "is_sleeping",
    "modalities",
)


async def async_get_config_entry_diagnostics(
    hass: HomeAssistant, entry: VoiceStackConfigEntry
) -> dict[str, Any]:
    """Return diagnostics for a config entry."""
    data = entry.runtime_data
    props = data.props
    warmer = data.warmer
    state = warmer.state if warmer else None
    return {
        "entry": {
            "data": async_redact_data(dict(entry.data), TO_REDACT),
            "api_key_configured": bool(entry.data.get(CONF_API_KEY)),
            "options": async_redact_data(dict(entry.options), TO_REDACT),
        },
        "agents": {
            sub.subentry_id: {
                "type": sub.subentry_type,
                "title": sub.title,
                "options": async_redact_data(dict(sub.data), TO_REDACT),
            }
            for sub in entry.subentries.values()
        },
        "server": {
            "props": {k: props.get(k) for k in _PROPS_KEYS if k in props},
            "n_ctx": (props.get("default_generation_settings") or {}).get("n_ctx"),
            "slots": [
                {k: s.get(k) for k in ("id", "n_ctx", "is_processing")}
                for s in (state.slots if state else [])
            ],
            "unified_kv": state.unified_kv if state else None,
            "proxy_status": state.proxy_status if state else None,
            "prefix_tokens": dict(state.prefix_tokens) if state else {},
            "slot_save_supported": warmer.save_supported if warmer else None,
        },
        "timings": {key: t.as_dict() for key, t in data.timings.items()},
        "health": async_redact_data(health_diagnostics(data.coordinators), TO_REDACT),
    }
