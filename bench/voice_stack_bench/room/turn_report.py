"""The room bench's arithmetic (bench/room_bench.py): every setting's figures per class, overall
and by SNR, noise, room and voice, and issue 34's goals, from the per-scene rows. Kept apart from
the bench so a test can check it on the bench's own JSON.

A row holds a turn's score (voice_stack_bench.endpoint.turns.score), for the gateways also its
early requests and whether the gateway judged the room too noisy; a failed turn's row holds only
its `error` and is left out of every figure (each group says how many failed).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

from voice_stack_bench.endpoint.report import class_summary, failed

COMPLETE, CANNOT_END, LOOKS_COMPLETE = "complete", "pause_cannot_end", "pause_looks_complete"
HA_DEFAULT = "ha_0.7"  # HA's default hold, enhancements off (its default audio settings)
OWN_VAD = "gateway_own_vad"
ANCHOR = "wyoming_openai"
RATIO_GOAL = {"fast": 0.6, "real": 0.75, "server": 0.6}  # server: a GPU box's, as fast models
LOOKS_MARGIN = 0.10  # the default may cut this much more than HA's default hold's share
OWN_VAD_MARGIN_MS = 300
MAX_EARLY = 3
FACTORS = ("snr", "noise", "room", "voice")
type Row = dict[str, Any]
type Results = dict[str, dict[str, Row]]  # scene -> setting -> row


def _ok(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if not failed(r)]


def summary(rows: list[Row], pauses: list[int]) -> Row:
    """One setting on one class of scenes: the cut-off bench's figures, and for a gateway its
    early requests per turn and the turns it found too noisy."""
    out = class_summary(rows, pauses)
    done = _ok(rows)
    if done and "early_requests" in done[0]:
        early = [r["early_requests"] for r in done]
        out["early_requests"] = {"mean": round(statistics.mean(early), 2), "max": max(early)}
        out["too_noisy"] = sum(r["too_noisy"] for r in done)
    return out


def _by_class(facts: dict[str, Row], results: Results, scenes: list[str], setting: str) -> Row:
    out: Row = {}
    for kind in (COMPLETE, CANNOT_END, LOOKS_COMPLETE):
        mine = [s for s in scenes if facts[s]["class"] == kind and setting in results[s]]
        if mine:
            pauses = [facts[s]["pause_ms"] for s in mine]
            out[kind] = summary([results[s][setting] for s in mine], pauses)
    return out


def figures(facts: dict[str, Row], results: Results, settings: list[str]) -> Row:
    """Per setting and class: overall, then by each factor's values."""
    every = list(facts)
    out: Row = {"overall": {n: _by_class(facts, results, every, n) for n in settings}}
    for factor in FACTORS:
        values = sorted({str(f[factor]) for f in facts.values()}, key=_in_order)
        out[f"by_{factor}"] = {
            v: {n: _by_class(facts, results, [s for s in every if str(facts[s][factor]) == v], n)
                for n in settings}
            for v in values
        }  # fmt: skip
    return out


def _pairs(results: Results, scenes: list[str], a: str, b: str) -> list[tuple[Row, Row]]:
    """Rows of two settings on the same scenes, where both completed."""
    return [(results[s][a], results[s][b]) for s in scenes
            if a in results[s] and b in results[s]
            and not failed(results[s][a]) and not failed(results[s][b])]  # fmt: skip


def _in_order(value: str) -> tuple[bool, float, str]:
    """A factor's values as a reader scans them: numbers (SNRs) by size, then words ("quiet")."""
    try:
        return False, float(value), ""
    except ValueError:
        return True, 0.0, value


def _cells(facts: dict[str, Row], kind: str) -> list[tuple[tuple[str, str], list[str]]]:
    """A class's scenes by (SNR, room), in SNR order, then by room."""
    out: dict[tuple[str, str], list[str]] = {}
    for s, f in facts.items():
        if f["class"] == kind:
            out.setdefault((str(f["snr"]), f["room"]), []).append(s)
    return sorted(out.items(), key=lambda cell: (_in_order(cell[0][0]), cell[0][1]))


def _snr_at_least(snr: str, db: int) -> bool:
    return snr == "quiet" or int(snr) >= db


def complete_goal(facts: dict[str, Row], results: Results, gateway: str, mode: str) -> Row:
    """Complete requests: in every room, at 10 dB and above (and without noise), the median
    last word -> transcript <= the ratio goal x HA's default hold's (its end, then the STT);
    at 5 dB never later than it."""
    checks = []
    for (snr, room), scenes in _cells(facts, COMPLETE):
        pairs = _pairs(results, scenes, gateway, HA_DEFAULT)
        if not pairs:
            continue
        ours = statistics.median(o["transcript_ms"] for o, _h in pairs)
        base = statistics.median(h["transcript_ms"] for _o, h in pairs)
        limit = RATIO_GOAL[mode] if _snr_at_least(snr, 10) else 1.0
        ratio = round(ours / base, 3) if base > 0 else None
        checks.append({"snr": snr, "room": room, "n": len(pairs), "median_ms": round(ours),
                       f"{HA_DEFAULT}_ms": round(base), "ratio": ratio, "limit": limit,
                       "met": ratio is not None and ratio <= limit,
                       **_stock(results, scenes, gateway)})  # fmt: skip
    return _verdict(checks, "ratio")


def _stock(results: Results, scenes: list[str], gateway: str) -> Row:
    """Beside the goal, the stock pairing on the same cell: HA's default hold through
    wyoming-openai, whose Wyoming hop the goal's base (the STT asked directly) leaves out."""
    pairs = _pairs(results, scenes, gateway, ANCHOR)
    if not pairs:
        return {}
    ours = statistics.median(o["transcript_ms"] for o, _w in pairs)
    stock = statistics.median(w["transcript_ms"] for _o, w in pairs)
    return {
        f"{ANCHOR}_ms": round(stock),
        "ratio_to_stock": round(ours / stock, 3) if stock else None,
    }


def cannot_end_goal(facts: dict[str, Row], results: Results, gateway: str) -> Row:
    """Pauses where a request cannot end: no more cut short than HA's default hold on the same
    audio, at every SNR and room (with its own VAD: 0). `over`: the cuts beyond that limit, so
    the worst cell is the one furthest over it, not the one with the most cuts."""
    checks = []
    for (snr, room), scenes in _cells(facts, CANNOT_END):
        pairs = _pairs(results, scenes, gateway, HA_DEFAULT)
        ours = sum(o["cut_short"] for o, _h in pairs)
        ha = sum(h["cut_short"] for _o, h in pairs)
        limit = 0 if gateway == OWN_VAD else ha
        checks.append({"snr": snr, "room": room, "n": len(pairs), "cut_short": ours,
                       HA_DEFAULT: ha, "over": ours - limit, "met": ours <= limit})  # fmt: skip
    return _verdict(checks, "over")


def looks_complete(facts: dict[str, Row], results: Results, settings: list[str]) -> Row:
    """Pauses where a request looks complete: each setting's cut-short share, overall and by
    SNR, beside HA's holds; the goal is the default's, at most HA's default's + 10 points."""
    scenes = [s for s, f in facts.items() if f["class"] == LOOKS_COMPLETE]

    def share(setting: str, pick: Callable[[str], bool]) -> float | None:
        rows = _ok(results[s][setting] for s in scenes if pick(s) and setting in results[s])
        return round(sum(r["cut_short"] for r in rows) / len(rows), 3) if rows else None

    def at(snr: str) -> Callable[[str], bool]:
        return lambda s: str(facts[s]["snr"]) == snr

    snrs = sorted({str(facts[s]["snr"]) for s in scenes}, key=_in_order)
    return {
        n: {"overall": share(n, lambda _s: True), **{snr: share(n, at(snr)) for snr in snrs}}
        for n in settings
    }


def looks_complete_goal(shares: Row, gateways: list[str]) -> Row:
    """Each gateway's looks-complete share against HA's default hold's + LOOKS_MARGIN."""
    ha = shares[HA_DEFAULT]["overall"]
    out: Row = {}
    for g in gateways:
        ours = shares[g]["overall"]
        if ours is not None and ha is not None:
            limit = round(ha + LOOKS_MARGIN, 3)
            out[g] = {"share": ours, HA_DEFAULT: ha, "limit": limit, "met": ours <= limit}
    return out


def own_vad_goal(facts: dict[str, Row], results: Results, cap_ms: float) -> Row:
    """--stt-own-vad: never the cap on audio HA's default hold ends, and its transcript never
    later than that hold's then its STT + 0.3 s where it ends the turn after it (transcript
    against transcript: with a CPU whisper, its time on the audio is on both sides). Where the
    hold cut the request short, the own VAD waiting for the last word is no lateness (that cut
    is the cannot-end goal's)."""
    capped, late = [], []
    for s, f in facts.items():
        pair = _pairs(results, [s], OWN_VAD, HA_DEFAULT)
        if not pair:
            continue
        own, ha = pair[0]
        if ha["by"] != "ha_hold" or _at_cap(ha, f, cap_ms):
            continue  # HA's hold did not end this audio either (its timeout is the cap)
        if _at_cap(own, f, cap_ms):
            capped.append(s)
            continue
        ours, theirs = own["transcript_ms"], ha["transcript_ms"]
        if not ha["cut_short"] and ours > theirs + OWN_VAD_MARGIN_MS:
            late.append({"scene": s, "own_ms": ours, HA_DEFAULT: theirs})
    return {"capped_where_ha_ended": capped, "later_than_ha_plus_300ms": late,
            "met": not capped and not late}  # fmt: skip


def _at_cap(row: Row, facts: Row, cap_ms: float) -> bool:
    return bool(row["ended_ms"] + facts["last_word_at_ms"] >= cap_ms - 40)


def early_goal(results: Results, gateways: list[str]) -> Row:
    worst = {g: max((r.get("early_requests", 0) for rows in results.values()
                     if g in rows for r in _ok([rows[g]])), default=0)
             for g in gateways}  # fmt: skip
    return {"max_per_turn": worst, "limit": MAX_EARLY,
            "met": all(v <= MAX_EARLY for v in worst.values())}  # fmt: skip


def wer_goal(results: Results, gateways: list[str]) -> Row:
    """The transcripts' mean word error rate against the anchor's on the same scenes; beside
    it, on the scenes neither cut short: the transcript itself, apart from the end of turn (a
    cut request's transcript lacks its end, which the cut goals count)."""
    out: Row = {}
    for g in gateways:
        pairs = _pairs(results, list(results), g, ANCHOR)
        if pairs:
            ours, anchor = _mean_wers(pairs)
            uncut = [(o, a) for o, a in pairs if not o["cut_short"] and not a["cut_short"]]
            out[g] = {"n": len(pairs), "wer": ours, ANCHOR: anchor, "met": ours <= anchor}
            if uncut:
                wer, anchor_wer = _mean_wers(uncut)
                out[g]["uncut"] = {"n": len(uncut), "wer": wer, ANCHOR: anchor_wer}
    return out


def _mean_wers(pairs: list[tuple[Row, Row]]) -> tuple[float, float]:
    return (round(statistics.mean(o["wer"] for o, _a in pairs), 3),
            round(statistics.mean(a["wer"] for _o, a in pairs), 3))  # fmt: skip


def _verdict(checks: list[Row], key: str) -> Row:
    """Met or not, the failing cells, and the worst: the furthest over (or nearest to) its
    cell's limit where the cells' limits differ."""
    failing = [c for c in checks if not c["met"]]
    worst = max(checks, key=lambda c: _against_limit(c, key)) if checks else None
    return {"met": not failing, "cells": len(checks), "failing": failing, "worst": worst}


def _against_limit(check: Row, key: str) -> float:
    value = float(check[key] or 0)
    return value / check["limit"] if check.get("limit") else value


def goals(facts: dict[str, Row], results: Results, settings: list[str], mode: str,
          cap_ms: float) -> Row:  # fmt: skip
    gateways = [n for n in settings if n.startswith("gateway_")]
    shares = looks_complete(facts, results, settings)
    return {
        "complete_last_word_to_transcript": {g: complete_goal(facts, results, g, mode)
                                             for g in gateways},
        "cannot_end_cut_short": {g: cannot_end_goal(facts, results, g) for g in gateways},
        "looks_complete_cut_short_share": shares,
        "looks_complete_limit": f"{HA_DEFAULT}'s share + {LOOKS_MARGIN:.2f}",
        "looks_complete_goal": looks_complete_goal(shares, gateways)
        if HA_DEFAULT in shares
        else None,
        "own_vad": own_vad_goal(facts, results, cap_ms) if OWN_VAD in settings else None,
        "early_requests": early_goal(results, gateways),
        "word_error_rate": wer_goal(results, gateways),
    }  # fmt: skip
