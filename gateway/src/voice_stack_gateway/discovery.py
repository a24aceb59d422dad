"""Zeroconf (mDNS) advertisement of `_wyoming._tcp.local.` for Home Assistant discovery."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

_LOGGER = logging.getLogger(__name__)
SERVICE_TYPE = "_wyoming._tcp.local."
RESOLVE_TIMEOUT = 5.0


def advertised_address(bind_host: str, override: str) -> str:
    """The address to announce: the override, else the bind address unless it is a wildcard,
    else the address of the interface that routes to the mDNS group."""
    if override:
        return override
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("224.0.0.251", 5353))
            return str(sock.getsockname()[0])
        except OSError:
            return "127.0.0.1"


async def resolve_address(host: str, limit: float = RESOLVE_TIMEOUT) -> str | None:
    """`host` if it is an IP address, else its first address from the resolver (which runs in
    the loop's executor, so a slow DNS server never stalls the gateway); None if it cannot be
    resolved within `limit` seconds."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(limit):
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError) as exc:
        _LOGGER.warning(
            "Zeroconf disabled: cannot resolve advertise host %r (%s)",
            host,
            exc or type(exc).__name__,
        )
        return None
    return str(infos[0][4][0])


class Advertiser:
    def __init__(self, name: str, bind_host: str, port: int, override: str) -> None:
        self.name = name
        self.port = port
        self.address = advertised_address(bind_host, override)
        self._zc: object | None = None
        self._info: object | None = None

    async def start(self) -> None:
        try:
            # imported only when advertising: zeroconf costs several MB of resident memory
            from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf  # noqa: PLC0415
        except ImportError:  # pragma: no cover - zeroconf is a dependency
            _LOGGER.error("zeroconf is not installed; discovery disabled")
            return
        address = await resolve_address(self.address)
        if address is None:
            return
        self.address = address
        packed = ipaddress.ip_address(address).packed
        info = AsyncServiceInfo(
            SERVICE_TYPE, f"{self.name}.{SERVICE_TYPE}", addresses=[packed], port=self.port
        )
        zc: AsyncZeroconf | None = None
        try:
            zc = AsyncZeroconf()
            await zc.async_register_service(info)
        except Exception as exc:  # discovery is optional: it never stops the gateway
            _LOGGER.warning("Zeroconf advertisement failed: %s", exc)
            if zc is not None:
                await zc.async_close()
            return
        self._zc, self._info = zc, info
        _LOGGER.info("Zeroconf: %s at %s:%s", self.name, self.address, self.port)

    async def stop(self) -> None:
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf  # noqa: PLC0415

        if isinstance(self._zc, AsyncZeroconf) and isinstance(self._info, AsyncServiceInfo):
            await self._zc.async_unregister_service(self._info)
            await self._zc.async_close()
