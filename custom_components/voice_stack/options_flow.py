"""The gateway URL: a field of the user step and the whole options flow."""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import probatio
from homeassistant.config_entries import ConfigFlowResult, OptionsFlow
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.selector import TextSelector, TextSelectorConfig, TextSelectorType

from .const import CONF_GATEWAY_URL, LOGGER, PROBE_TIMEOUT
from .data import parse_gateway_health
from .urls import shown_url

GATEWAY_FIELD: Final[dict[Any, Any]] = {
    probatio.Optional(CONF_GATEWAY_URL): TextSelector(TextSelectorConfig(type=TextSelectorType.URL))
}
STEP_OPTIONS_SCHEMA: Final = probatio.Schema(GATEWAY_FIELD)


def normalize_gateway_url(value: Any) -> str | None:
    """Base URL without a trailing slash or a pasted /health; None when left empty."""
    text = str(value or "").strip().rstrip("/")
    return text.removesuffix("/health") or None


def gateway_options(url: str | None) -> dict[str, Any]:
    """Entry options holding the gateway URL, if one was given."""
    return {CONF_GATEWAY_URL: url} if url else {}


async def validate_gateway(hass: HomeAssistant, url: str | None) -> dict[str, str]:
    """Form errors for a gateway URL: it must answer GET /health like the gateway."""
    if url is None:
        return {}
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return {CONF_GATEWAY_URL: "invalid_url"}
    session = async_get_clientsession(hass)
    try:
        async with session.get(
            f"{url}/health", timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
        ) as resp:
            parse_gateway_health(await resp.json(content_type=None))
    except (TimeoutError, aiohttp.ClientError, ValueError) as err:  # ValueError: not its JSON
        LOGGER.debug("Gateway at %s is not usable: %s", shown_url(url), err)
        return {CONF_GATEWAY_URL: "gateway_cannot_connect"}
    return {}


class VoiceStackOptionsFlow(OptionsFlow):
    """Set, change or clear the gateway URL (the entry reloads on save)."""

    async def async_step_init(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """One optional field; it is checked before it is saved."""
        errors: dict[str, str] = {}
        if user_input is not None:
            url = normalize_gateway_url(user_input.get(CONF_GATEWAY_URL))
            if not (errors := await validate_gateway(self.hass, url)):
                options = dict(self.config_entry.options)
                options.pop(CONF_GATEWAY_URL, None)
                return self.async_create_entry(data={**options, **gateway_options(url)})
        current = user_input or self.config_entry.options
        return self.async_show_form(
            step_id="init",
            data_schema=self.add_suggested_values_to_schema(STEP_OPTIONS_SCHEMA, current),
            errors=errors,
        )
