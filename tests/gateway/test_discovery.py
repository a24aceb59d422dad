"""discovery.py: zeroconf advertisement, which never stops the gateway."""

from __future__ import annotations

import pytest

from voice_stack_gateway.discovery import Advertiser, advertised_address, resolve_address


def test_advertised_address() -> None:
    assert advertised_address("0.0.0.0", "192.168.1.5") == "192.168.1.5"
    assert advertised_address("10.0.0.2", "") == "10.0.0.2"
    assert advertised_address("0.0.0.0", "") != "0.0.0.0"


async def test_advertise_host_name_is_resolved(caplog: pytest.LogCaptureFixture) -> None:
    assert await resolve_address("192.168.1.5") == "192.168.1.5"
    assert await resolve_address("localhost") in ("127.0.0.1", "::1")
    adv = Advertiser("voice-stack-test", "0.0.0.0", 10300, "localhost")
    await adv.start()  # no ValueError: the name is resolved before it is packed
    await adv.stop()
    assert adv.address in ("127.0.0.1", "::1")
    # a name that does not resolve: a warning, no advertisement, and no exception
    caplog.clear()
    adv = Advertiser("voice-stack-test", "0.0.0.0", 10300, "no-such-host.invalid")
    await adv.start()
    await adv.stop()
    assert adv.address == "no-such-host.invalid"
    assert "cannot resolve advertise host 'no-such-host.invalid'" in caplog.text


async def test_zeroconf_advertiser_never_fails() -> None:
    adv = Advertiser("voice-stack-test", "127.0.0.1", 10300, "")
    await adv.start()  # registers on loopback, or logs a warning where multicast is unavailable
    await adv.stop()
    assert adv.address == "127.0.0.1"
