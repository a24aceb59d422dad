"""What the stack reports, parsed (payloads.py): Prometheus text, counter rates, /slots, /props,
/proxy/status, the gateway's /health and /metrics."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from custom_components.voice_stack.payloads import (
    PREDICTED_TOKENS,
    PROMPT_TOKENS,
    Counters,
    LatencyTotals,
    LlamaData,
    MalformedReplyError,
    Rates,
    compute_rates,
    keep_last_speeds,
    latency_totals,
    mean_ms,
    parse_gateway_health,
    parse_prometheus,
    parse_props,
    parse_proxy_status,
    parse_slots,
)

METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 21
llamacpp:tokens_predicted_total 8 1700000000
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 11
broken_line_without_value
not_a_number abc
"""


def test_parse_prometheus_plain_labelled_and_broken_lines() -> None:
    samples = parse_prometheus(METRICS)
    assert samples[PROMPT_TOKENS] == 21
    assert samples[PREDICTED_TOKENS] == 8  # a trailing timestamp is ignored
    key = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'
    assert samples[key] == 11
    assert "not_a_number" not in samples
    assert "broken_line_without_value" not in samples


def _counters(at: float, **values: float) -> Counters:
    fields = {
        "prompt_tokens": 0.0,
        "prompt_cached": 0.0,
        "prompt_seconds": 0.0,
        "predicted_tokens": 0.0,
        "predicted_seconds": 0.0,
        "draft_tokens": 0.0,
        "draft_accepted": 0.0,
    }
    return Counters(at=at, **{**fields, **values})


def test_rates_from_counter_deltas() -> None:
    earlier = _counters(100.0, prompt_tokens=100, predicted_tokens=50, predicted_seconds=1.0)
    later = _counters(
        110.0,
        prompt_tokens=150,
        prompt_cached=150,
        prompt_seconds=0.5,
        predicted_tokens=250,
        predicted_seconds=3.0,
        draft_tokens=40,
        draft_accepted=30,
    )
    rates = compute_rates(earlier, later)
    assert rates is not None
    assert rates.generation_throughput == pytest.approx(20.0)  # 200 tokens in 10 s
    assert rates.prompt_throughput == pytest.approx(5.0)
    assert rates.generation_speed == pytest.approx(100.0)  # 200 tokens in 2 s of generating
    assert rates.prompt_speed == pytest.approx(100.0)
    assert rates.cache_reuse == pytest.approx(75.0)  # 150 cached of 200
    assert rates.draft_acceptance == pytest.approx(75.0)


def test_rates_idle_window_and_restart() -> None:
    idle = compute_rates(_counters(0.0, predicted_tokens=5), _counters(15.0, predicted_tokens=5))
    assert idle is not None
    assert (idle.generation_throughput, idle.generation_speed, idle.cache_reuse) == (0, None, None)
    restarted = compute_rates(_counters(0.0, prompt_tokens=90), _counters(15.0, prompt_tokens=3))
    assert restarted is None
    assert compute_rates(_counters(5.0), _counters(5.0)) is None


def test_counters_from_samples_default_to_zero() -> None:
    counters = Counters.from_samples({PROMPT_TOKENS: 7.0}, at=1.0)
    assert (counters.prompt_tokens, counters.predicted_tokens) == (7.0, 0.0)


def test_parse_slots_busy_and_kv_use() -> None:
    summary = parse_slots(
        [
            {"id": 0, "n_ctx": 100, "is_processing": True, "n_prompt_tokens": 30,
             "next_token": [{"n_decoded": 10}]},
            {"id": 1, "n_ctx": 100, "is_processing": False, "n_prompt_tokens": 500,
             "next_token": {"n_decoded": 1}},
            {"id": 2, "n_ctx": 100, "is_processing": False},
            {"id": 3, "n_ctx": 100},
        ]
    )  # fmt: skip
    assert (summary.total, summary.busy, summary.context_per_slot) == (4, 1, 100)
    assert [s.tokens for s in summary.slots] == [40, 100, 0, 0]  # slot 1 capped at its context
    assert summary.kv_use == pytest.approx(35.0)
    assert summary.slot(0).id_task is None  # type: ignore[union-attr]
    assert summary.slot(9) is None
    assert parse_slots([]).kv_use is None
    with pytest.raises(MalformedReplyError):
        parse_slots({"error": "nope"})


def test_parse_props() -> None:
    props = parse_props(
        {
            "model_path": "/models/Qwen3-8B-Q4_K_M.gguf",
            "build_info": "b11669-Debian",
            "total_slots": 4,
            "default_generation_settings": {"n_ctx": 8192},
        }
    )
    assert (props.model, props.build, props.total_slots, props.context_size) == (
        "Qwen3-8B-Q4_K_M",
        "b11669-Debian",
        4,
        8192,
    )
    assert props.tool_calling is None  # this build does not say
    assert parse_props({}).model is None
    assert parse_props({"model_alias": "local"}).model_file == "local"  # no path to name it by
    aliased = parse_props(
        {
            "model_alias": "local",
            "model_path": "/m/Gemma.gguf",
            "media_marker": "<m>",
            "chat_template_caps": {"supports_tool_calls": False},
        }
    )
    assert (aliased.model, aliased.model_file, aliased.process) == ("local", "Gemma", "<m>")
    assert aliased.tool_calling is False
    assert aliased.fingerprint == ("/m/Gemma.gguf", None, None, None)
    with pytest.raises(MalformedReplyError):
        parse_props([1])


def test_last_speeds_are_kept_through_idle_windows() -> None:
    last = Rates(1.0, 2.0, 30.0, 400.0, 90.0, None)
    idle = Rates(0.0, 0.0, None, None, None, None)
    kept = keep_last_speeds(idle, last)
    assert kept == Rates(0.0, 0.0, 30.0, 400.0, 90.0, None)
    assert keep_last_speeds(None, last) is None
    assert keep_last_speeds(idle, None) is idle


def test_total_slots_from_slots_or_props() -> None:
    assert LlamaData(loading=True, latency_ms=1).total_slots is None
    props = parse_props({"total_slots": 3})
    assert LlamaData(loading=False, latency_ms=1, props=props).total_slots == 3
    slots = parse_slots([{"id": 0}, {"id": 1}])
    assert LlamaData(loading=False, latency_ms=1, props=props, slots=slots).total_slots == 2


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
