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
client. wyoming-openai 0.8.0 is not attacked here: it has no idle limit or connection limit to
measure (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from voice_stack_bench.fuzz.attack import Target
from voice_stack_bench.fuzz.cases import all_cases
from voice_stack_bench.fuzz.run import Gateway, fuzz
from voice_stack_dev.fakes.speech import start_fake_speech
from voice_stack_dev.gateway import start_gateway
from voice_stack_gateway.connection import AHEAD_BYTES
from voice_stack_gateway.protocol import MAX_DATA, MAX_HEADER, MAX_PAYLOAD

ATTACKER = "127.0.0.2"


def per_connection_bound_mb(stt_max_seconds: float = 60.0) -> float:
    """What one connection may make the gateway hold, as sent: the read-ahead, one more event,
    and an utterance's audio at 16 kHz (its parsed JSON data takes more, see the RSS)."""
    event = MAX_HEADER + MAX_DATA + MAX_PAYLOAD
    return round((AHEAD_BYTES + event + stt_max_seconds * 16000 * 2) / 1024 / 1024, 1)


def run(
    seed: int, idle_timeout: float, idle_seconds: float, orders: int, log: Path | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        speech = start_fake_speech(Path(tmp) / "speech.log")
        log = log or Path(tmp) / "gateway.log"
        extra = ["--idle-timeout", str(idle_timeout), "--log-level", "INFO"]
        gateway = start_gateway(speech.url, log, extra_args=extra)
        try:
            assert gateway.proc is not None
            wyoming_port = int(gateway.argv[gateway.argv.index("--uri") + 1].rsplit(":", 1)[1])
            target = Target(wyoming_port, gateway.port, ATTACKER)
            cases = all_cases(seed, idle_timeout, orders)
            report = asyncio.run(fuzz(Gateway(target, gateway.proc.pid, log), cases, idle_seconds))
            report["gateway_alive"] = gateway.running
            report["tracebacks_in_log"] = log.read_text(errors="replace").count("Traceback")
        finally:
            gateway.stop()
            speech.stop()
    return {
        "settings": {
            "seed": seed,
            "idle_timeout_s": idle_timeout,
            "idle_seconds": idle_seconds,
            "max_connections": 64,
            "max_connections_per_host": 32,
            "per_connection_bound_mb": per_connection_bound_mb(),
        },
        **report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--idle-timeout", type=float, default=2.0, help="the gateway's")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="the witness alone")
    parser.add_argument("--orders", type=int, default=24, help="random event orders")
    parser.add_argument("--log", type=Path, help="keep the gateway's log here")
    args = parser.parse_args()
    report = run(args.seed, args.idle_timeout, args.idle_seconds, args.orders, args.log)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
