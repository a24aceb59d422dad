"""metrics.py: the Prometheus text and the /health document others read."""

from __future__ import annotations

import asyncio

from voice_stack_gateway.metrics import EarlyResult, EndedBy, Kind, Metrics


def test_prometheus_text() -> None:
    m = Metrics("http://a", "http://user:pw@t/v1")
    m.latency[Kind.TTS].observe(3.0)
    m.latency[Kind.TTS].observe(99999.0)
    m.error(Kind.TTS, "backend-timeout")
    m.error(Kind.TTS, "backend-timeout")
    m.requests[Kind.TTS] += 2
    m.early[EarlyResult.HIT] += 1
    m.turn_end[EndedBy.GATEWAY] += 3
    text = m.prometheus()
    assert 'gateway_latency_seconds_bucket{kind="tts",le="0.005"} 1' in text
    assert 'gateway_latency_seconds_bucket{kind="tts",le="+Inf"} 2' in text
    assert 'gateway_latency_seconds_count{kind="tts"} 2' in text
    # every request kind is there from the start, so a rate over the first requests works
    assert 'gateway_latency_seconds_sum{kind="stt"} 0.000000' in text
    assert 'gateway_requests_total{kind="tts_stream"} 0' in text
    assert 'gateway_requests_total{kind="tts"} 2' in text
    assert 'gateway_errors_total{kind="tts",code="backend-timeout"} 2' in text
    assert 'gateway_stt_early_total{result="hit"} 1' in text
    assert 'gateway_stt_early_total{result="wasted"} 0' in text
    assert 'gateway_stt_turn_end_total{by="gateway"} 3' in text
    assert 'gateway_stt_turn_end_total{by="client"} 0' in text
    assert "# TYPE gateway_stt_turn_end_total counter" in text
    assert 'gateway_backend_up{backend="asr"} 0' in text
    assert "pw" not in text


def _tasks(m: Metrics) -> int:
    (line,) = (x for x in m.prometheus().splitlines() if x.startswith("gateway_asyncio_tasks "))
    return int(line.split()[1])


async def test_asyncio_task_gauge_counts_the_loops_tasks() -> None:
    m = Metrics("http://a", "http://t/v1")
    before = _tasks(m)
    stop = asyncio.Event()
    waiters = [asyncio.create_task(stop.wait()) for _ in range(3)]
    during = _tasks(m)
    stop.set()
    await asyncio.gather(*waiters)
    assert during == before + 3
    assert before >= 1  # this test's own task
    assert "# TYPE gateway_asyncio_tasks gauge" in m.prometheus()


def test_asyncio_task_gauge_outside_a_loop() -> None:
    assert _tasks(Metrics("http://a", "http://t/v1")) == 0


def test_health_document() -> None:
    m = Metrics("http://a/v1", "http://t/v1")
    health = m.health("0.1.0")
    assert set(health) == {"status", "version", "uptime_s", "active_sessions", "backends"}
    assert health["status"] == "ok"
    backends = health["backends"]
    assert isinstance(backends, dict)
    assert set(backends) == {"asr", "tts"}
    assert set(backends["asr"]) == {
        "url", "status", "last_success", "last_error", "last_error_at", "latency_ms", "models"
    }  # fmt: skip
    assert backends["tts"]["voices"] == []
    assert backends["asr"]["status"] == "unknown"
    m.tts_backend.record(False, None, "TTS health probe failed")
    m.stt_backend.record(None, None, "refused")  # a refused request: still up
    assert m.health("0.1.0")["status"] == "degraded"
    assert m.stt_backend.status == "unknown"
    assert m.stt_backend.last_error == "refused"
