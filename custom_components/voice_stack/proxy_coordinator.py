"""The poller of the auth proxy: its /proxy/status, and whether it turns away a missing key."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant

from .const import CONF_URL, DEVICE_PROXY
from .coordinator import VoiceStackCoordinator, bearer, fetch
from .devices import update_device
from .service_data import ProxyData, parse_proxy_status

PROXY_INTERVAL: Final = timedelta(seconds=60)
# A key no proxy will hold: the proxy must refuse it just like a missing one.
_WRONG_KEY: Final = "voice-stack-probe-not-a-key"


def _let_through(status: int) -> bool | None:
    if status in (401, 403):
        return False
    if 200 <= status < 300:
        return True
    return None


class ProxyCoordinator(VoiceStackCoordinator[ProxyData]):
    """Checks the auth proxy is up, what it reserves, and that it refuses requests without a key."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        """Poll the entry's URL."""
        super().__init__(
            hass,
            entry,
            service="auth_proxy",
            base_url=entry.data[CONF_URL],
            interval=PROXY_INTERVAL,
        )
        self._auth = bearer(entry)

    async def _async_update_data(self) -> ProxyData:
        guarded = f"{self.base_url}/v1/models"
        # The status is open; sending our key lets the proxy say which scope that key has.
        status_reply, no_key, wrong_key = await asyncio.gather(
            fetch(self.session, f"{self.base_url}/proxy/status", self._auth),
            fetch(self.session, guarded),
            fetch(self.session, guarded, {"Authorization": f"Bearer {_WRONG_KEY}"}),
        )
        status = parse_proxy_status(status_reply.json()) if status_reply.status == 200 else None
        if status is not None:
            update_device(self.hass, self.config_entry, DEVICE_PROXY, model=status.service)
        return ProxyData(
            latency_ms=status_reply.latency_ms,
            status=status,
            open_without_key=_let_through(no_key.status),
            open_with_wrong_key=_let_through(wrong_key.status),
        )
