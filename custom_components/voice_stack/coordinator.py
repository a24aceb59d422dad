"""The shared shape of the pollers: one DataUpdateCoordinator per service of the stack.

A coordinator raises UpdateFailed when its service cannot be reached, so HA logs the loss
once and the recovery once, and entities fed by it go unavailable; the connectivity
binary sensors stay available and report "disconnected" instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator, UpdateFailed

from .const import CONF_API_KEY, DOMAIN, LOGGER, PROBE_TIMEOUT
from .urls import shown_url


@dataclass(frozen=True, slots=True)
class Reply:
    """Status and body of one GET."""

    status: int
    text: str
    latency_ms: float
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.text)
        except ValueError:
            return None


async def fetch(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> Reply:
    """GET with a hard timeout; transport failures become UpdateFailed."""
    started = time.monotonic()
    try:
        async with session.get(
            url,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT),
            allow_redirects=False,
        ) as resp:
            text = await resp.text(errors="replace")
            reply_headers = {name.lower(): value for name, value in resp.headers.items()}
    except TimeoutError as err:
        raise UpdateFailed(
            translation_domain=DOMAIN,
            translation_key="probe_timeout",
            translation_placeholders={"url": shown_url(url)},
        ) from err
    except aiohttp.ClientError as err:
        raise UpdateFailed(
            translation_domain=DOMAIN,
            translation_key="probe_failed",
            translation_placeholders={
                "url": shown_url(url),
                "error": str(err) or type(err).__name__,
            },
        ) from err
    return Reply(resp.status, text, (time.monotonic() - started) * 1000, reply_headers)


def bearer(entry: ConfigEntry) -> dict[str, str]:
    """The Authorization header with the entry's key (none without a key)."""
    key = entry.data.get(CONF_API_KEY)
    return {"Authorization": f"Bearer {key}"} if key else {}


def http_error(url: str, status: int) -> UpdateFailed:
    """A service answered with an unexpected status."""
    return UpdateFailed(
        translation_domain=DOMAIN,
        translation_key="probe_status",
        translation_placeholders={"url": shown_url(url), "status": str(status)},
    )


def malformed(url: str, key: str = "probe_malformed") -> UpdateFailed:
    """A service answered, but not in the format its API promises."""
    return UpdateFailed(
        translation_domain=DOMAIN,
        translation_key=key,
        translation_placeholders={"url": shown_url(url)},
    )


class VoiceStackCoordinator[DataT](DataUpdateCoordinator[DataT]):
    """Shared setup: the entry, the injected HTTP session and the base URL."""

    config_entry: ConfigEntry

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        *,
        service: str,
        base_url: str,
        interval: timedelta,
    ) -> None:
        """Poll `base_url` every `interval`."""
        super().__init__(
            hass,
            LOGGER,
            config_entry=entry,
            name=f"{DOMAIN} {service}",
            update_interval=interval,
        )
        self.base_url = base_url.rstrip("/")
        self.session = async_get_clientsession(hass)

    @property
    def reachable(self) -> bool:
        """Whether the latest poll reached the service."""
        return self.last_update_success and self.data is not None
