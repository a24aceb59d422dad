"""The speech detector bench's arithmetic (bench/vad_bench.py): from every scene's verdicts to
each detector's figures, overall and per class, noise kind, SNR, room, voice, and noise kind at
each SNR, beside HA's segmenter; the ratios of their ends; and where the gateway's detector does
worse than another. Kept out of the bench script so a test can check it on its own.

Per detector and group of scenes:
- end_ms: median and p90 of when the pause after the last word was seen (from the last word),
  over the scenes it was seen in; missed_ends: the share where none was seen within 3 s;
- false_pauses_per_100: pauses seen inside a part, per 100 utterances;
- missed_corpus_pauses: the share of the corpus's own pauses between parts (classes b and c)
  not seen, over `corpus_pauses` of them;
- cpu_us_per_frame: the median over the group's cells of the detector's CPU per 20 ms frame in
  that cell; eight_satellites_pct_core: 8 satellites x 50 frames/s of it, in % of one core;
- too_noisy (the gateway's only): the share it judged too noisy to judge pauses, at its end.
Each detector's end_ms is over the scenes it saw an end in, so a detector that misses the hard
ones looks quicker there: the ratios (a detector's median end over microVAD's, over HA's
segmenter's) and the gateway's comparisons in `gateway_worse` take the scenes both ended.
HA's segmenter (its 0.7 s hold): its end after the last word (median, p90) where it ended after
the last word; cut_short: the share it ended before the last word (at a pause inside the
request, classes b and c); never_ended: the share it had not ended 6 s after the last word.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..stats import median_p90, pct
from .grid import QUIET
from .measure import Heard, Measured

GATEWAY = "gateway"
MICROVAD = "microvad"
FRAMES_PER_S = 50
SATELLITES = 8
# the gateway's detector is listed as worse than another when it is worse by at least this much
# (its ends: on the scenes where both saw one)
WORSE_BY = {
    "end_ms.median": 20.0,  # one frame
    "end_ms.p90": 20.0,
    "missed_ends": 0.02,
    "false_pauses_per_100": 2.0,
    "missed_corpus_pauses": 0.05,
}
type Doc = dict[str, Any]


@dataclass(frozen=True)
class Row:
    """One scene: what each detector made of it, and where HA's segmenter ended it."""

    measured: Measured
    ha_end_ms: float | None  # from the last word (None: it ran out of audio first)


FAMILIES: dict[str, Callable[[Row], str]] = {
    "by_class": lambda r: r.measured.planned.entry.kind,
    "by_noise": lambda r: r.measured.planned.cell.noise,
    "by_snr": lambda r: r.measured.planned.cell.snr,
    "by_room": lambda r: r.measured.planned.cell.room,
    "by_voice": lambda r: r.measured.planned.voice,
    "by_noise_at_snr": lambda r: (
        QUIET if r.measured.planned.cell.noise == QUIET
        else f"{r.measured.planned.cell.noise}@{r.measured.planned.cell.snr}"
    ),
}  # fmt: skip


def _share(count: int, n: int) -> float:
    return round(count / n, 3) if n else 0.0


def cpu_us_per_frame(rows: list[Row], name: str) -> float:
    """The median over the rows' cells of the detector's CPU per frame in each cell."""
    cells: dict[str, list[Heard]] = {}
    for r in rows:
        cells.setdefault(r.measured.planned.cell.name, []).append(r.measured.heard[name])
    per_cell = [sum(h.cpu_s for h in hs) / sum(h.frames for h in hs) * 1e6 for hs in cells.values()]
    return round(statistics.median(per_cell), 1)


def detector_summary(rows: list[Row], name: str) -> Doc:
    heard = [r.measured.heard[name] for r in rows]
    ends = [h.end_ms for h in heard if h.end_ms is not None]
    gaps = sum(r.measured.gaps for r in rows)
    cpu = cpu_us_per_frame(rows, name)
    doc: Doc = {
        "n": len(heard),
        "end_ms": median_p90(ends) if ends else None,
        "missed_ends": _share(len(heard) - len(ends), len(heard)),
        "false_pauses_per_100": round(100 * sum(h.false_pauses for h in heard) / len(heard), 1),
        "missed_corpus_pauses": _share(sum(h.missed_pauses for h in heard), gaps)
        if gaps else None,
        "corpus_pauses": gaps,
        "cpu_us_per_frame": cpu,
        "eight_satellites_pct_core": round(SATELLITES * FRAMES_PER_S * cpu / 1e6 * 100, 2),
    }  # fmt: skip
    judged = [h.too_noisy for h in heard if h.too_noisy is not None]
    if judged:
        doc["too_noisy"] = _share(sum(judged), len(judged))
    return doc


def ha_summary(rows: list[Row]) -> Doc:
    ends = [r.ha_end_ms for r in rows if r.ha_end_ms is not None]
    after = [e for e in ends if e >= 0]
    return {
        "n": len(rows),
        "end_ms": median_p90(after) if after else None,
        "cut_short": _share(len(ends) - len(after), len(rows)),
        "never_ended": _share(len(rows) - len(ends), len(rows)),
    }


def _end(name: str) -> Callable[[Row], float | None]:
    return lambda r: r.measured.heard[name].end_ms


def _ha_end(r: Row) -> float | None:
    """HA's segmenter's end where it ended after the last word."""
    return r.ha_end_ms if r.ha_end_ms is not None and r.ha_end_ms >= 0 else None


def paired(
    rows: list[Row], ours: Callable[[Row], float | None], theirs: Callable[[Row], float | None]
) -> tuple[list[float], list[float]]:
    """Both ends over the scenes where both ended."""
    pairs = [(a, b) for r in rows if (a := ours(r)) is not None and (b := theirs(r)) is not None]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _ratio(ours: list[float], theirs: list[float]) -> Doc | None:
    if not ours or statistics.median(theirs) <= 0:
        return None
    return {"ratio": round(statistics.median(ours) / statistics.median(theirs), 3), "n": len(ours)}


def ratios(rows: list[Row], names: tuple[str, ...]) -> Doc:
    """Each detector's median end over microVAD's, and over HA's segmenter's, on the scenes
    where both ended (after the last word)."""
    return {
        name: {
            "vs_microvad": _ratio(*paired(rows, _end(name), _end(MICROVAD)))
            if MICROVAD in names else None,
            "vs_ha_segmenter": _ratio(*paired(rows, _end(name), _ha_end)),
        }
        for name in names
    }  # fmt: skip


def group_summary(rows: list[Row], names: tuple[str, ...]) -> Doc:
    detectors = {name: detector_summary(rows, name) for name in names}
    return {"n": len(rows), **detectors, "ha_segmenter": ha_summary(rows),
            "ratios": ratios(rows, names)}  # fmt: skip


def _worse(where: str, other: str, metric: str, ours: float, theirs: float, **more: int) -> Doc:
    return {"where": where, "than": other, "metric": metric, "gateway": ours, "other": theirs,
            "by": round(ours - theirs, 3), **more}  # fmt: skip


def gateway_worse(
    groups: dict[str, list[Row]], summaries: dict[str, Doc], names: tuple[str, ...]
) -> list[Doc]:
    """Every group and detector the gateway's detector does worse than, by WORSE_BY or more: its
    ends on the scenes where both saw one (`scenes`), the shares and rates on all."""
    out = []
    for where, rows in groups.items():
        for other in (n for n in names if n != GATEWAY):
            ours, theirs = paired(rows, _end(GATEWAY), _end(other))
            if ours:
                for stat, q in (("median", 0.5), ("p90", 0.9)):
                    a, b = round(pct(ours, q), 1), round(pct(theirs, q), 1)
                    if a - b >= WORSE_BY[f"end_ms.{stat}"]:
                        out.append(_worse(where, other, f"end_ms.{stat}", a, b, scenes=len(ours)))
            for metric in ("missed_ends", "false_pauses_per_100", "missed_corpus_pauses"):
                a_, b_ = summaries[where][GATEWAY][metric], summaries[where][other][metric]
                if a_ is not None and b_ is not None and a_ - b_ >= WORSE_BY[metric]:
                    out.append(_worse(where, other, metric, a_, b_))
    return out


def report(rows: list[Row], names: tuple[str, ...]) -> Doc:
    """The figures of every detector (in `names`' order) and HA's segmenter, overall and per
    family of groups, the ratios, and where the gateway's detector does worse."""
    doc: Doc = {"overall": group_summary(rows, names)}
    flat_rows, flat = {"overall": rows}, {"overall": doc["overall"]}
    for family, key in FAMILIES.items():
        groups: dict[str, list[Row]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
        doc[family] = {k: group_summary(g, names) for k, g in groups.items()}
        flat_rows |= {f"{family}/{k}": g for k, g in groups.items()}
        flat |= {f"{family}/{k}": v for k, v in doc[family].items()}
    if GATEWAY in names:
        doc["gateway_worse"] = gateway_worse(flat_rows, flat, names)
    return doc
