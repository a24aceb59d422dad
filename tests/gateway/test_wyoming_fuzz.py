"""bench/wyoming_fuzz.py, once: a real gateway process attacked by every generated case while a
well-behaved client is served beside them. What it must show is what a user relies on: nothing
a LAN host sends crashes, freezes or locks out the gateway, or floods its log."""

from __future__ import annotations

import pytest
from wyoming_fuzz import run

CLIENT_MISTAKES = {
    "bad-request", "bad-audio-format", "audio-too-long", "protocol-error", "payload-too-large",
    "unknown-program", "idle-timeout", "busy", "400", "404", "200",
}  # fmt: skip


@pytest.mark.real
def test_nothing_a_lan_host_sends_stops_the_gateway() -> None:
    report = run(seed=1, idle_timeout=1.0, idle_seconds=2.0, orders=8)
    assert report["alive"]
    assert report["tracebacks_in_log"] == 0
    assert report["left_hanging"] == []  # every bad client was answered or dropped
    assert report["closed_by_gateway"] == report["bad_clients"]  # refused ones included
    assert report["witness"]["attack"]["failures"] == []  # Home Assistant's requests all served
    assert report["witness"]["attack"]["stt_ms"]["n"] > 0
    answered = set(report["answered"])
    assert answered <= CLIENT_MISTAKES  # never internal-error: the client's fault is named
    assert {"idle-timeout", "busy", "payload-too-large", "protocol-error"} <= answered
    assert report["log_lines"]["per_bad_client"] < 0.2  # one host's flood is a few lines
