"""The gateway URL: a field of the user step and the whole options flow (checked by
validation.py)."""

from __future__ import annotations

from typing import Any, Final

import probatio
from homeassistant.config_entries import ConfigFlowResult, OptionsFlow
from homeassistant.helpers.selector import TextSelector, TextSelectorConfig, TextSelectorType

from .const import CONF_GATEWAY_URL
from .validation import normalize_gateway_url, validate_gateway

GATEWAY_FIELD: Final[dict[Any, Any]] = {
    probatio.Optional(CONF_GATEWAY_URL): TextSelector(TextSelectorConfig(type=TextSelectorType.URL))
}
STEP_OPTIONS_SCHEMA: Final = probatio.Schema(GATEWAY_FIELD)


def gateway_options(url: str | None) -> dict[str, Any]:
    """Entry options holding the gateway URL, if one was given."""
    return {CONF_GATEWAY_URL: url} if url else {}


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
