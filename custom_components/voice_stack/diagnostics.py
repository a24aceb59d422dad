"""Diagnostics: what each poller and the warm-up saw, the agents' options and last timings;
never the key, the prompts, the URLs or host names (titles name the host; error texts quote
URLs and addresses), nor the folder the model lives in."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Final

from homeassistant.components.diagnostics import REDACTED, async_redact_data
from homeassistant.core import HomeAssistant

from .const import CONF_API_KEY, CONF_GATEWAY_URL, CONF_PROMPT, CONF_URL
from .coordinator import VoiceStackCoordinator
from .runtime import VoiceStackConfigEntry

# URLs can carry user:pass@ or a host name the user does not want to share; a title is named
# after the host (the entry) or by the user (an agent).
TO_REDACT = {CONF_API_KEY, CONF_PROMPT, CONF_URL, CONF_GATEWAY_URL, "url", "title"}
# In free text (error messages): URLs, aiohttp's "host NAME:PORT", IPv4 and bracketed IPv6.
_IN_TEXT: Final = re.compile(
    r"[a-z][a-z0-9+.-]*://\S+"
    r"|(?<=\bhost )\S+"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b"
    r"|\[[0-9a-f:]*:[0-9a-f:]*\]",
    re.IGNORECASE,
)


def scrub_text(text: str) -> str:
    """The text with every URL, host:port and IP address in it redacted."""
    return _IN_TEXT.sub(REDACTED, text)


def _scrub(value: Any, key: str | None = None) -> Any:
    """Every string scrubbed; a model path reduced to its file name."""
    if isinstance(value, dict):
        return {k: _scrub(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        if key == "model_path":
            return value.replace("\\", "/").rsplit("/", 1)[-1]
        return value if value == REDACTED else scrub_text(value)
    return value


def _poller(coordinator: VoiceStackCoordinator[Any, Any] | None) -> dict[str, Any] | None:
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
    found = {
        "entry": {
            "data": async_redact_data(dict(entry.data), TO_REDACT),
            "api_key_configured": bool(entry.data.get(CONF_API_KEY)),
            "options": async_redact_data(dict(entry.options), TO_REDACT),
        },
        "agents": {
            agent.id: {
                "type": agent.subentry.subentry_type,
                "title": REDACTED,
                "slots": list(agent.slots),
                "options": async_redact_data(dict(agent.subentry.data), TO_REDACT),
            }
            for agent in data.agents.values()
        },
        "warm_up": {
            "unified_kv": findings.unified_kv,
            "prefix_tokens": dict(findings.prefix_tokens),
            "context_errors": {k: asdict(v) for k, v in findings.context_errors.items()},
            "slot_save_supported": data.primer.save_supported,
        },
        "timings": {key: t.as_dict() for key, t in data.timings.items()},
        "health": {
            "llm_server": _poller(coordinators.llm),
            "auth_proxy": _poller(coordinators.proxy),
            "gateway": _poller(coordinators.gateway),
        },
    }
    scrubbed: dict[str, Any] = _scrub(found)
    return scrubbed
