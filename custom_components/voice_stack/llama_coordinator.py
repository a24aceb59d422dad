"""The one poller of llama-server: /health, then /props, /slots and /metrics with the key.

Everything else that needs to know about the server (the sensors, the slot warm-up, the
repairs) reads this coordinator's data or listens to its updates; nothing polls twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta
from typing import Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import ConfigEntryAuthFailed
from homeassistant.helpers.update_coordinator import UpdateFailed

from .const import CONF_URL, DEVICE_LLM, DOMAIN
from .coordinator import Reply, VoiceStackCoordinator, bearer, fetch, http_error, malformed
from .devices import update_device
from .errors import is_loading
from .llama_data import (
    REQUESTS_DEFERRED,
    REQUESTS_PROCESSING,
    Counters,
    LlamaData,
    MalformedReplyError,
    Rates,
    compute_rates,
    keep_last_speeds,
    parse_prometheus,
    parse_props,
    parse_slots,
)

LLAMA_INTERVAL: Final = timedelta(seconds=15)
_DISABLED: Final = 501  # an endpoint switched off by a server flag (--no-slots, no --metrics)
PROCESS_START_HEADER: Final = "process-start-time-unix"  # of /metrics, in every build with it


class LlamaCoordinator(VoiceStackCoordinator[LlamaData]):
    """Polls llama-server (usually through the auth proxy)."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        """Poll the entry's URL with the entry's key."""
        super().__init__(
            hass,
            entry,
            service="llm_server",
            base_url=entry.data[CONF_URL],
            interval=LLAMA_INTERVAL,
        )
        self._auth = bearer(entry)
        self._counters: Counters | None = None
        self._last_rates: Rates | None = None

    async def _async_update_data(self) -> LlamaData:
        url = f"{self.base_url}/health"
        try:
            health = await fetch(self.session, url)
        except UpdateFailed:
            self._counters = None  # whatever comes back next is a new server process
            raise
        body = health.json()
        if health.status == 503 and is_loading(
            body.get("error") if isinstance(body, dict) else None
        ):
            self._counters = None
            return LlamaData(loading=True, latency_ms=health.latency_ms)
        if health.status != 200:
            self._counters = None
            raise http_error(url, health.status)
        polled_at = time.monotonic()
        props, slots, metrics = await asyncio.gather(
            self._get("/props"), self._get("/slots"), self._get("/metrics")
        )
        data = LlamaData(loading=False, latency_ms=health.latency_ms, polled_at=polled_at)
        data = self._with_props(data, props)
        data = self._with_slots(data, slots)
        return self._with_metrics(data, metrics)

    async def _get(self, path: str) -> Reply:
        url = f"{self.base_url}{path}"
        reply = await fetch(self.session, url, self._auth)
        if reply.status in (401, 403):
            raise ConfigEntryAuthFailed(
                translation_domain=DOMAIN, translation_key="invalid_auth_polling"
            )
        if reply.status not in (200, _DISABLED):
            raise http_error(url, reply.status)
        return reply

    def _with_props(self, data: LlamaData, reply: Reply) -> LlamaData:
        try:
            props = parse_props(reply.json())
        except MalformedReplyError as err:
            raise malformed(f"{self.base_url}/props", "props_malformed") from err
        previous = self.data.props if self.data else None
        if props != previous:  # a model swap or an upgrade: show it on the device
            update_device(
                self.hass, self.config_entry, DEVICE_LLM, model=props.model, sw_version=props.build
            )
        return replace(data, props=props)

    def _with_slots(self, data: LlamaData, reply: Reply) -> LlamaData:
        if reply.status == _DISABLED:
            return replace(data, slots_enabled=False)
        try:
            return replace(data, slots=parse_slots(reply.json()))
        except MalformedReplyError as err:
            raise malformed(f"{self.base_url}/slots", "slots_malformed") from err

    def _with_metrics(self, data: LlamaData, reply: Reply) -> LlamaData:
        if reply.status == _DISABLED:
            return replace(data, metrics_enabled=False)
        samples = parse_prometheus(reply.text)
        counters = Counters.from_samples(samples, time.monotonic())
        rates = compute_rates(self._counters, counters) if self._counters else None
        self._counters = counters
        rates = keep_last_speeds(rates, self._last_rates)
        self._last_rates = rates or self._last_rates
        processing, deferred = samples.get(REQUESTS_PROCESSING), samples.get(REQUESTS_DEFERRED)
        return replace(
            data,
            started=reply.headers.get(PROCESS_START_HEADER) or None,
            counters=counters,
            rates=rates,
            requests_processing=int(processing) if processing is not None else None,
            requests_deferred=int(deferred) if deferred is not None else None,
        )
