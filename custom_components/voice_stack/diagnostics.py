"""Diagnostics: what each poller and the warm-up saw, the agents' options and last timings;
never the key, the prompts or the URLs."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from homeassistant.components.diagnostics import async_redact_data
from homeassistant.core import HomeAssistant

from .const import CONF_API_KEY, CONF_GATEWAY_URL, CONF_PROMPT, CONF_URL
from .coordinator import VoiceStackCoordinator
from .models import VoiceStackConfigEntry

# URLs can carry user:pass@ or a host name the user does not want to share.
TO_REDACT = {CONF_API_KEY, CONF_PROMPT, CONF_URL, CONF_GATEWAY_URL, "url"}


def _poller(coordinator: VoiceStackCoordinator[Any] | None) -> dict[str, Any] | None:
    if coordinator is None:
        return None
    interval = coordinator.update_interval
    data = coordinator.data if coordinator.reachable else None
    return {
        "reachable": coordinator.reachable,
        "interval_s": interval.total_seconds() if interval else None,
        "data": async_redact_data(asdict(data), TO_REDACT) if data is not None else None,
    }


async def async_get_config_entry_diagnostics(
    hass: HomeAssistant, entry: VoiceStackConfigEntry
) -> dict[str, Any]:
    """Return diagnostics for a config entry."""
    data = entry.runtime_data
    coordinators = data.coordinators
    findings = data.repairs.findings
    return {
        "entry": {
            "data": async_redact_data(dict(entry.data), TO_REDACT),
            "api_key_configured": bool(entry.data.get(CONF_API_KEY)),
            "options": async_redact_data(dict(entry.options), TO_REDACT),
        },
        "agents": {
            agent.id: {
                "type": agent.subentry.subentry_type,
                "title": agent.title,
                "slots": list(agent.slots),
                "options": async_redact_data(dict(agent.subentry.data), TO_REDACT),
            }
            for agent in data.agents.values()
        },
        "warm_up": {
            "unified_kv": findings.unified_kv,
            "prefix_tokens": dict(findings.prefix_tokens),
            "context_errors": {k: asdict(v) for k, v in findings.context_errors.items()},
            "slot_save_supported": data.watcher.primer.save_supported,
        },
        "timings": {key: t.as_dict() for key, t in data.timings.items()},
        "health": {
            "llm_server": _poller(coordinators.llm),
            "auth_proxy": _poller(coordinators.proxy),
            "gateway": _poller(coordinators.gateway),
        },
    }
