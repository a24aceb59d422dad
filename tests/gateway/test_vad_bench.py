"""bench/vad_bench.py: the speech detectors side by side on the room corpus. Its --quick grid once
through the real speech server and HA's segmenter (ha11), the document's shape checked (the human
recordings reported as the voice "recorded"), and the gateway's detector seeing every end in the
quiet room; and the report's arithmetic on its own.
No timing figure is asserted: speed is the bench's to report."""

from __future__ import annotations

from typing import Any

import pytest
from vad_bench import bench

from voice_stack_bench.endpoint.corpus import Entry
from voice_stack_bench.room.detectors import DETECTORS
from voice_stack_bench.room.grid import QUIET, Cell, Planned
from voice_stack_bench.room.measure import Heard, Measured
from voice_stack_bench.room.vad_report import Row, report
from voice_stack_dev.procs import Service

FAMILIES = ("by_class", "by_noise", "by_snr", "by_room", "by_voice", "by_noise_at_snr")
DETECTOR_KEYS = {"n", "end_ms", "missed_ends", "false_pauses_per_100", "missed_corpus_pauses",
                 "corpus_pauses", "cpu_us_per_frame", "eight_satellites_pct_core"}  # fmt: skip


@pytest.fixture(scope="module")
def quick(speech_server: Service) -> dict[str, Any]:
    return bench(quick=True, speech_url=speech_server.url)


def test_the_quick_document(quick: dict[str, Any]) -> None:
    setup = quick["setup"]
    assert set(setup["rooms"]) == {"near", "kitchen", "living", "hall"}
    assert all(r["rt60_measured_s"] > 0 for r in setup["rooms"].values())
    assert set(setup["voices"]) == {"piper", "en-us+m3", "en-gb+f3", "recorded"}
    assert setup["versions"]["ha11"]["homeassistant"]
    assert setup["scenes"] == 12  # 3 cells x (1 utterance of each class + 1 recording)
    assert len(setup["recorded"]["recordings"]) == 3
    assert "Carnegie Mellon" in setup["recorded"]["licence"]
    for group in [quick["overall"], *(g for f in FAMILIES for g in quick[f].values())]:
        for name in DETECTORS:
            assert group[name].keys() >= DETECTOR_KEYS
        assert {"end_ms", "cut_short", "never_ended"} <= group["ha_segmenter"].keys()
        assert "too_noisy" in group["gateway"]
    assert set(quick["by_noise"]) == {QUIET, "hvac", "babble"}
    assert set(quick["by_snr"]) == {"quiet", "10"}
    assert quick["by_voice"]["recorded"]["n"] == 3
    assert quick["by_voice"]["recorded"]["gateway"].keys() >= DETECTOR_KEYS
    assert isinstance(quick["gateway_worse"], list)


def test_the_gateway_sees_every_end_in_the_quiet_room(quick: dict[str, Any]) -> None:
    quiet = quick["by_noise"][QUIET]["gateway"]
    assert quiet["n"] == 4  # the three classes and a recording
    assert quiet["missed_ends"] == 0
    assert quiet["end_ms"]["n"] == 4
    assert quiet["too_noisy"] == 0


def _row(cell: Cell, kind: str, end: float | None, ha: float | None, cpu: float) -> Row:
    """A scene both detectors end at `end`; the gateway sees a pause inside a word and misses
    the utterance's own pause (if it has one)."""
    entry = Entry(kind, kind, ("a", "b") if kind != "complete" else ("a",), 500)
    gaps = len(entry.parts) - 1
    heard = {
        "gateway": Heard(end, 1, gaps, 100, cpu, False),
        "microvad": Heard(end, 0, 0, 100, cpu, None),
    }
    return Row(Measured(Planned(cell, entry, "piper", 0), 1000.0, gaps, heard), ha)


def test_the_report_arithmetic() -> None:
    quiet, noisy = Cell("near", QUIET, None), Cell("near", "babble", 10)
    rows = [_row(quiet, "complete", 300, 1000, 0.001), _row(quiet, "pause_cannot_end", 400, -200,
            0.001), _row(noisy, "complete", None, None, 0.003)]  # fmt: skip
    doc = report(rows, ("gateway", "microvad"))
    gateway = doc["overall"]["gateway"]
    assert gateway["end_ms"] == {"median": 350, "p90": 400, "n": 2}
    assert gateway["missed_ends"] == round(1 / 3, 3)
    assert gateway["false_pauses_per_100"] == 100
    assert (gateway["missed_corpus_pauses"], gateway["corpus_pauses"]) == (1.0, 1)
    assert gateway["cpu_us_per_frame"] == 20  # cells: 10 and 30 us per frame
    assert gateway["eight_satellites_pct_core"] == 0.8
    assert gateway["too_noisy"] == 0
    ha = doc["overall"]["ha_segmenter"]
    assert (ha["end_ms"]["median"], ha["cut_short"], ha["never_ended"]) == (1000, 0.333, 0.333)
    # on the scenes both ended in: HA's cut (before the last word) and its never-end left out
    assert doc["overall"]["ratios"]["gateway"] == {
        "vs_microvad": {"ratio": 1.0, "n": 2},
        "vs_ha_segmenter": {"ratio": 0.3, "n": 1},
    }
    worse = {(w["where"], w["metric"]) for w in doc["gateway_worse"]}
    assert ("overall", "false_pauses_per_100") in worse
    assert ("overall", "end_ms.median") not in worse
