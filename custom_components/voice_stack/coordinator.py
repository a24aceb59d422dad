"""The pollers: one DataUpdateCoordinator per service of the stack, the only poller of each.

Everything else that needs to know about a service (the sensors, the slot warm-up, the
repairs) reads its coordinator's data or listens to its updates; nothing polls twice.

A coordinator raises UpdateFailed when its service cannot be reached, so HA logs the loss
once and the recovery once, and entities fed by it go unavailable; the connectivity
binary sensors stay available and report "disconnected" instead.

The gateway's speech response times come from its /metrics: its own timing of real
transcriptions and syntheses, averaged over the requests since the previous poll (the last
figure is kept while no request comes in). Its /health probe latency only says the backend
answers, not how long speech takes.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import Awaitable
from dataclasses import replace
from datetime import timedelta
from typing import ClassVar, Final, override

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import ConfigEntryAuthFailed
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator, UpdateFailed

from .client import WRONG_KEY, GatewayClient, LlamaClient, Metrics, ProxyClient, ServiceClient
from .const import (
    DEVICE_ASR,
    DEVICE_GATEWAY,
    DEVICE_LLM,
    DEVICE_PROXY,
    DEVICE_TTS,
    DOMAIN,
    LOGGER,
)
from .devices import update_device
from .errors import KeyRejectedError, NotTheServiceError, ServiceError, ServiceTimeoutError
from .payloads import (
    REQUESTS_DEFERRED,
    REQUESTS_PROCESSING,
    STT_KIND,
    TTS_KIND,
    TTS_STREAM_KIND,
    Counters,
    GatewayData,
    GatewayHealth,
    LatencyTotals,
    LlamaData,
    ProxyData,
    Rates,
    ServerProps,
    compute_rates,
    keep_last_speeds,
    latency_totals,
    mean_ms,
)
from .urls import shown_url


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


def poll_failed(err: ServiceError, url: str) -> UpdateFailed:
    """What a client error means for a poll (`url`: the service's, when the error has none)."""
    url = err.url or url
    if isinstance(err, ServiceTimeoutError):
        key, placeholders = "probe_timeout", {"url": shown_url(url)}
    elif err.status is not None:  # an unexpected status (a rejected key starts reauth instead)
        return http_error(url, err.status)
    elif isinstance(err, NotTheServiceError):
        return malformed(url)
    else:
        key, placeholders = "probe_failed", {"url": shown_url(url), "error": str(err)}
    return UpdateFailed(
        translation_domain=DOMAIN, translation_key=key, translation_placeholders=placeholders
    )


RECOVERY_INTERVAL: Final = timedelta(seconds=3)  # while a service is down or still loading


class VoiceStackCoordinator[DataT, ClientT: ServiceClient](DataUpdateCoordinator[DataT]):
    """Shared setup: the entry, the service's client and its base URL; one error mapping."""

    config_entry: ConfigEntry
    service: ClassVar[str]  # the poller's name in HA's log
    interval: ClassVar[timedelta]

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, client: ClientT) -> None:
        """Poll the service through `client` every `interval`."""
        super().__init__(
            hass,
            LOGGER,
            config_entry=entry,
            name=f"{DOMAIN} {self.service}",
            update_interval=self.interval,
        )
        self.client = client
        self.base_url = client.url

    @override
    async def _async_update_data(self) -> DataT:
        # Until a poll finds the service ready, poll every RECOVERY_INTERVAL: the warm-up after
        # a restart and the dashboard's "connected" wait for the first ready poll.
        self.update_interval = RECOVERY_INTERVAL
        try:
            data = await self._poll()
        except KeyRejectedError as err:
            raise ConfigEntryAuthFailed(
                translation_domain=DOMAIN, translation_key="invalid_auth_polling"
            ) from err
        except ServiceError as err:
            raise poll_failed(err, self.base_url) from err
        if self._ready(data):
            self.update_interval = self.interval
        return data

    def _ready(self, data: DataT) -> bool:
        """Whether the service answered as ready (not still starting)."""
        return True

    @abstractmethod
    async def _poll(self) -> DataT:
        """One poll of the service; client errors are turned into UpdateFailed (a rejected key
        into ConfigEntryAuthFailed: HA starts reauth)."""

    @property
    def reachable(self) -> bool:
        """Whether the latest poll reached the service."""
        return self.last_update_success and self.data is not None


class LlamaCoordinator(VoiceStackCoordinator[LlamaData, LlamaClient]):
    """Polls llama-server (usually through the auth proxy) with the entry's key."""

    service = "llm_server"
    interval = timedelta(seconds=15)

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, client: LlamaClient) -> None:
        """Poll the entry's server; rates need the counters of the poll before."""
        super().__init__(hass, entry, client)
        self._counters: Counters | None = None
        self._last_rates: Rates | None = None

    @override
    async def _poll(self) -> LlamaData:
        try:
            health = await self.client.health()
        except ServiceError:
            self._counters = None  # whatever comes back next is a new server process
            raise
        if health.loading:
            self._counters = None
            return LlamaData(loading=True, latency_ms=health.latency_ms)
        if health.status != 200:
            self._counters = None
            raise http_error(f"{self.base_url}/health", health.status)
        polled_at = time.monotonic()
        props, slots, metrics = await asyncio.gather(
            self._parsed(self.client.props(), "props_malformed"),
            self._parsed(self.client.slots(), "slots_malformed"),
            self.client.metrics(),
        )
        data = LlamaData(loading=False, latency_ms=health.latency_ms, polled_at=polled_at)
        data = self._with_props(data, props)
        data = replace(data, slots=slots, slots_enabled=slots is not None)
        return self._with_metrics(data, metrics)

    @override
    def _ready(self, data: LlamaData) -> bool:
        return not data.loading

    async def _parsed[T](self, read: Awaitable[T], key: str) -> T:
        """A read whose reply is not in its endpoint's format fails the poll with `key`."""
        try:
            return await read
        except NotTheServiceError as err:
            raise malformed(err.url or self.base_url, key) from err

    def _with_props(self, data: LlamaData, props: ServerProps) -> LlamaData:
        previous = self.data.props if self.data else None
        if props != previous:  # a model swap or an upgrade: show it on the device
            update_device(
                self.hass, self.config_entry, DEVICE_LLM, model=props.model, sw_version=props.build
            )
        return replace(data, props=props)

    def _with_metrics(self, data: LlamaData, metrics: Metrics | None) -> LlamaData:
        if metrics is None:
            return replace(data, metrics_enabled=False)
        samples = metrics.samples
        counters = Counters.from_samples(samples, time.monotonic())
        rates = compute_rates(self._counters, counters) if self._counters else None
        self._counters = counters
        rates = keep_last_speeds(rates, self._last_rates)
        self._last_rates = rates or self._last_rates
        processing, deferred = samples.get(REQUESTS_PROCESSING), samples.get(REQUESTS_DEFERRED)
        return replace(
            data,
            started=metrics.started,
            counters=counters,
            rates=rates,
            requests_processing=int(processing) if processing is not None else None,
            requests_deferred=int(deferred) if deferred is not None else None,
        )


class ProxyCoordinator(VoiceStackCoordinator[ProxyData, ProxyClient]):
    """Checks the auth proxy is up, what it reserves, and that it refuses requests without a key."""

    service = "auth_proxy"
    interval = timedelta(seconds=60)

    @override
    async def _poll(self) -> ProxyData:
        # The status is open; sending our key lets the proxy say which scope that key has.
        (status_reply, status), no_key, wrong_key = await asyncio.gather(
            self.client.status(),
            self.client.lets_through(None),
            self.client.lets_through(WRONG_KEY),
        )
        if status is not None:
            update_device(self.hass, self.config_entry, DEVICE_PROXY, model=status.service)
        return ProxyData(
            latency_ms=status_reply.latency_ms,
            status=status,
            open_without_key=no_key,
            open_with_wrong_key=wrong_key,
        )


class GatewayCoordinator(VoiceStackCoordinator[GatewayData, GatewayClient]):
    """Polls the gateway's HTTP side port (e.g. http://gpu-box:10301)."""

    service = "gateway"
    interval = timedelta(seconds=30)

    @override
    async def _poll(self) -> GatewayData:
        (_, health), samples = await asyncio.gather(self.client.health(), self.client.metrics())
        self._update_devices(health)
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
