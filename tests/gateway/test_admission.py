"""admission.py: the allowed networks, and the per-host and global connection counts."""

from __future__ import annotations

import ipaddress

import pytest

from voice_stack_gateway.admission import Admission, Refused, address_of, allowed, parse_allow


def test_words_networks_and_addresses() -> None:
    private = parse_allow("private")
    for ok in ("127.0.0.1", "192.168.1.20", "10.1.2.3", "172.20.0.1", "100.101.102.103", "fd12::1",
               "fe80::1", "::1"):  # fmt: skip
        assert allowed(ipaddress.ip_address(ok), private), ok
    for no in ("8.8.8.8", "172.32.0.1", "2001:db8::1", "192.0.2.1"):
        assert not allowed(ipaddress.ip_address(no), private), no
    mine = parse_allow("192.168.1.0/24, 127.0.0.1 10.0.0.5")
    assert [str(n) for n in mine] == ["192.168.1.0/24", "127.0.0.1/32", "10.0.0.5/32"]
    assert allowed(ipaddress.ip_address("8.8.8.8"), parse_allow("ANY"))
    assert parse_allow("192.168.1.7/24") == (ipaddress.ip_network("192.168.1.0/24"),)
    with pytest.raises(ValueError, match="'lan' is not a network"):
        parse_allow("127.0.0.1,lan")


def test_peer_addresses() -> None:
    assert address_of(("::ffff:192.168.1.5", 5000, 0, 0)) == ipaddress.ip_address("192.168.1.5")
    assert address_of(("fe80::1%eth0", 5000, 0, 2)) == ipaddress.ip_address("fe80::1")
    assert address_of("127.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert address_of(None) is None  # a unix socket, or a peer already gone: never allowed
    assert not allowed(None, parse_allow("any"))


def test_one_host_cannot_take_every_connection() -> None:
    admission = Admission(parse_allow("private"), total=3, per_host=2)
    one, two, three = (ipaddress.ip_address(f"127.0.0.{n}") for n in (1, 2, 3))
    assert admission.admit(one) is None
    assert admission.admit(one) is None
    assert admission.admit(one) is Refused.HOST_LIMIT
    assert admission.admit(two) is None
    assert admission.admit(three) is Refused.LIMIT
    assert admission.admit(ipaddress.ip_address("8.8.8.8")) is Refused.NOT_ALLOWED
    admission.release(one)
    assert admission.admit(three) is None
