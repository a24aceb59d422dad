"""Who may connect, and how many at once. Wyoming has no authentication and the bundle
publishes the gateway on the LAN, so a client is first checked against the allowed networks
(`--allow`; `private` by default: loopback and the private, link-local and shared ranges a
home network and its VPN use), then against a per-host limit below the global one, so that
one host (a broken client, or a hostile one) cannot take every connection from Home Assistant."""

from __future__ import annotations

import ipaddress
from collections import Counter
from enum import StrEnum

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# `private`: what a home LAN, its containers and its VPN (Tailscale's 100.64/10) use
PRIVATE = (
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
    "100.64.0.0/10", "::1/128", "fc00::/7", "fe80::/10",
)  # fmt: skip
WORDS = {"private": PRIVATE, "any": ("0.0.0.0/0", "::/0")}


class Refused(StrEnum):
    """Why a connection was refused (the `reason` label of gateway_refused_total)."""

    NOT_ALLOWED = "not_allowed"  # its address is outside --allow
    HOST_LIMIT = "host_limit"  # its host holds --max-connections-per-host already
    LIMIT = "max_connections"  # the gateway holds --max-connections already


def parse_allow(value: str) -> tuple[Network, ...]:
    """Networks and addresses, comma or space separated, and the words `private` and `any`;
    ValueError names the item that is neither."""
    networks: list[Network] = []
    for item in value.replace(",", " ").split():
        for text in WORDS.get(item.lower(), (item,)):
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ValueError(f"{item!r} is not a network, an address, private or any") from None
    return tuple(networks)


def address_of(peer: object) -> Address | None:
    """The client's IP address from a socket's peername (an IPv4 one mapped into IPv6 is
    unmapped, so 192.168.1.0/24 matches it on a dual-stack listener)."""
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def allowed(address: Address | None, networks: tuple[Network, ...]) -> bool:
    return address is not None and any(address in network for network in networks)


class Admission:
    """The open connections by host, and the checks a new one must pass."""

    def __init__(self, networks: tuple[Network, ...], total: int, per_host: int) -> None:
        self.networks = networks
        self._total = total
        self._per_host = per_host
        self._open: Counter[str] = Counter()

    def allows(self, address: Address | None) -> bool:
        """Whether `address` is inside the allowed networks (both ports ask this)."""
        return allowed(address, self.networks)

    def admit(self, address: Address | None) -> Refused | None:
        """None and the connection is counted (release it when it ends), or why it is not."""
        if not self.allows(address):
            return Refused.NOT_ALLOWED
        if self._open.total() >= self._total:
            return Refused.LIMIT
        host = str(address)
        if self._open[host] >= self._per_host:
            return Refused.HOST_LIMIT
        self._open[host] += 1
        return None

    def release(self, address: Address | None) -> None:
        host = str(address)
        self._open[host] -= 1
        if self._open[host] <= 0:
            del self._open[host]
