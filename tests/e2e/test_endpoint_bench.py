"""bench/endpoint_bench.py --quick for real (the speech server, the gateways, HA 2026.11's
segmenter): the JSON's shape and the invariants the bench's design promises. No figure is timed
(the figures go to docs/benchmarks.md); what is asserted follows from the audio and the rules:
HA's segmenter is deterministic on the same audio, a turn's end precedes or equals its
transcript, and the report's summaries are the per-utterance rows added up."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from voice_stack_bench.endpoint.corpus import load_corpus, normalize
from voice_stack_dev.paths import REPO, venv_bin

from .demo_process import run_stopping_cleanly

BENCH = REPO / "bench" / "endpoint_bench.py"
LIMIT_S = 6 * 60
HA_HOLDS = ("ha_0.25", "ha_0.7", "ha_1.25")
FALLBACK = ("gateway_400", "gateway_700", "gateway_off")  # HA's 0.7 s hold behind each
OWN_VAD = "gateway_own_vad"
RECORD = {"ended_ms", "after_pause_ms", "transcript_ms", "by", "cut_short", "transcript",
          "exact", "wer"}  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(LIMIT_S + 120)]


@pytest.fixture(scope="module")
def bench(service_logs: Path) -> dict[str, Any]:
    """One --quick run; `service_logs` marks the tests `real` (the bench's logs are in its JSON)."""
    argv = [str(venv_bin("ha11", "python")), str(BENCH), "--quick"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "dev")}
    code, stdout, stderr = run_stopping_cleanly(argv, env, LIMIT_S)
    assert code == 0, stderr[-4000:]
    report: dict[str, Any] = json.loads(stdout)
    return report


def _rows(bench: dict[str, Any], setting: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(u, u["results"][setting]) for u in bench["utterances"]]


def test_every_setting_ran_or_says_why_not(bench: dict[str, Any]) -> None:
    settings = set(bench["settings"])
    assert settings >= {*HA_HOLDS, *FALLBACK}
    assert (OWN_VAD in settings) != (OWN_VAD in bench["skipped"])
    assert all(isinstance(why, str) and why for why in bench["skipped"].values())
    reasons = bench["gateway_turn_reasons"]
    assert set(reasons) == {n for n in settings if n.startswith("gateway_")}
    assert all(isinstance(n, int) and n > 0 for r in reasons.values() for n in r.values())
    corpus = load_corpus()
    assert [u["id"] for u in bench["utterances"]] == list(corpus.quick)
    for u in bench["utterances"]:
        assert set(u["results"]) == settings
        assert all(set(r) == RECORD for r in u["results"].values())


def test_each_turn_is_consistent(bench: dict[str, Any]) -> None:
    for u in bench["utterances"]:
        text = " ".join(u["parts"])
        for name, r in u["results"].items():
            assert r["cut_short"] == (r["ended_ms"] < 0), (u["id"], name)
            assert r["transcript_ms"] >= r["ended_ms"], (u["id"], name)
            assert r["exact"] == (normalize(r["transcript"]) == normalize(text))
            assert r["exact"] <= (r["wer"] == 0)
            assert (r["after_pause_ms"] is None) == (u["pause_ms"] == 0)
            if r["by"] == "gateway":
                assert r["transcript_ms"] == r["ended_ms"]  # the transcript ends the turn


def test_ha_holds_are_ordered_on_the_same_audio(bench: dict[str, Any]) -> None:
    for u in bench["utterances"]:
        ends = [u["results"][h]["ended_ms"] for h in HA_HOLDS]
        assert ends == sorted(ends), u["id"]
        assert all(u["results"][h]["by"] == "ha_hold" for h in HA_HOLDS)


def test_a_hold_through_the_gateway_ends_where_the_hold_alone_does(bench: dict[str, Any]) -> None:
    """The client's HA segmenter and the offline one see the same audio: same end, exactly."""
    for name in FALLBACK:
        for u, r in _rows(bench, name):
            assert r["by"] in {"gateway", "ha_hold"}, (u["id"], name)
            if r["by"] == "ha_hold":
                assert r["ended_ms"] == u["results"]["ha_0.7"]["ended_ms"], (u["id"], name)
    assert {r["by"] for _u, r in _rows(bench, "gateway_off")} == {"ha_hold"}
    if OWN_VAD in bench["settings"]:
        assert {r["by"] for _u, r in _rows(bench, OWN_VAD)} <= {"gateway", "cap"}


def test_no_complete_request_is_cut_and_the_gateway_never_cuts_one_that_cannot_end(
    bench: dict[str, Any],
) -> None:
    for name in bench["settings"]:
        for u, r in _rows(bench, name):
            if u["class"] == "complete":
                assert not r["cut_short"], (u["id"], name)
            if u["class"] == "pause_cannot_end" and r["by"] == "gateway":
                assert not r["cut_short"], (u["id"], name, r["transcript"])


def test_summaries_add_up(bench: dict[str, Any]) -> None:
    for name, classes in bench["by_class"].items():
        for kind, summary in classes.items():
            rows = [r for u, r in _rows(bench, name) if u["class"] == kind]
            assert summary["n"] == len(rows)
            assert summary["cut_short"] == sum(r["cut_short"] for r in rows)
            assert summary["ended_by"] == {
                by: sum(r["by"] == by for r in rows) for by in {r["by"] for r in rows}
            }
            median = statistics.median(r["ended_ms"] for r in rows)
            assert summary["ended_ms"]["median"] == round(median, 1)
    goals = bench["goals"]
    cuts = goals["cannot_end_cut_short"]
    assert cuts["cut_short"] == {
        n: c["pause_cannot_end"]["cut_short"] for n, c in bench["by_class"].items()
    }
    for name in ("gateway_400", "gateway_700"):
        assert cuts[f"{name}_met"] == (cuts["cut_short"][name] <= cuts["cut_short"]["ha_0.7"])
        ratio = goals["complete_last_word_to_transcript_ratio"][name]
        assert ratio["met"] == (ratio["vs_ha_0.7_then_stt"] <= 0.6)
