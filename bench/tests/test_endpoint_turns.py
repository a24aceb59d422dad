"""voice_stack_bench/endpoint/turns.py: a turn's times are on the microphone's clock, so the
bench's own lag in streaming the audio is not counted against the gateway (synthetic clock
readings: nothing here is timed)."""

from __future__ import annotations

from voice_stack_bench.endpoint.turns import CHUNK_MS, Pacing, decided_ms

T0 = 1000.0  # the loop's clock when the stream started, in s


def test_a_chunk_sent_late_is_the_lag_taken_out() -> None:
    pacing = Pacing(T0)
    pacing.sent(audio_ms=1000, now=T0 + 1.015)  # the chunk ending at 1 s went 15 ms late
    assert round(pacing.lag_ms, 6) == 15
    # a transcript 100 ms after that chunk is 1100 ms into the stream on the microphone's clock
    assert round(pacing.since_start(T0 + 1.115), 6) == 1100


def test_the_lag_is_the_last_chunk_s() -> None:
    pacing = Pacing(T0)
    pacing.sent(audio_ms=20, now=T0 + 0.050)
    pacing.sent(audio_ms=40, now=T0 + 0.041)  # caught up
    assert round(pacing.lag_ms, 6) == 1
    assert round(pacing.since_start(T0 + 0.141), 6) == 140


def test_a_chunk_on_time_is_no_lag() -> None:
    pacing = Pacing(T0)
    assert pacing.since_start(T0 + 0.5) == 500  # nothing sent yet
    pacing.sent(audio_ms=20, now=T0 + 0.0199)  # woken a hair early
    assert pacing.lag_ms == 0


def test_ha_knows_its_hold_ended_once_the_chunk_holding_the_end_arrived() -> None:
    """HA's segmenter judges 10 ms pieces of the client's 20 ms chunks: the audio it passed on
    ends 10 or 20 ms before the chunk that ended it has arrived."""
    assert CHUNK_MS == 20
    assert decided_ms(1000) == 1020  # ended on the first piece of the chunk 1000-1020 ms
    assert decided_ms(1010) == 1020  # on its second piece
    assert decided_ms(0) == 20
