"""What the auth proxy and the gateway report, parsed: /proxy/status, /health, /metrics."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from custom_components.voice_stack.llama_data import MalformedReplyError
from custom_components.voice_stack.service_data import (
    LatencyTotals,
    latency_totals,
    mean_ms,
    parse_gateway_health,
    parse_proxy_status,
)


def test_parse_gateway_health_contract_and_gaps() -> None:
    health = parse_gateway_health(
        {
            "status": "degraded",
            "version": "0.1.0",
            "uptime_s": 12.3,
            "active_sessions": 2,
            "backends": {
                "asr": {
                    "url": "http://asr:8000/v1",
                    "status": "down",
                    "last_success": None,
                    "last_error": "refused",
                    "last_error_at": "2026-11-30T01:55:34+00:00",
                    "latency_ms": None,
                    "models": ["tiny.en"],
                },
                "tts": {"status": "weird", "last_success": "not a time", "latency_ms": True},
            },
        }
    )
    assert (health.status, health.version, health.active_sessions) == ("degraded", "0.1.0", 2)
    assert health.asr is not None
    assert health.asr.status == "down"
    assert health.asr.last_error_at == datetime(2026, 11, 30, 1, 55, 34, tzinfo=UTC)
    assert health.asr.models == ("tiny.en",)
    assert health.tts is not None
    assert (health.tts.status, health.tts.last_success, health.tts.latency_ms) == (
        "unknown",
        None,
        None,
    )
    minimal = parse_gateway_health({"status": "ok"})
    assert (minimal.asr, minimal.tts, minimal.version, minimal.active_sessions) == (
        None,
        None,
        None,
        None,
    )
    with pytest.raises(MalformedReplyError):
        parse_gateway_health({"no": "status"})


def test_parse_proxy_status() -> None:
    status = parse_proxy_status(
        {
            "service": "voice-stack-llm-auth",
            "reserved_slots": [0, 1, "2"],
            "total_slots": 4,
            "scoped_keys": True,
            "key_scope": "general",
        }
    )
    assert status is not None
    assert (status.reserved_slots, status.total_slots) == ((0, 1), 4)
    assert (status.scoped_keys, status.key_scope) == (True, "general")
    older = parse_proxy_status({"reserved_slots": [0]})
    assert older is not None
    assert (older.service, older.scoped_keys, older.key_scope) == ("unknown", None, None)
    assert parse_proxy_status({"reserved_slots": "0"}) is None
    assert parse_proxy_status([]) is None


def test_speech_times_from_latency_histograms() -> None:
    samples = {
        'gateway_latency_seconds_sum{kind="stt"}': 1.5,
        'gateway_latency_seconds_count{kind="stt"}': 3.0,
    }
    stt = latency_totals(samples, "stt")
    assert stt == LatencyTotals(1.5, 3.0)
    assert latency_totals(samples, "tts") is None
    both = {
        **samples,
        'gateway_latency_seconds_sum{kind="tts"}': 0.5,
        'gateway_latency_seconds_count{kind="tts"}': 1.0,
    }
    assert latency_totals(both, "stt", "tts") == LatencyTotals(2.0, 4.0)
    assert mean_ms(stt, None) == pytest.approx(500.0)  # all requests so far
    later = LatencyTotals(2.1, 5.0)
    assert mean_ms(later, stt) == pytest.approx(300.0)  # the two new ones
    assert mean_ms(stt, stt) is None  # nothing new
    assert mean_ms(LatencyTotals(0.2, 1.0), later) == pytest.approx(200.0)  # gateway restarted
    assert mean_ms(None, stt) is None
