"""One DataUpdateCoordinator per polled service: llama-server, the auth proxy, the gateway.

A coordinator raises UpdateFailed when its service cannot be reached, so HA logs the loss
once and the recovery once, and entities fed by it go unavailable; the connectivity
binary sensors stay available and report "disconnected" instead.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import ConfigEntryAuthFailed
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator, UpdateFailed

from . import health_issues
from .const import CONF_API_KEY, CONF_GATEWAY_URL, CONF_URL, DOMAIN, LOGGER, PROBE_TIMEOUT
from .devices import (
    DEVICE_ASR,
    DEVICE_GATEWAY,
    DEVICE_LLM,
    DEVICE_PROXY,
    DEVICE_TTS,
    GATEWAY_DEVICES,
    remove_stale_devices,
    update_device,
)
from .probes import (
    REQUESTS_DEFERRED,
    REQUESTS_PROCESSING,
    Counters,
    GatewayHealth,
    Rates,
    ServerProps,
    SlotsSummary,
    compute_rates,
    parse_gateway_health,
    parse_prometheus,
    parse_props,
    parse_slots,
)

if TYPE_CHECKING:
    from homeassistant.config_entries import ConfigEntry

LLAMA_INTERVAL: Final = timedelta(seconds=15)
PROXY_INTERVAL: Final = timedelta(seconds=60)
GATEWAY_INTERVAL: Final = timedelta(seconds=30)
# A key no proxy will hold: the proxy must refuse it just like a missing one.
_WRONG_KEY: Final = "voice-stack-probe-not-a-key"


@dataclass(frozen=True, slots=True)
class Reply:
    """Status and body of one GET."""

    status: int
    text: str
    latency_ms: float

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
    except TimeoutError as err:
        raise UpdateFailed(
            translation_domain=DOMAIN,
            translation_key="probe_timeout",
            translation_placeholders={"url": _without_query(url)},
        ) from err
    except aiohttp.ClientError as err:
        raise UpdateFailed(
            translation_domain=DOMAIN,
            translation_key="probe_failed",
            translation_placeholders={
                "url": _without_query(url),
                "error": str(err) or type(err).__name__,
            },
        ) from err
    return Reply(resp.status, text, (time.monotonic() - started) * 1000)


def _without_query(url: str) -> str:
    return url.split("?", 1)[0]


def _http_error(url: str, status: int) -> UpdateFailed:
    return UpdateFailed(
        translation_domain=DOMAIN,
        translation_key="probe_status",
        translation_placeholders={"url": _without_query(url), "status": str(status)},
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


@dataclass(frozen=True, slots=True)
class LlamaData:
    """What one poll of llama-server found."""

    loading: bool
    latency_ms: float
    props: ServerProps | None = None
    slots: SlotsSummary | None = None
    counters: Counters | None = None
    rates: Rates | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    metrics_enabled: bool = True
    slots_enabled: bool = True


class LlamaCoordinator(VoiceStackCoordinator[LlamaData]):
    """Polls llama-server (through the proxy): /health, and /props /slots /metrics with the key."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        """Poll the entry's URL."""
        super().__init__(
            hass,
            entry,
            service="llm_server",
            base_url=entry.data[CONF_URL],
            interval=LLAMA_INTERVAL,
        )
        key = entry.data.get(CONF_API_KEY)
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}
        self._props: ServerProps | None = None
        self._counters: Counters | None = None
        self._last_rates: Rates | None = None

    async def _async_update_data(self) -> LlamaData:
        url = f"{self.base_url}/health"
        try:
            health = await fetch(self.session, url)
        except UpdateFailed:
            self._forget_server()
            raise
        if health.status == 503 and _is_loading(health.json()):
            self._forget_server()
            return LlamaData(loading=True, latency_ms=health.latency_ms)
        if health.status != 200:
            self._forget_server()
            raise _http_error(url, health.status)
        if self._props is None:
            self._props = await self._fetch_props()
        slots, metrics = await asyncio.gather(self._get("/slots"), self._get("/metrics"))
        data = LlamaData(loading=False, latency_ms=health.latency_ms, props=self._props)
        data = self._with_slots(data, slots)
        data = self._with_metrics(data, metrics)
        health_issues.sync_server_issues(self.hass, self.config_entry, data)
        return data

    def _forget_server(self) -> None:
        """The server is restarting (maybe with another model): re-read props, restart rates."""
        self._props = None
        self._counters = None

    async def _get(self, path: str) -> Reply:
        url = f"{self.base_url}{path}"
        reply = await fetch(self.session, url, self._auth)
        if reply.status in (401, 403):
            raise ConfigEntryAuthFailed(
                translation_domain=DOMAIN, translation_key="invalid_auth_polling"
            )
        if reply.status not in (200, 501):  # 501: endpoint disabled by a server flag
            raise _http_error(url, reply.status)
        return reply

    async def _fetch_props(self) -> ServerProps | None:
        try:
            props = parse_props((await self._get("/props")).json())
        except ValueError:
            return None
        # The device may exist from a poll made while the model was loading.
        update_device(
            self.hass, self.config_entry, DEVICE_LLM, model=props.model, sw_version=props.build
        )
        return props

    @property
    def server_slots(self) -> int | None:
        """Slot count of the server (-np), once known."""
        data: LlamaData | None = self.data
        if data is None:
            return None
        if data.slots is not None:
            return data.slots.total
        return data.props.total_slots if data.props else None

    def _with_slots(self, data: LlamaData, reply: Reply) -> LlamaData:
        if reply.status == 501:
            return replace(data, slots_enabled=False)
        try:
            return replace(data, slots=parse_slots(reply.json()))
        except ValueError as err:
            raise UpdateFailed(
                translation_domain=DOMAIN,
                translation_key="slots_malformed",
                translation_placeholders={"url": f"{self.base_url}/slots"},
            ) from err

    def _with_metrics(self, data: LlamaData, reply: Reply) -> LlamaData:
        if reply.status == 501:
            return replace(data, metrics_enabled=False)
        samples = parse_prometheus(reply.text)
        counters = Counters.from_samples(samples, time.monotonic())
        rates = compute_rates(self._counters, counters) if self._counters else None
        self._counters = counters
        rates = self._keep_last_speeds(rates)
        return replace(
            data,
            counters=counters,
            rates=rates,
            requests_processing=samples.get(REQUESTS_PROCESSING),
            requests_deferred=samples.get(REQUESTS_DEFERRED),
        )

    def _keep_last_speeds(self, rates: Rates | None) -> Rates | None:
        """An idle window has no speed: keep showing the last one measured."""
        if rates is None or self._last_rates is None:
            self._last_rates = rates or self._last_rates
            return rates
        last = self._last_rates
        rates = replace(
            rates,
            generation_speed=_first(rates.generation_speed, last.generation_speed),
            prompt_speed=_first(rates.prompt_speed, last.prompt_speed),
            cache_reuse=_first(rates.cache_reuse, last.cache_reuse),
            draft_acceptance=_first(rates.draft_acceptance, last.draft_acceptance),
        )
        self._last_rates = rates
        return rates


def _first(value: float | None, fallback: float | None) -> float | None:
    return value if value is not None else fallback


def _is_loading(body: Any) -> bool:
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and (
        error.get("type") == "unavailable_error" or "loading" in str(error.get("message")).lower()
    )


@dataclass(frozen=True, slots=True)
class ProxyStatus:
    """The proxy's GET /proxy/status (contract 3)."""

    service: str
    reserved_slots: tuple[int, ...]
    total_slots: int | None


@dataclass(frozen=True, slots=True)
class ProxyData:
    """What one poll of the auth proxy found."""

    latency_ms: float
    status: ProxyStatus | None  # None: not the Voice Stack proxy (e.g. llama-server itself)
    open_without_key: bool | None  # None: could not tell (unexpected status)
    open_with_wrong_key: bool | None

    @property
    def lets_requests_through(self) -> bool:
        """True when a request without the right key reached the server."""
        return bool(self.open_without_key or self.open_with_wrong_key)


class ProxyCoordinator(VoiceStackCoordinator[ProxyData]):
    """Checks the auth proxy is up and turns away requests without the key."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, llm: LlamaCoordinator) -> None:
        """Poll the entry's URL; compare slot counts with what `llm` saw."""
        super().__init__(
            hass,
            entry,
            service="auth_proxy",
            base_url=entry.data[CONF_URL],
            interval=PROXY_INTERVAL,
        )
        self._llm = llm

    async def _async_update_data(self) -> ProxyData:
        status_reply = await fetch(self.session, f"{self.base_url}/proxy/status")
        guarded = f"{self.base_url}/v1/models"
        no_key, wrong_key = await asyncio.gather(
            fetch(self.session, guarded),
            fetch(self.session, guarded, {"Authorization": f"Bearer {_WRONG_KEY}"}),
        )
        data = ProxyData(
            latency_ms=status_reply.latency_ms,
            status=_parse_proxy_status(status_reply),
            open_without_key=_let_through(no_key.status),
            open_with_wrong_key=_let_through(wrong_key.status),
        )
        health_issues.sync_proxy_issues(self.hass, self.config_entry, data, self._llm.server_slots)
        if data.status is not None:
            update_device(self.hass, self.config_entry, DEVICE_PROXY, model=data.status.service)
        return data


def _let_through(status: int) -> bool | None:
    if status in (401, 403):
        return False
    if 200 <= status < 300:
        return True
    return None


def _parse_proxy_status(reply: Reply) -> ProxyStatus | None:
    body = reply.json()
    if reply.status != 200 or not isinstance(body, dict):
        return None
    reserved = body.get("reserved_slots")
    total = body.get("total_slots")
    if not isinstance(reserved, list):
        return None
    return ProxyStatus(
        service=str(body.get("service") or "unknown"),
        reserved_slots=tuple(int(s) for s in reserved if isinstance(s, int)),
        total_slots=total if isinstance(total, int) else None,
    )


class GatewayCoordinator(VoiceStackCoordinator[GatewayHealth]):
    """Polls the gateway's GET /health (contract 2): the gateway, ASR and TTS."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, gateway_url: str) -> None:
        """Poll the gateway's HTTP side port."""
        super().__init__(
            hass, entry, service="gateway", base_url=gateway_url, interval=GATEWAY_INTERVAL
        )

    async def _async_update_data(self) -> GatewayHealth:
        url = f"{self.base_url}/health"
        reply = await fetch(self.session, url)
        if reply.status != 200:
            raise _http_error(url, reply.status)
        try:
            health = parse_gateway_health(reply.json())
        except ValueError as err:
            raise UpdateFailed(
                translation_domain=DOMAIN,
                translation_key="probe_malformed",
                translation_placeholders={"url": url},
            ) from err
        self._update_devices(health)
        return health

    def _update_devices(self, health: GatewayHealth) -> None:
        """Versions and model names change when the user upgrades or swaps a backend."""
        update_device(self.hass, self.config_entry, DEVICE_GATEWAY, sw_version=health.version)
        for kind, backend in ((DEVICE_ASR, health.asr), (DEVICE_TTS, health.tts)):
            if backend is not None and backend.models:
                update_device(self.hass, self.config_entry, kind, model=backend.models[0])


@dataclass(slots=True)
class Coordinators:
    """The health and speed pollers of one config entry."""

    llm: LlamaCoordinator
    proxy: ProxyCoordinator
    gateway: GatewayCoordinator | None

    def all(self) -> list[VoiceStackCoordinator[Any]]:
        """Every coordinator that exists for this entry."""
        found: list[VoiceStackCoordinator[Any]] = [self.llm, self.proxy]
        return [*found, self.gateway] if self.gateway else found


def gateway_url(entry: ConfigEntry) -> str | None:
    """The gateway's HTTP side port, from the options (or the initial data)."""
    url = entry.options.get(CONF_GATEWAY_URL) or entry.data.get(CONF_GATEWAY_URL)
    return str(url) if url else None


async def async_setup_coordinators(hass: HomeAssistant, entry: ConfigEntry) -> Coordinators:
    """Create the coordinators and poll each once; a service being down is a state, not an error."""
    llm = LlamaCoordinator(hass, entry)
    gw_url = gateway_url(entry)
    coordinators = Coordinators(
        llm=llm,
        proxy=ProxyCoordinator(hass, entry, llm),
        gateway=GatewayCoordinator(hass, entry, gw_url) if gw_url else None,
    )
    if gw_url is None:
        remove_stale_devices(hass, entry, GATEWAY_DEVICES)
    await llm.async_refresh()  # first: the proxy check compares slot counts with it
    await asyncio.gather(*(c.async_refresh() for c in coordinators.all() if c is not llm))
    return coordinators


def health_diagnostics(coordinators: Coordinators | None) -> dict[str, Any]:
    """What each poller last saw, for diagnostics (no keys: the probes never read any)."""
    if coordinators is None:
        return {}
    result: dict[str, Any] = {}
    for key, coordinator in (
        ("llm_server", coordinators.llm),
        ("auth_proxy", coordinators.proxy),
        ("gateway", coordinators.gateway),
    ):
        if coordinator is None:
            result[key] = None
            continue
        data = coordinator.data if coordinator.reachable else None
        result[key] = {
            "reachable": coordinator.reachable,
            "interval_s": coordinator.update_interval.total_seconds()
            if coordinator.update_interval
            else None,
            "data": asdict(data) if data is not None else None,
        }
    return result
