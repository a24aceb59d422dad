"""The speech detector bench's run (bench/vad_bench.py): the grid's scenes made one by one and
put through every detector, then HA's segmenter over the same scenes, then the report.

The utterances are spoken first: piper's by the speech server (corpus.speak, cached on disk),
espeak-ng's locally (voices.speak_espeak, cached too), and the human recordings taken from
pocketsphinx's sdist (recorded.load, fetched once into .cache/recorded). Before measuring, every
detector hears the first scene once, unrecorded: imports, model loads and first-call allocations
are not timed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from voice_stack_bench.endpoint.corpus import Spoken, load_corpus, speak

from .detectors import DETECTORS
from .facts import setup_facts
from .grid import PIPER, RECORDED, Planned, grid_for
from .ha_segmenter import HaSegmenter
from .measure import Measured, measure
from .recorded import ENTRIES as RECORDED_ENTRIES
from .recorded import load as load_recorded
from .vad_report import Row, report
from .voices import speak_espeak

type Log = Callable[[str], None]


def _voices(speech_url: str, plan: list[Planned], log: Log) -> dict[tuple[str, str], Spoken]:
    """Every (utterance, voice) the plan hears, spoken."""
    entries = {p.entry.id: p.entry for p in plan}
    piper_ids = sorted({p.entry.id for p in plan if p.voice == PIPER})
    log(f"piper speaks {len(piper_ids)} utterances (the speech server, cached in .cache)")
    piper = asyncio.run(speak(speech_url, tuple(entries[i] for i in piper_ids)))
    spoken = {(sp.entry.id, PIPER): sp for sp in piper}
    others = sorted({(p.entry.id, p.voice) for p in plan if p.voice not in (PIPER, RECORDED)})
    log(f"espeak-ng speaks {len(others)} utterance-voices (cached in .cache)")
    for entry_id, voice in others:
        spoken[entry_id, voice] = speak_espeak(entries[entry_id], voice)
    if any(p.voice == RECORDED for p in plan):
        log("recorded speech: pocketsphinx 5.1.1's test recordings (the sdist in .cache/recorded)")
        spoken |= {(sp.entry.id, RECORDED): sp for sp in load_recorded()}
    return spoken


def run(quick: bool, speech_url: str, log: Log) -> dict[str, Any]:
    """One JSON document: the setup, every detector's figures beside HA's segmenter's."""
    started, load_start = time.monotonic(), os.getloadavg()
    corpus = load_corpus()
    grid = grid_for(quick, corpus)
    plan = grid.plan(corpus.entries, RECORDED_ENTRIES)
    spoken = _voices(speech_url, plan, log)
    names = tuple(DETECTORS)
    log(f"{len(plan)} scenes through {', '.join(names)}")
    measure(plan[0], spoken[plan[0].entry.id, plan[0].voice], DETECTORS)  # warm-up, unrecorded
    measured: list[Measured] = []
    with HaSegmenter() as ha:
        for i, planned in enumerate(plan):
            one, audio = measure(planned, spoken[planned.entry.id, planned.voice], DETECTORS)
            ha.add(f"{i:05d}", audio)
            measured.append(one)
            if (i + 1) % 50 == 0 or i + 1 == len(plan):
                log(f"  {i + 1}/{len(plan)} scenes ({time.monotonic() - started:.0f} s)")
        load_detectors = os.getloadavg()
        log("HA's segmenter over the same scenes (ha11 venv)")
        ha_doc = ha.ends()
    rows = []
    for i, one in enumerate(measured):
        end = ha_doc["ends_ms"][f"{i:05d}"]
        rows.append(Row(one, None if end is None else round(end - one.last_word_ms, 1)))
    heard_recorded = {p.entry.id for p in plan if p.voice == RECORDED}
    recordings = tuple(s for (i, v), s in spoken.items() if v == RECORDED and i in heard_recorded)
    setup = setup_facts(grid, corpus.entries, plan, recordings)
    setup["versions"]["ha11"] = ha_doc["versions"]
    setup["load_average"] = {"start": load_start, "after_detectors": load_detectors,
                             "end": os.getloadavg()}  # fmt: skip
    return {
        "setup": setup,
        **report(rows, names),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
