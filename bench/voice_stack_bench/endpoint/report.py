"""The cut-off corpus bench's arithmetic (bench/endpoint_bench.py): per-class medians, cut-short
shares and the issue's goals from the per-utterance results, kept out of the bench script so a
test can check it on the bench's own JSON.

A turn that failed (the gateway's error, a timeout, a closed connection) has a row holding only
its `error`: it is left out of every figure, counted in its class's `errors` and listed in the
report's `errors`, so the goals are computed on the turns that completed and say how many did not.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..stats import median_p90
from .corpus import Spoken

COMPLETE, CANNOT_END, LOOKS_COMPLETE = "complete", "pause_cannot_end", "pause_looks_complete"
HA_DEFAULT, MEASURED_HOLD = "ha_0.7", "gateway_off"
RATIO_GOAL = 0.6
type Row = dict[str, Any]


def failed(row: Row) -> bool:
    return "error" in row


def class_summary(rows: list[Row], pauses: list[int]) -> Row:
    """One setting on one class: when the turns ended, how many were cut short, the words;
    the figures are of the turns that completed (`n`), `errors` counts the others."""
    errors = sum(failed(r) for r in rows)
    pauses = [p for p, r in zip(pauses, rows, strict=True) if not failed(r)]
    rows = [r for r in rows if not failed(r)]
    if not rows:
        return {"n": 0, "errors": errors}
    cut = [r["cut_short"] for r in rows]
    summary: Row = {
        "n": len(rows),
        "errors": errors,
        "ended_ms": median_p90([r["ended_ms"] for r in rows]),
        "transcript_ms": median_p90([r["transcript_ms"] for r in rows]),
        "cut_short": sum(cut),
        "cut_short_share": round(sum(cut) / len(rows), 3),
        "exact_share": round(sum(r["exact"] for r in rows) / len(rows), 3),
        "wer_mean": round(statistics.mean(r["wer"] for r in rows), 3),
        "ended_by": {
            by: sum(r["by"] == by for r in rows) for by in sorted({r["by"] for r in rows})
        },
    }
    if any(pauses):
        summary["after_pause_ms"] = median_p90([r["after_pause_ms"] for r in rows])
        summary["cut_short_by_pause_ms"] = {
            str(p): f"{sum(c for c, q in zip(cut, pauses, strict=True) if q == p)}"
            f"/{pauses.count(p)}"
            for p in sorted(set(pauses))
        }
    return summary


def _median(by_class: dict[str, Row], setting: str, key: str) -> float | None:
    row = by_class.get(setting, {}).get(COMPLETE)
    return None if row is None or not row["n"] else float(row[key]["median"])


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(value / base, 3)


def complete_goal(by_class: dict[str, Row], gateways: list[str]) -> Row:
    """Complete requests: the gateway's median last word -> transcript over HA's default hold's
    (that hold's end plus the STT after it; also its end alone, and the same hold measured
    through the gateway with early transcription, whose transcript waits for the hold)."""
    bases = {
        "vs_ha_0.7_then_stt": _median(by_class, HA_DEFAULT, "transcript_ms"),
        "vs_ha_0.7_end_alone": _median(by_class, HA_DEFAULT, "ended_ms"),
        "vs_gateway_off_measured": _median(by_class, MEASURED_HOLD, "transcript_ms"),
    }
    out: Row = {"goal": f"<= {RATIO_GOAL} vs_ha_0.7_then_stt", "base_median_ms": bases}
    for name in gateways:
        ours = _median(by_class, name, "transcript_ms")
        ratios = {k: _ratio(ours, base) for k, base in bases.items()}
        main = ratios["vs_ha_0.7_then_stt"]
        out[name] = {"median_ms": ours, **ratios, "met": main is not None and main <= RATIO_GOAL}
    return out


def cut_goal(
    by_class: dict[str, Row], gateways: list[str], own_vad: str, rows: dict[str, list[Row]]
) -> Row:
    """Pauses where a request cannot end: no more cut short than HA's default hold (with it as
    the fallback); none at all when the gateway owns the end of speech. `rows`: each setting's
    rows of that class, in the same utterance order; where a setting's turn failed, HA's cut on
    that utterance is left out of its comparison too (`vs_ha_0.7_on_the_same`)."""
    cuts = {n: row[CANNOT_END].get("cut_short", 0) for n, row in by_class.items()
            if CANNOT_END in row}  # fmt: skip
    base = rows.get(HA_DEFAULT)
    out: Row = {"cut_short": cuts, "goal": f"<= {HA_DEFAULT}'s; {own_vad}: 0"}
    errors = {n: row[CANNOT_END]["errors"] for n, row in by_class.items()
              if CANNOT_END in row and row[CANNOT_END]["errors"]}  # fmt: skip
    if errors:
        out["errors"] = errors
    for name in gateways:
        if name not in cuts or base is None:
            continue
        pairs = [(o, h) for o, h in zip(rows[name], base, strict=True)
                 if not failed(o) and not failed(h)]  # fmt: skip
        mine = sum(o["cut_short"] for o, _h in pairs)
        ha = sum(h["cut_short"] for _o, h in pairs)
        if name in errors or HA_DEFAULT in errors:
            out[f"{name}_on_the_same"] = {"n": len(pairs), "cut_short": mine, HA_DEFAULT: ha}
        out[f"{name}_met"] = mine == 0 if name == own_vad else mine <= ha
    return out


def report(
    spoken: list[Spoken],
    results: dict[str, dict[str, Row]],
    settings: dict[str, str],
    letters: dict[str, str],
    lead_ms: int,
) -> Row:
    """The bench's JSON body: settings, per class, goals, and every utterance."""
    by_class: dict[str, Row] = {}
    cannot_end: dict[str, list[Row]] = {}
    for name in settings:
        by_class[name] = {}
        for kind in letters:
            mine = [sp for sp in spoken if sp.entry.kind == kind]
            if mine:
                rows = [results[sp.entry.id][name] for sp in mine]
                by_class[name][kind] = class_summary(rows, [sp.entry.pause_ms for sp in mine])
                if kind == CANNOT_END:
                    cannot_end[name] = rows
    gateways = [n for n in settings if n.startswith("gateway_") and n != MEASURED_HOLD]
    looks = {n: r[LOOKS_COMPLETE]["cut_short_share"] for n, r in by_class.items()
             if r.get(LOOKS_COMPLETE, {}).get("n")}  # fmt: skip
    errors = [{"id": sp.entry.id, "setting": name, "error": row["error"]}
              for sp in spoken for name, row in results[sp.entry.id].items()
              if failed(row)]  # fmt: skip
    return {
        "settings": settings,
        "classes": letters,
        "by_class": by_class,
        "errors": errors,
        "goals": {
            "errors": len(errors),
            "complete_last_word_to_transcript_ratio": complete_goal(by_class, gateways),
            "cannot_end_cut_short": cut_goal(by_class, gateways, "gateway_own_vad", cannot_end),
            "looks_complete_cut_short_share": looks,
        },
        "utterances": [
            {
                "id": sp.entry.id,
                "class": sp.entry.kind,
                "letter": letters[sp.entry.kind],
                "parts": list(sp.entry.parts),
                "pause_ms": sp.entry.pause_ms,
                "last_word_at_ms": round(lead_ms + sp.spans_ms[-1][1], 1),
                "piper_silence_trimmed_ms": [list(t) for t in sp.trimmed_ms],
                "results": results[sp.entry.id],
            }
            for sp in spoken
        ],
    }
