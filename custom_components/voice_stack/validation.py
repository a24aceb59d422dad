"""The checks the flows make before they save a server or a gateway URL: each asks the server
itself through its client (client.py) and answers with the form's errors."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from .client import GatewayClient, LlamaClient, ProxyClient
from .const import CONF_GATEWAY_URL, CONF_URL, LOGGER
from .errors import (
    KeyRejectedError,
    ModelLoadingError,
    NotTheServiceError,
    ServiceError,
    ServiceResponseError,
)
from .payloads import ServerProps
from .slot_offer import slot_offer
from .urls import shown_url


def url_error(url: str, api_key: str) -> str | None:
    """The form error for a URL that cannot be used as typed, else None."""
    parts = urlsplit(url)
    try:
        _ = parts.port  # ValueError on a port that is not a number
    except ValueError:
        return "invalid_url"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "invalid_url"
    if (parts.username or parts.password) and api_key:
        # aiohttp cannot send both basic auth (from the URL) and the bearer key
        return "url_has_credentials"
    return None


async def validate_server(
    hass: HomeAssistant, url: str, api_key: str
) -> tuple[dict[str, str], ServerProps | None]:
    """Check /health (public) then /props (needs the key); (form errors, what /props said)."""
    if (error := url_error(url, api_key)) is not None:
        return {CONF_URL: error}, None
    client = LlamaClient(async_get_clientsession(hass), url, api_key)
    try:
        await client.check_health()
        props = await client.props()
    except KeyRejectedError:
        error = "invalid_auth"
    except ModelLoadingError:  # its own 503 (the proxy passes it on): up, not yet usable
        error = "model_loading"
    except (NotTheServiceError, ServiceResponseError) as err:  # it answered, not as llama-server
        error = await _not_llama_server(client, err)
    except ServiceError as err:
        LOGGER.debug("Cannot reach %s: %s", shown_url(url), err)
        error = "cannot_connect"
    else:
        return {}, props
    return {"base": error}, None


async def _not_llama_server(client: LlamaClient, err: ServiceError) -> str:
    """The form error for a server that answered, but not like llama-server. Ollama is named:
    it listens on 11434 too, the auth proxy's default port, so a URL typed for the proxy
    reaches it on a host that runs both."""
    if await client.is_ollama():
        return "ollama_server"
    if isinstance(err, NotTheServiceError):
        return "not_llama_server"
    LOGGER.debug("Cannot use %s: %s", shown_url(client.url), err)
    return "cannot_connect"


async def first_agent_slots(
    hass: HomeAssistant, url: str, api_key: str, props: ServerProps | None
) -> list[int]:
    """The first agent's pool: the lowest slot the auth proxy reserves for voice; slot 0 when
    there is no Voice Stack proxy, or it reserves none (its repair then says what to change)."""
    try:
        _, status = await ProxyClient(async_get_clientsession(hass), url, api_key).status()
    except ServiceError:
        return [0]
    if status is None:
        return [0]
    total = (props.total_slots if props else None) or 1
    return slot_offer(total, status.reserved_slots, []).default or [0]


def normalize_gateway_url(value: Any) -> str | None:
    """Base URL without a trailing slash or a pasted /health; None when left empty."""
    text = str(value or "").strip().rstrip("/")
    return text.removesuffix("/health") or None


async def validate_gateway(hass: HomeAssistant, url: str | None) -> dict[str, str]:
    """Form errors for a gateway URL: it must answer GET /health like the gateway."""
    if url is None:
        return {}
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return {CONF_GATEWAY_URL: "invalid_url"}
    try:
        await GatewayClient(async_get_clientsession(hass), url).health()
    except ServiceError as err:
        LOGGER.debug("Gateway at %s is not usable: %s", shown_url(url), err)
        return {CONF_GATEWAY_URL: "gateway_cannot_connect"}
    return {}
