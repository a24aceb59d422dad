"""Config flow for Voice Stack: the server entry and its agent subentries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, override
from urllib.parse import urlsplit

import probatio
from homeassistant.config_entries import (
    ConfigEntry,
    ConfigEntryState,
    ConfigFlow,
    ConfigFlowResult,
    ConfigSubentryFlow,
    SubentryFlowResult,
)
from homeassistant.const import CONF_NAME
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import llm
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.selector import (
    BooleanSelector,
    NumberSelector,
    NumberSelectorConfig,
    NumberSelectorMode,
    SelectOptionDict,
    SelectSelector,
    SelectSelectorConfig,
    SelectSelectorMode,
    TemplateSelector,
    TextSelector,
    TextSelectorConfig,
    TextSelectorType,
)

from .client import (
    LlamaAuthError,
    LlamaClient,
    LlamaError,
    LlamaNotServerError,
    without_userinfo,
)
from .const import (
    AGENT_DEFAULTS,
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SAVE_SLOT,
    CONF_SLOT,
    CONF_TEMPERATURE,
    CONF_TIMEOUT,
    CONF_URL,
    DEFAULT_AI_TASK_NAME,
    DEFAULT_CONVERSATION_NAME,
    DOMAIN,
    LAYOUT_OPTIONS,
    LOGGER,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    REASONING_OPTIONS,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from .gateway_options import (
    GATEWAY_FIELD,
    VoiceStackOptionsFlow,
    gateway_options,
    normalize_gateway_url,
    validate_gateway,
)
from .models import VoiceStackConfigEntry

_URL_SELECTOR = TextSelector(TextSelectorConfig(type=TextSelectorType.URL))
_KEY_SELECTOR = TextSelector(TextSelectorConfig(type=TextSelectorType.PASSWORD))
STEP_USER_SCHEMA = probatio.Schema(
    {probatio.Required(CONF_URL): _URL_SELECTOR, probatio.Optional(CONF_API_KEY): _KEY_SELECTOR}
)
STEP_REAUTH_SCHEMA = probatio.Schema({probatio.Optional(CONF_API_KEY): _KEY_SELECTOR})

_INT_KEYS = (CONF_SLOT, CONF_MAX_TOKENS, CONF_MAX_HISTORY)


def normalize_url(url: str) -> str:
    """Canonical base URL: scheme and host lower case (not user:pass@), no trailing slash."""
    parts = urlsplit(url.strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    path = parts.path.rstrip("/")
    return f"{parts.scheme.lower()}://{userinfo}{at}{host.lower()}{path}"


def server_title(url: str) -> str:
    """host[:port] of the URL, never its user:pass@."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


async def validate_server(hass: HomeAssistant, url: str, api_key: str) -> dict[str, str]:
    """Check /health (public) then /props (needs the key); return form errors."""
    parts = urlsplit(url)
    try:
        _ = parts.port  # ValueError on a port that is not a number
    except ValueError:
        return {CONF_URL: "invalid_url"}
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return {CONF_URL: "invalid_url"}
    if (parts.username or parts.password) and api_key:
        # aiohttp cannot send both basic auth (from the URL) and the bearer key
        return {CONF_URL: "url_has_credentials"}
    client = LlamaClient(async_get_clientsession(hass), url, api_key)
    try:
        await client.health()
        await client.props()
    except LlamaAuthError:
        return {"base": "invalid_auth"}
    except LlamaNotServerError:
        return {"base": "not_llama_server"}
    except LlamaError as err:
        LOGGER.debug("Cannot reach %s: %s", url, err)
        return {"base": "cannot_connect"}
    return {}


def default_agent_data(slot: int) -> dict[str, Any]:
    """Options of the conversation agent created with the server entry."""
    return {
        CONF_SLOT: slot,
        CONF_PROMPT: llm.DEFAULT_INSTRUCTIONS_PROMPT,
        CONF_LLM_HASS_API: [llm.LLM_API_ASSIST],
        **AGENT_DEFAULTS,
    }


class VoiceStackConfigFlow(ConfigFlow, domain=DOMAIN):
    """Add a llama-server (usually behind the Voice Stack auth proxy)."""

    VERSION = 1
    MINOR_VERSION = 1

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """Ask for the URL and key, verify them, create the entry and a first agent."""
        errors: dict[str, str] = {}
        if user_input is not None:
            url = normalize_url(user_input[CONF_URL])
            api_key = (user_input.get(CONF_API_KEY) or "").strip()
            gateway_url = normalize_gateway_url(user_input.get(CONF_GATEWAY_URL))
            errors = await validate_server(self.hass, url, api_key)
            if not (errors := errors or await validate_gateway(self.hass, gateway_url)):
                await self.async_set_unique_id(without_userinfo(url))
                self._abort_if_unique_id_configured()
                return self.async_create_entry(
                    title=server_title(url),
                    data={CONF_URL: url, CONF_API_KEY: api_key},
                    options=gateway_options(gateway_url),
                    subentries=[
                        {
                            "subentry_type": SUBENTRY_CONVERSATION,
                            "data": default_agent_data(0),
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
            if not (errors := await validate_server(self.hass, entry.data[CONF_URL], api_key)):
                return self._async_update_and_abort(entry, data_updates={CONF_API_KEY: api_key})
        return self.async_show_form(
            step_id="reauth_confirm",
            data_schema=STEP_REAUTH_SCHEMA,
            errors=errors,
            description_placeholders={"url": entry.data[CONF_URL]},
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
            unique_id = without_userinfo(url)
            if any(
                e.unique_id == unique_id and e.entry_id != entry.entry_id
                for e in self._async_current_entries(include_ignore=False)
            ):
                return self.async_abort(reason="already_configured")
            if not (errors := await validate_server(self.hass, url, api_key)):
                return self._async_update_and_abort(
                    entry,
                    unique_id=unique_id,
                    title=server_title(url),
                    data_updates={CONF_URL: url, CONF_API_KEY: api_key},
                )
        return self.async_show_form(
            step_id="reconfigure",
            data_schema=self.add_suggested_values_to_schema(
                STEP_USER_SCHEMA, user_input or {CONF_URL: entry.data[CONF_URL]}
            ),
            errors=errors,
        )

    @callback
    def _async_update_and_abort(self, entry: ConfigEntry, **changes: Any) -> ConfigFlowResult:
        """Save the changes; HA's pattern for who reloads (a second reload is deprecated).

        A loaded entry has its update listener, which reloads it; an entry whose setup
        failed (a rejected key) has none, so the flow reloads it.
        """
        if entry.update_listeners:
            return self.async_update_and_abort(entry, **changes)
        return self.async_update_reload_and_abort(entry, **changes)

    @staticmethod
    @callback
    @override
    def async_get_options_flow(config_entry: ConfigEntry) -> VoiceStackOptionsFlow:
        """The gateway URL can be set or changed later."""
        return VoiceStackOptionsFlow()

    @classmethod
    @callback
    @override
    def async_get_supported_subentry_types(
        cls, config_entry: ConfigEntry
    ) -> dict[str, type[ConfigSubentryFlow]]:
        """Conversation agents and AI Task entities."""
        return {
            SUBENTRY_CONVERSATION: VoiceStackAgentFlow,
            SUBENTRY_AI_TASK: VoiceStackAgentFlow,
        }


def free_slot(entry: ConfigEntry, total_slots: int, exclude: str | None = None) -> int:
    """The lowest slot no other agent of this server uses (lower slots are served first)."""
    used = {
        int(s.data[CONF_SLOT])
        for s in entry.subentries.values()
        if CONF_SLOT in s.data and s.subentry_id != exclude
    }
    return next((n for n in range(max(total_slots, 1)) if n not in used), 0)


class VoiceStackAgentFlow(ConfigSubentryFlow):
    """Add or change an agent (conversation or AI Task)."""

    @property
    def _is_new(self) -> bool:
        return self.source == "user"

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """New agent."""
        return await self.async_step_set_options(user_input)

    async def async_step_reconfigure(
        self, user_input: dict[str, Any] | None = None
    ) -> SubentryFlowResult:
        """Change an agent."""
        return await self.async_step_set_options(user_input)

    async def async_step_set_options(
        self, user_input: dict[str, Any] | None = None
    ) -> SubentryFlowResult:
        """One form with every agent option."""
        entry: VoiceStackConfigEntry = self._get_entry()
        if entry.state is not ConfigEntryState.LOADED:
            return self.async_abort(reason="entry_not_loaded")
        if user_input is not None:
            data = {k: int(v) if k in _INT_KEYS else v for k, v in user_input.items()}
            if self._is_new:
                name = str(data.pop(CONF_NAME))
                return self.async_create_entry(title=name, data=data)
            return self.async_update_and_abort(entry, self._get_reconfigure_subentry(), data=data)
        try:
            models = await entry.runtime_data.client.models()
        except LlamaError:
            return self.async_abort(reason="cannot_connect")
        total = int(entry.runtime_data.props.get("total_slots") or 1)
        if self._is_new:
            options: dict[str, Any] = {
                **default_agent_data(free_slot(entry, total)),
                CONF_MODEL: models[0] if models else "",
            }
            if self._subentry_type == SUBENTRY_AI_TASK:
                options[CONF_LLM_HASS_API] = []
        else:
            options = dict(self._get_reconfigure_subentry().data)
        return self.async_show_form(
            step_id="set_options",
            data_schema=agent_schema(self.hass, self._is_new, self._subentry_type, options, models),
        )


def agent_schema(
    hass: HomeAssistant,
    is_new: bool,
    subentry_type: str,
    options: Mapping[str, Any],
    models: list[str],
) -> probatio.Schema:
    """The agent options form; current values are suggested, not defaulted."""
    schema: dict[Any, Any] = {}
    if is_new:
        name = (
            DEFAULT_AI_TASK_NAME if subentry_type == SUBENTRY_AI_TASK else DEFAULT_CONVERSATION_NAME
        )
        schema[probatio.Required(CONF_NAME, default=name)] = str

    def opt(key: str, required: bool = False) -> Any:
        marker = probatio.Required if required else probatio.Optional
        return marker(key, description={"suggested_value": options.get(key)})

    schema[opt(CONF_MODEL)] = SelectSelector(
        SelectSelectorConfig(
            options=[SelectOptionDict(label=m, value=m) for m in models], custom_value=True
        )
    )
    if subentry_type == SUBENTRY_CONVERSATION:
        apis = [SelectOptionDict(label=api.name, value=api.id) for api in llm.async_get_apis(hass)]
        schema[opt(CONF_PROMPT)] = TemplateSelector()
        schema[opt(CONF_LLM_HASS_API)] = SelectSelector(
            SelectSelectorConfig(options=apis, multiple=True)
        )
    schema[opt(CONF_SLOT, required=True)] = NumberSelector(
        NumberSelectorConfig(min=0, max=63, step=1, mode=NumberSelectorMode.BOX)
    )
    schema[opt(CONF_TEMPERATURE, required=True)] = NumberSelector(
        NumberSelectorConfig(min=0, max=2, step=0.05, mode=NumberSelectorMode.SLIDER)
    )
    schema[opt(CONF_MAX_TOKENS, required=True)] = NumberSelector(
        NumberSelectorConfig(min=1, max=32768, step=1, mode=NumberSelectorMode.BOX)
    )
    if subentry_type == SUBENTRY_CONVERSATION:
        schema[opt(CONF_MAX_HISTORY, required=True)] = NumberSelector(
            NumberSelectorConfig(min=0, max=200, step=1, mode=NumberSelectorMode.BOX)
        )
    schema[opt(CONF_TIMEOUT, required=True)] = NumberSelector(
        NumberSelectorConfig(
            min=MIN_TIMEOUT,
            max=MAX_TIMEOUT,
            step=1,
            mode=NumberSelectorMode.BOX,
            unit_of_measurement="s",
        )
    )
    schema[opt(CONF_REASONING, required=True)] = SelectSelector(
        SelectSelectorConfig(
            options=REASONING_OPTIONS,
            translation_key=CONF_REASONING,
            mode=SelectSelectorMode.DROPDOWN,
        )
    )
    schema[opt(CONF_PROMPT_LAYOUT, required=True)] = SelectSelector(
        SelectSelectorConfig(
            options=LAYOUT_OPTIONS,
            translation_key=CONF_PROMPT_LAYOUT,
            mode=SelectSelectorMode.DROPDOWN,
        )
    )
    schema[opt(CONF_SAVE_SLOT, required=True)] = BooleanSelector()
    return probatio.Schema(schema)
