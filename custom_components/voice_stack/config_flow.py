"""Config flow for Voice Stack: the server entry (user, reauth, reconfigure) and its options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, override

import probatio
from homeassistant.config_entries import (
    ConfigEntry,
    ConfigFlow,
    ConfigFlowResult,
    ConfigSubentryFlow,
)
from homeassistant.core import callback
from homeassistant.helpers.selector import TextSelector, TextSelectorConfig, TextSelectorType

from .agent_flow import VoiceStackAgentFlow, default_agent_data
from .const import (
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_URL,
    DEFAULT_CONVERSATION_NAME,
    DOCS_URL,
    DOMAIN,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from .options_flow import GATEWAY_FIELD, VoiceStackOptionsFlow, gateway_options
from .payloads import ServerProps
from .runtime import VoiceStackConfigEntry
from .urls import host_of, normalize_url, without_userinfo
from .validation import (
    first_agent_slots,
    normalize_gateway_url,
    validate_gateway,
    validate_server,
)

_URL_SELECTOR = TextSelector(TextSelectorConfig(type=TextSelectorType.URL))
_KEY_SELECTOR = TextSelector(TextSelectorConfig(type=TextSelectorType.PASSWORD))
STEP_USER_SCHEMA = probatio.Schema(
    {probatio.Required(CONF_URL): _URL_SELECTOR, probatio.Optional(CONF_API_KEY): _KEY_SELECTOR}
)
STEP_REAUTH_SCHEMA = probatio.Schema({probatio.Optional(CONF_API_KEY): _KEY_SELECTOR})
_DOCS = {"docs_url": f"{DOCS_URL}/deploy.md"}


def entry_title(url: str, props: ServerProps | None) -> str:
    """What the entry is called: the model and the host it runs on."""
    host = host_of(url)
    model = props.model_file if props else None
    return f"{model} on {host}" if model else f"llama-server on {host}"


class VoiceStackConfigFlow(ConfigFlow, domain=DOMAIN):
    """Add a llama-server (usually behind the Voice Stack auth proxy)."""

    VERSION = 1
    MINOR_VERSION = 4

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """Ask for the URL and key, verify them, create the entry and a first agent."""
        errors: dict[str, str] = {}
        if user_input is not None:
            url = normalize_url(user_input[CONF_URL])
            api_key = (user_input.get(CONF_API_KEY) or "").strip()
            gateway_url = normalize_gateway_url(user_input.get(CONF_GATEWAY_URL))
            errors, props = await validate_server(self.hass, url, api_key)
            if not (errors := errors or await validate_gateway(self.hass, gateway_url)):
                if self._configured(url):
                    return self.async_abort(reason="already_configured")
                slots = await first_agent_slots(self.hass, url, api_key, props)
                return self.async_create_entry(
                    title=entry_title(url, props),
                    data={CONF_URL: url, CONF_API_KEY: api_key},
                    options=gateway_options(gateway_url),
                    subentries=[
                        {
                            "subentry_type": SUBENTRY_CONVERSATION,
                            "data": default_agent_data(slots),
                            "title": DEFAULT_CONVERSATION_NAME,
                            "unique_id": None,
                        }
                    ],
                )
        return self.async_show_form(
            step_id="user",
            data_schema=self.add_suggested_values_to_schema(
                STEP_USER_SCHEMA.extend(GATEWAY_FIELD), user_input
            ),
            errors=errors,
            description_placeholders=_DOCS,
        )

    async def async_step_reauth(self, entry_data: Mapping[str, Any]) -> ConfigFlowResult:
        """The key was rejected."""
        return await self.async_step_reauth_confirm()

    async def async_step_reauth_confirm(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Ask for a new key and verify it."""
        entry = self._get_reauth_entry()
        errors: dict[str, str] = {}
        if user_input is not None:
            api_key = (user_input.get(CONF_API_KEY) or "").strip()
            errors, _ = await validate_server(self.hass, entry.data[CONF_URL], api_key)
            if not errors:  # the same key too: the user fixed the server, set it up afresh
                return self._async_update_and_abort(entry, data_updates={CONF_API_KEY: api_key})
        return self.async_show_form(
            step_id="reauth_confirm",
            data_schema=STEP_REAUTH_SCHEMA,
            errors=errors,
            description_placeholders={"url": without_userinfo(entry.data[CONF_URL]), **_DOCS},
        )

    async def async_step_reconfigure(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Change the URL or key of an existing server."""
        entry = self._get_reconfigure_entry()
        errors: dict[str, str] = {}
        if user_input is not None:
            url = normalize_url(user_input[CONF_URL])
            api_key = (user_input.get(CONF_API_KEY) or "").strip()
            if self._configured(url, but=entry):
                return self.async_abort(reason="already_configured")
            errors, props = await validate_server(self.hass, url, api_key)
            if not errors:
                return self._async_update_and_abort(
                    entry,
                    title=entry_title(url, props),
                    data_updates={CONF_URL: url, CONF_API_KEY: api_key},
                )
        return self.async_show_form(
            step_id="reconfigure",
            data_schema=self.add_suggested_values_to_schema(
                STEP_USER_SCHEMA, user_input or {CONF_URL: entry.data[CONF_URL]}
            ),
            errors=errors,
            description_placeholders=_DOCS,
        )

    @callback
    def _configured(self, url: str, but: ConfigEntry | None = None) -> bool:
        """Whether another entry has this server (the URL without user:pass@).

        llama-server gives no id of its own, and a URL is no unique id (reconfigure changes
        it): entries have none, and duplicates are refused by URL here.
        """
        server = without_userinfo(url)
        return any(
            without_userinfo(str(e.data.get(CONF_URL, ""))) == server
            for e in self._async_current_entries(include_ignore=False)
            if but is None or e.entry_id != but.entry_id
        )

    @callback
    def _async_update_and_abort(
        self, entry: ConfigEntry, *, data_updates: dict[str, Any], **changes: Any
    ) -> ConfigFlowResult:
        """Save the changes and set the entry up afresh, exactly once, changed or not.

        A loaded entry's update listener reloads it when something changed (a second reload
        by the flow is deprecated); when nothing changed the listener stays silent, so the
        flow reloads it, as it does an entry whose setup failed (it has no listener).
        """
        changed = any(entry.data.get(k) != v for k, v in data_updates.items()) or any(
            getattr(entry, k) != v for k, v in changes.items()
        )
        if entry.update_listeners and changed:
            return self.async_update_and_abort(entry, data_updates=data_updates, **changes)
        if entry.update_listeners:
            self.hass.config_entries.async_schedule_reload(entry.entry_id)
            return self.async_update_and_abort(entry, data_updates=data_updates, **changes)
        return self.async_update_reload_and_abort(entry, data_updates=data_updates, **changes)

    @staticmethod
    @callback
    @override
    def async_get_options_flow(config_entry: VoiceStackConfigEntry) -> VoiceStackOptionsFlow:
        """The gateway URL can be set or changed later."""
        return VoiceStackOptionsFlow()

    @classmethod
    @callback
    @override
    def async_get_supported_subentry_types(
        cls, config_entry: VoiceStackConfigEntry
    ) -> dict[str, type[ConfigSubentryFlow]]:
        """Conversation agents and AI Task entities."""
        return {
            SUBENTRY_CONVERSATION: VoiceStackAgentFlow,
            SUBENTRY_AI_TASK: VoiceStackAgentFlow,
        }
