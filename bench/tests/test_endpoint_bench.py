"""bench/endpoint_bench.py --quick for real (the speech server, the gateways, HA 2026.11's
segmenter), in both ASR modes (real whisper, and fast: modelled): the JSON's shape and the
invariants the bench's design promises. No figure is timed (the figures go to
docs/benchmarks.md); what is asserted follows from the audio and the rules: HA's segmenter is
deterministic on the same audio, a turn's end precedes or equals its transcript, the report's
summaries are the per-utterance rows added up, and fast mode answers every upload with whisper's
transcript of the same speech, said plainly in the JSON."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.demo_process import run_stopping_cleanly
from voice_stack_bench.endpoint.corpus import load_corpus, normalize
from voice_stack_dev.paths import REPO, venv_bin
from voice_stack_dev.speech_asr import DEFAULT_DELAY_MS, HOW, MODES

BENCH = REPO / "bench" / "endpoint_bench.py"
LIMIT_S = 6 * 60
HA_HOLDS = ("ha_0.25", "ha_0.7", "ha_1.25")
# HA's 0.7 s hold behind each
FALLBACK = ("gateway_400", "gateway_400_one_tier", "gateway_700", "gateway_off")
OWN_VAD = "gateway_own_vad"
RECORD = {"ended_ms", "after_pause_ms", "transcript_ms", "by", "cut_short", "transcript",
          "exact", "wer", "stream_lag_ms"}  # fmt: skip

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


@pytest.fixture(params=MODES)
def run(bench: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    """One ASR mode's report: its settings, per class, goals and every utterance."""
    mode: dict[str, Any] = bench["asr_modes"][request.param]
    return mode


def _rows(run: dict[str, Any], setting: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The turns of `setting` that completed (a failed one's row is its error alone)."""
    return [(u, u["results"][setting]) for u in run["utterances"]
            if "error" not in u["results"][setting]]  # fmt: skip


def _done(u: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in u["results"].items() if "error" not in r}


def test_failed_turns_are_listed_and_left_out(bench: dict[str, Any], run: dict[str, Any]) -> None:
    """A failed turn does not stop the run: it is listed, counted, and in no figure."""
    failed = [{"id": u["id"], "setting": name, "error": r["error"]}
              for u in run["utterances"] for name, r in u["results"].items()
              if "error" in r]  # fmt: skip
    assert run["errors"] == failed
    assert run["goals"]["errors"] == len(failed)
    assert bench["errors"] == {m: r["errors"] for m, r in bench["asr_modes"].items()}
    for name, classes in run["by_class"].items():
        for kind, summary in classes.items():
            mine = [u["results"][name] for u in run["utterances"] if u["class"] == kind]
            assert summary["errors"] == sum("error" in r for r in mine)
            assert summary["n"] == len(mine) - summary["errors"]


def test_both_modes_ran_and_say_what_is_modelled(bench: dict[str, Any]) -> None:
    assert bench["setup"]["asr_modes"] == list(MODES) == list(bench["asr_modes"])
    assert bench["goals"] == {m: r["goals"] for m, r in bench["asr_modes"].items()}
    real, fast = bench["asr_modes"]["real"], bench["asr_modes"]["fast"]
    assert real["asr"]["modelled"] is False
    assert "modelled_figures" not in real
    facts = fast["asr"]
    assert facts["modelled"] is True
    assert facts["delay_ms"] == DEFAULT_DELAY_MS
    assert facts["transcript"] == HOW
    # every upload was primed: fast mode ran whisper on none of them
    assert facts["misses_transcribed_by_whisper"] == 0
    assert facts["answered_from_whisper_transcript"] > 0
    assert isinstance(fast["modelled_figures"], str)
    assert fast["modelled_figures"]
    assert all("modelled" in fast["settings"][h] for h in HA_HOLDS)
    assert not any("modelled" in real["settings"][h] for h in HA_HOLDS)
    # HA's holds end the audio where they end it whatever the ASR
    for u_real, u_fast in zip(real["utterances"], fast["utterances"], strict=True):
        assert u_real["id"] == u_fast["id"]
        real_done, fast_done = _done(u_real), _done(u_fast)
        for h in set(HA_HOLDS) & set(real_done) & set(fast_done):
            assert real_done[h]["ended_ms"] == fast_done[h]["ended_ms"]


def test_fast_mode_answers_whisper_s_transcript_of_the_same_speech(bench: dict[str, Any]) -> None:
    """Every turn that ended after the last word sent the whole speech, and every turn that
    ended inside the pause the first part alone: in fast mode they got one transcript each."""
    fast = bench["asr_modes"]["fast"]
    for u in fast["utterances"]:
        rows = _done(u).values()
        whole = {r["transcript"] for r in rows if not r["cut_short"]}
        head = {r["transcript"] for r in rows if _in_pause(r["after_pause_ms"], u["pause_ms"])}
        assert len(whole) <= 1, (u["id"], whole)
        assert len(head) <= 1, (u["id"], head)
        # HA's holds alone wait out the modelled ASR from when HA can know their end, the end of
        # the chunk it fell in: 10 or 20 ms after it (a bound, not a figure)
        for h, r in _done(u).items():
            if h in HA_HOLDS:
                known = 10 if r["by"] == "ha_hold" else 0
                assert r["transcript_ms"] - r["ended_ms"] >= DEFAULT_DELAY_MS + known, (u["id"], h)


def _in_pause(after_pause_ms: float | None, pause_ms: int) -> bool:
    return after_pause_ms is not None and 0 <= after_pause_ms <= pause_ms


def test_every_setting_ran_or_says_why_not(bench: dict[str, Any], run: dict[str, Any]) -> None:
    settings = set(run["settings"])
    assert settings >= {*HA_HOLDS, *FALLBACK}
    assert (OWN_VAD in settings) != (OWN_VAD in bench["skipped"])
    assert all(isinstance(why, str) and why for why in bench["skipped"].values())
    reasons = run["gateway_turn_reasons"]
    assert set(reasons) == {n for n in settings if n.startswith("gateway_")}
    assert all(isinstance(n, int) and n > 0 for r in reasons.values() for n in r.values())
    corpus = load_corpus()
    assert [u["id"] for u in run["utterances"]] == list(corpus.quick)
    for u in run["utterances"]:
        assert set(u["results"]) == settings
        assert all(set(r) in (RECORD, {"error"}) for r in u["results"].values())


def test_each_turn_is_consistent(run: dict[str, Any]) -> None:
    for u in run["utterances"]:
        text = " ".join(u["parts"])
        for name, r in _done(u).items():
            assert r["cut_short"] == (r["ended_ms"] < 0), (u["id"], name)
            assert r["transcript_ms"] >= r["ended_ms"], (u["id"], name)
            assert r["exact"] == (normalize(r["transcript"]) == normalize(text))
            assert r["exact"] <= (r["wer"] == 0)
            assert (r["after_pause_ms"] is None) == (u["pause_ms"] == 0)
            if r["by"] == "gateway":
                assert r["transcript_ms"] == r["ended_ms"]  # the transcript ends the turn


def test_ha_holds_are_ordered_on_the_same_audio(run: dict[str, Any]) -> None:
    for u in run["utterances"]:
        done = _done(u)
        ends = [done[h]["ended_ms"] for h in HA_HOLDS if h in done]
        assert ends == sorted(ends), u["id"]
        assert all(done[h]["by"] == "ha_hold" for h in HA_HOLDS if h in done)


def test_a_hold_through_the_gateway_ends_where_the_hold_alone_does(run: dict[str, Any]) -> None:
    """The client's HA segmenter and the offline one see the same audio: same end, exactly."""
    for name in FALLBACK:
        for u, r in _rows(run, name):
            assert r["by"] in {"gateway", "ha_hold"}, (u["id"], name)
            if r["by"] == "ha_hold" and "ha_0.7" in _done(u):
                assert r["ended_ms"] == u["results"]["ha_0.7"]["ended_ms"], (u["id"], name)
    assert {r["by"] for _u, r in _rows(run, "gateway_off")} == {"ha_hold"}
    if OWN_VAD in run["settings"]:
        assert {r["by"] for _u, r in _rows(run, OWN_VAD)} <= {"gateway", "cap"}


def test_no_complete_request_is_cut_and_the_gateway_never_cuts_one_that_cannot_end(
    run: dict[str, Any],
) -> None:
    for name in run["settings"]:
        for u, r in _rows(run, name):
            if u["class"] == "complete":
                assert not r["cut_short"], (u["id"], name)
            if u["class"] == "pause_cannot_end" and r["by"] == "gateway":
                assert not r["cut_short"], (u["id"], name, r["transcript"])


def test_summaries_add_up(run: dict[str, Any]) -> None:
    for name, classes in run["by_class"].items():
        for kind, summary in classes.items():
            rows = [r for u, r in _rows(run, name) if u["class"] == kind]
            assert summary["n"] == len(rows)
            if not rows:
                continue
            assert summary["cut_short"] == sum(r["cut_short"] for r in rows)
            assert summary["ended_by"] == {
                by: sum(r["by"] == by for r in rows) for by in {r["by"] for r in rows}
            }
            median = statistics.median(r["ended_ms"] for r in rows)
            assert summary["ended_ms"]["median"] == round(median, 1)
    goals = run["goals"]
    cuts = goals["cannot_end_cut_short"]
    assert cuts["cut_short"] == {
        n: c["pause_cannot_end"].get("cut_short", 0) for n, c in run["by_class"].items()
    }
    for name in ("gateway_400", "gateway_400_one_tier", "gateway_700"):
        if not run["errors"]:  # with failed turns HA's cuts on the same utterances are compared
            assert cuts[f"{name}_met"] == (cuts["cut_short"][name] <= cuts["cut_short"]["ha_0.7"])
        ratio = goals["complete_last_word_to_transcript_ratio"][name]
        assert ratio["met"] == (ratio["vs_ha_0.7_then_stt"] <= 0.6)
