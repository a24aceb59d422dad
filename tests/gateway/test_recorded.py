"""The vad bench's human recordings (bench/voice_stack_bench/room/recorded.py): pocketsphinx
5.1.1's test recordings, from its sdist, fetched into .cache/recorded as the bench fetches it
(skipped only when it cannot be fetched). Each loads as 16 kHz speech trimmed at its own noise
floor, and the grid places them after the corpus's scenes without moving those."""

from __future__ import annotations

import numpy as np
import pytest

from voice_stack_bench.endpoint.corpus import BYTES_PER_MS, RATE, Spoken, load_corpus
from voice_stack_bench.room.grid import RECORDED, VOICES, Grid
from voice_stack_bench.room.recorded import (
    ENTRIES,
    RECORDINGS,
    Recording,
    RecordingsUnavailable,
    extracted,
    load,
    pcm_of,
    sound_level,
    spoken_recording,
)


@pytest.fixture(scope="module")
def recordings() -> tuple[Spoken, ...]:
    try:
        return load()
    except RecordingsUnavailable as exc:
        pytest.skip(f"the recorded speech cannot be fetched: {exc}")


def test_every_recording_loads_as_trimmed_speech(recordings: tuple[Spoken, ...]) -> None:
    assert [sp.entry.id for sp in recordings] == [r.id for r in RECORDINGS]
    folder = extracted()
    for recording, sp in zip(RECORDINGS, recordings, strict=True):
        assert (sp.entry.kind, sp.entry.parts, sp.entry.pause_ms) == (
            "complete",
            (recording.text,),
            0,
        )
        assert len(sp.speech) % 2 == 0
        ms = len(sp.speech) / BYTES_PER_MS
        assert 500 < ms < 4000, recording.id  # short requests, not read paragraphs
        assert sp.spans_ms == ((0.0, ms),)
        raw = pcm_of(recording, folder)
        before, after = sp.trimmed_ms[0]
        assert 0 <= before < 1000, recording.id
        assert 0 <= after < 1000, recording.id
        # what was cut is the recording's own silence: the speech is the rest, unscaled
        assert abs(before + ms + after - len(raw) / BYTES_PER_MS) < 0.2
        start = raw.find(sp.speech)  # the cuts are kept to 0.1 ms: within 2 samples
        assert abs(start / 2 - before * RATE / 1000) <= 2, recording.id
        # its first and last samples are sound, at the recording's own level
        samples = np.frombuffer(sp.speech, dtype="<i2").astype(np.float64)
        level = sound_level(raw)
        assert abs(samples[0]) > level * 0.99
        assert abs(samples[-1]) > level * 0.99
        # the words stand well above what was cut around them
        cut = np.frombuffer(raw[:start] + raw[start + len(sp.speech) :], dtype="<i2")
        rms = float(np.sqrt(np.mean(samples**2)))
        assert rms > 4 * float(np.sqrt(np.mean(cut.astype(np.float64) ** 2))), recording.id


def test_a_recording_is_trimmed_at_its_own_noise_floor() -> None:
    """A burst of sound between stretches of noise well above the corpus's TRIM_LEVEL: the
    noise is cut, the burst kept to within a sample's worth of a millisecond."""
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 150, RATE)  # a floor peaking near 600, six times TRIM_LEVEL
    t = np.arange(RATE // 2) / RATE
    burst = 8000 * np.sin(2 * np.pi * 200 * t) * np.hanning(len(t)) ** 0.05
    audio = np.concatenate([noise[: RATE // 4], burst + noise[: len(burst)], noise[RATE // 4 :]])
    pcm = np.clip(np.round(audio), -32768, 32767).astype("<i2").tobytes()
    sp = spoken_recording(Recording("burst", "none.raw", "burst", "a test"), pcm)
    before, after = sp.trimmed_ms[0]
    assert 250 <= before < 262
    assert 750 <= after < 762
    assert 480 < sp.spans_ms[0][1] <= 500


def test_the_grid_places_the_recordings_after_the_corpus_scenes() -> None:
    corpus = load_corpus()
    without = Grid(("living",), ("hvac",), (10, 20), per_class=2)
    with_them = Grid(("living",), ("hvac",), (10, 20), per_class=2, recorded_per_cell=2)
    plain = without.plan(corpus.entries)
    plan = with_them.plan(corpus.entries, ENTRIES)
    assert [p for p in plan if p.voice != RECORDED] == plain  # the corpus's scenes unmoved
    recorded = [p for p in plan if p.voice == RECORDED]
    assert len(recorded) == 2 * len(with_them.cells())
    assert [p.entry.id for p in recorded] == [e.id for e in ENTRIES[:6]]  # rotating
    assert all(p.entry.kind == "complete" for p in recorded)
    assert len({p.seed for p in plan}) == len(plan)
    assert RECORDED not in VOICES  # no synthetic voice speaks them
    with pytest.raises(ValueError, match="recorded"):
        with_them.plan(corpus.entries)
