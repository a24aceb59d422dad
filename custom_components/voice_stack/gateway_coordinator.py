"""The poller of the Voice Stack gateway: its /health (the gateway, ASR and TTS) and /metrics.

The speech response times come from /metrics: the gateway's own timing of real
transcriptions and syntheses, averaged over the requests since the previous poll (the last
figure is kept while no request comes in). Its /health probe latency only says the backend
answers, not how long speech takes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant

from .const import DEVICE_ASR, DEVICE_GATEWAY, DEVICE_TTS
from .coordinator import VoiceStackCoordinator, fetch, http_error, malformed
from .devices import update_device
from .llama_data import MalformedReplyError, parse_prometheus
from .service_data import (
    STT_KIND,
    TTS_KIND,
    TTS_STREAM_KIND,
    GatewayData,
    GatewayHealth,
    LatencyTotals,
    latency_totals,
    mean_ms,
    parse_gateway_health,
)

GATEWAY_INTERVAL: Final = timedelta(seconds=30)


class GatewayCoordinator(VoiceStackCoordinator[GatewayData]):
    """Polls the gateway's HTTP side port."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, gateway_url: str) -> None:
        """Poll the gateway at `gateway_url` (e.g. http://gpu-box:10301)."""
        super().__init__(
            hass, entry, service="gateway", base_url=gateway_url, interval=GATEWAY_INTERVAL
        )

    async def _async_update_data(self) -> GatewayData:
        url = f"{self.base_url}/health"
        health_reply, metrics_reply = await asyncio.gather(
            fetch(self.session, url), fetch(self.session, f"{self.base_url}/metrics")
        )
        if health_reply.status != 200:
            raise http_error(url, health_reply.status)
        try:
            health = parse_gateway_health(health_reply.json())
        except MalformedReplyError as err:
            raise malformed(url) from err
        self._update_devices(health)
        samples = parse_prometheus(metrics_reply.text) if metrics_reply.status == 200 else {}
        totals = {
            kind: found
            for kind, kinds in ((STT_KIND, (STT_KIND,)), (TTS_KIND, (TTS_KIND, TTS_STREAM_KIND)))
            if (found := latency_totals(samples, *kinds)) is not None
        }
        return GatewayData(
            health=health,
            stt_ms=self._mean(STT_KIND, totals),
            tts_ms=self._mean(TTS_KIND, totals),
            totals=totals,
        )

    def _mean(self, kind: str, totals: dict[str, LatencyTotals]) -> float | None:
        """The mean over the new requests, else the last figure shown."""
        previous = self.data
        mean = mean_ms(totals.get(kind), previous.totals.get(kind) if previous else None)
        if mean is None and previous is not None:
            return previous.stt_ms if kind == STT_KIND else previous.tts_ms
        return mean

    def _update_devices(self, health: GatewayHealth) -> None:
        """Versions and model names change when the user upgrades or swaps a backend."""
        update_device(self.hass, self.config_entry, DEVICE_GATEWAY, sw_version=health.version)
        for kind in (DEVICE_ASR, DEVICE_TTS):
            backend = health.backend(kind)
            if backend is not None and backend.models:
                update_device(self.hass, self.config_entry, kind, model=backend.models[0])
