"""The gateway attacked from the LAN: a Wyoming fuzzer against a real voice-stack-gateway process
on loopback, while a well-behaved Home Assistant client is timed beside it. Prints one JSON
document.

    PYTHONPATH=dev:bench .cache/venv/gw/bin/python bench/wyoming_fuzz.py [--seed 1] > fuzz.json

Backend: the paced fake speech server (voice_stack_dev.fakes.speech: TTS first byte after 150 ms,
STT 100 ms after the upload). The witness first runs alone for --idle-seconds (the idle figures),
then during the attack: every case of voice_stack_bench.fuzz.cases, 8 at a time, each bad client
from 127.0.0.2 (the witness is 127.0.0.1, so the per-host limit meets the attacker). Reported:
cases run, the error codes answered, connections the gateway closed and any it left hanging, the
witness's STT and TTS latency idle and under attack (median, p90, ratio), the worst ping round
trip (the longest the event loop was held), the gateway's RSS, and the log lines written per bad
client. Then wyoming-openai 0.8.0, the anchor, meets the same Wyoming cases and the same witness
(`anchor` in the JSON; `anchor_over_ours` its figures as multiples of ours; --no-anchor skips it;
bench/setup-anchors installs it on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from voice_stack_bench.fuzz.attack import Target
from voice_stack_bench.fuzz.cases import Case, all_cases
from voice_stack_bench.fuzz.run import Gateway, fuzz
from voice_stack_dev.fakes.speech import start_fake_speech
from voice_stack_dev.gateway import start_gateway, start_wyoming_openai
from voice_stack_gateway.connection import AHEAD_BYTES
from voice_stack_gateway.protocol import MAX_DATA, MAX_HEADER, MAX_PAYLOAD

ATTACKER = "127.0.0.2"


def per_connection_bound_mb(stt_max_seconds: float = 60.0) -> float:
    """What one connection may make the gateway hold, as sent: the read-ahead, one more event,
    and an utterance's audio at 16 kHz (its parsed JSON data takes more, see the RSS)."""
    event = MAX_HEADER + MAX_DATA + MAX_PAYLOAD
    return round((AHEAD_BYTES + event + stt_max_seconds * 16000 * 2) / 1024 / 1024, 1)


def run(
    seed: int,
    idle_timeout: float,
    idle_seconds: float,
    orders: int,
    log: Path | None = None,
    *,
    anchor: bool = False,
) -> dict[str, Any]:
    """The gateway attacked (and wyoming-openai 0.8.0 by the same cases after it, if `anchor`)."""
    cases = all_cases(seed, idle_timeout, orders)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        speech = start_fake_speech(Path(tmp) / "speech.log")
        try:
            ours = _ours(speech.url, cases, idle_timeout, idle_seconds, log or Path(tmp) / "gw.log")
            theirs = _anchor(speech.url, cases, idle_seconds, Path(tmp)) if anchor else None
        finally:
            speech.stop()
    settings = {
        "seed": seed, "idle_timeout_s": idle_timeout, "idle_seconds": idle_seconds,
        "max_connections": 64, "max_connections_per_host": 32,
        "per_connection_bound_mb": per_connection_bound_mb(),
    }  # fmt: skip
    report: dict[str, Any] = {"settings": settings, **ours}
    if theirs is not None:
        report["anchor"] = theirs
        report["anchor_over_ours"] = _over(theirs, ours)
    return report


def _ours(
    speech_url: str, cases: list[Case], idle_timeout: float, idle_seconds: float, log: Path
) -> dict[str, Any]:
    extra = ["--idle-timeout", str(idle_timeout), "--log-level", "INFO"]
    gateway = start_gateway(speech_url, log, extra_args=extra)
    try:
        assert gateway.proc is not None
        port = int(gateway.argv[gateway.argv.index("--uri") + 1].rsplit(":", 1)[1])
        target = Target(port, gateway.port, ATTACKER)
        report = asyncio.run(fuzz(Gateway(target, gateway.proc.pid, log), cases, idle_seconds))
        report["alive"] = gateway.running
    finally:
        gateway.stop()
    report["tracebacks_in_log"] = log.read_text(errors="replace").count("Traceback")
    return report


def _anchor(speech_url: str, cases: list[Case], idle_seconds: float, tmp: Path) -> dict[str, Any]:
    """wyoming-openai 0.8.0 (its log at WARNING, as the bench runs it) on the Wyoming cases."""
    log = tmp / "anchor.log"
    anchor = start_wyoming_openai(f"{speech_url}/v1", f"{speech_url}/v1", log)
    try:
        assert anchor.proc is not None
        target = Target(anchor.port, 0, ATTACKER)
        wyoming_only = [case for case in cases if not case.http]
        report = asyncio.run(
            fuzz(Gateway(target, anchor.proc.pid, log), wyoming_only, idle_seconds)
        )
        report["alive"] = anchor.running
    finally:
        anchor.stop()
    report["tracebacks_in_log"] = log.read_text(errors="replace").count("Traceback")
    report.pop("per_case")
    return report


def _over(theirs: dict[str, Any], ours: dict[str, Any]) -> dict[str, float | None]:
    """The anchor's figure as a multiple of ours (under attack): above 1, it suffered more."""

    def median(report: dict[str, Any], key: str) -> float | None:
        figure = report["witness"]["attack"][key]
        return None if figure is None else float(figure["median"])

    out: dict[str, float | None] = {}
    for key in ("stt_ms", "tts_first_audio_ms"):
        a, b = median(theirs, key), median(ours, key)
        out[key] = None if a is None or b is None else round(a / b, 2)
    a, b = theirs["worst_event_loop_stall_ms"], ours["worst_event_loop_stall_ms"]
    out["worst_event_loop_stall_ms"] = None if a is None or b is None else round(a / b, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--idle-timeout", type=float, default=2.0, help="the gateway's")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="the witness alone")
    parser.add_argument("--orders", type=int, default=24, help="random event orders")
    parser.add_argument("--log", type=Path, help="keep the gateway's log here")
    parser.add_argument(
        "--no-anchor", action="store_true", help="do not attack wyoming-openai 0.8.0 after"
    )
    args = parser.parse_args()
    report = run(
        args.seed, args.idle_timeout, args.idle_seconds, args.orders, args.log,
        anchor=not args.no_anchor,
    )  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
