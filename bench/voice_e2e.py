"""End of speech to first reply audio: Voice Stack vs the stock pairing, through a real Home
Assistant 2026.11, side by side in one run on the same servers.

    bench/setup-anchors     # once: wyoming-openai 0.8.0 in .cache/venv/bench-wyoming-openai
    PYTHONPATH=dev .cache/venv/ha11/bin/python bench/voice_e2e.py [--quick] > result.json
    ... bench/voice_e2e.py --asr fast --asr-delay-ms 80   # one mode, another modelled delay
    ... bench/voice_e2e.py --room living/hvac@15   # the headline: in a room, under noise

Servers (127.0.0.1 only, all stopped on exit or Ctrl-C): the demo's llama-server (SmolLM2-135M,
-np 4) behind the auth proxy, the speech server (piper + faster-whisper tiny.en) behind the
Voice Stack gateway, wyoming-openai 0.8.0 on the same speech server, and a real `hass`.
Stacks: Voice Stack (our agent on its reserved slot, the gateway) and stock (HA core's
llama_cpp agent straight on llama-server, wyoming-openai), each in its own Assist pipeline;
`--stock-via-proxy` gives stock the proxy's general key instead.

Phase 1, once per ASR mode (`--asr`, both by default; the one speech server serves both stacks
in the same mode): `real` is the CPU whisper; `fast` is modelled, a GPU-class ASR: whisper's own
transcript of the same speech (transcribed beforehand) after a fixed delay (`--asr-delay-ms`).
Each question as a new conversation, then its follow-up in the same conversation, on
both stacks in turn (who goes first alternates); HA's TTS cache is emptied before every
request (it would answer a reply spoken before); before every request three browser-like
clients chat through the proxy with the general key (off the reserved slots). Every request is
streamed in real time (20 ms chunks), then silence: `--hold ha` (the default) streams it as a
satellite does, until HA's own VAD ends the utterance or the transcript is in; `--hold fixed`
sends 0.7 s of it and ends the audio (the bench's model before 2026-12-02). Then the floor of
every request, straight against the idle servers. Phase 2 (real ASR): two satellites speaking at
once, on Voice Stack with one slot, then with a two-slot pool (the proxy reserving 0,1), and stock.

`--room ROOM/NOISE@SNR` (issue 34's headline figure: `--room living/hvac@15`, a medium room,
RT60 0.4 s, the talker 2.5 m away, HVAC noise 15 dB under the speech): every request is heard in
one of the room bench's rooms under a noise (bench/voice_stack_bench/room; any room and noise it
knows, or a room alone), the same audio on both stacks; the lead-in and the "silence" after the
speech are the room's noise and echo, and the end of speech is still the dry speech's end. Fast
mode is primed with each request's room audio up to its first sound + 20 ms, its end and its end
+ 300 ms, and the speech server matches uploads by prefix (the longest primed audio an upload
begins with). The JSON's setup states the room (size, RT60 asked and measured, the talker's
distance), the noise, the SNR and the speech level.

Progress goes to stderr; one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from voice_stack_bench.e2e.asr import asr_state, match_by_prefix, prime, set_asr_mode
from voice_stack_bench.e2e.modes import ModeRun, run_mode
from voice_stack_bench.e2e.phases import (
    BROWSER_PARAGRAPHS,
    BROWSER_TITLE_WORDS,
    Bench,
    log,
    phase_two,
    utterances,
)
from voice_stack_bench.e2e.probes import LlamaProbe
from voice_stack_bench.e2e.room import HEADLINE, InRoom, parse_heard
from voice_stack_bench.e2e.servers import Servers
from voice_stack_bench.e2e.stacks import PLAN, STOCK_OPTIONS, set_up
from voice_stack_bench.e2e.turns import HOLDS, QUESTIONS
from voice_stack_dev.demo.ha_config import check_environment
from voice_stack_dev.demo.services import DemoError, Role
from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient
from voice_stack_dev.speech_asr import add_mode_arguments

WARM_UP = "What is the capital of Portugal?"
# Two satellites at once: requests whose replies run to the length limit, so that the first
# reply is still streaming when the second transcript arrives (the speech server transcribes
# one utterance at a time).
PAIRS = (
    ("Tell me a short story about a dragon.", "Tell me a short story about a robot."),
    ("Tell me about the history of Rome.", "Tell me about the history of Egypt."),
)


MEMO_COUNTS = ("match", "cached", "hits", "prefix_hits", "misses")
ROOM_AUDIO = (
    "piper speech, trimmed, heard in the room (setup.room): 0.3 s of the room's noise before it,"
    " its echo and the noise after; 20 ms chunks in real time; reply audio read from the TTS URL"
    " as it streams; HA's TTS cache emptied before every request"
)
HOLD_FACTS = {
    "ha": "ha: after the speech, silence in real time until HA's own VAD ends the utterance "
    "(stt-vad-end, HA's default 0.7 s setting) or the transcript is in (stt-end), as a satellite "
    "streams; at most 3 s",
    "fixed": "fixed: 0.7 s of silence after the speech, then the end of the audio (HA's hold "
    "modelled as exactly 0.7 s after the last word)",
}


def setup_facts(servers: Servers, args: argparse.Namespace) -> dict[str, Any]:
    """How each stack was configured, and how much was measured."""
    stock_url = (
        "the auth proxy, general key"
        if args.stock_via_proxy
        else "llama-server itself, its --api-key"
    )
    return {
        "servers": "llama-server b11669 (SmolLM2-135M-Instruct Q4_1, -np 4, -t 1, 4096 per slot);"
        " auth proxy (nginx + njs, compose template); speech server (piper joe, faster-whisper "
        "tiny.en int8, 2 threads); Home Assistant 2026.11.0 (hass); all on 127.0.0.1",
        "voice_stack": "voice_stack agent through the auth proxy with the agent key, slot 0 "
        "reserved (phase 2: pool 0,1, reserved 0,1); voice-stack-gateway (early transcription "
        f"on, 300 ms pause) for STT and TTS; options {PLAN.agent_options()}",
        "stock": f"HA core llama_cpp: base URL http://127.0.0.1:PORT/v1 ({stock_url}), the model"
        " it lists, HA's default prompt, streaming as its flow detected; reconfigured "
        f"{STOCK_OPTIONS}; HA wyoming integration on wyoming-openai 0.8.0 (STT tiny.en, TTS "
        "piper-joe streamed) on the same speech server",
        "pipelines": "one per stack: language en, prefer_local_intents off, no wake word",
        "audio": "piper speech, trimmed; 0.3 s silence before; 20 ms chunks in real time; reply "
        "audio read from the TTS URL as it streams; HA's TTS cache emptied before every request",
        "hold": HOLD_FACTS[args.hold],
        "browsers": "3 clients through the proxy (general key) before every request: a chat "
        f"({BROWSER_PARAGRAPHS}-paragraph document, a new question) and its title request "
        f"({BROWSER_TITLE_WORDS} words)",
        "rounds": args.rounds,
        "questions": args.questions,
        "pairs": args.pairs,
        "asr_modes": list(args.asr),
        "gateway_end_of_turn": "the defaults (STT_EAGERNESS=medium): STT_ENDPOINT_MS 700 ms,"
        " STT_ENDPOINT_WEAK_MS 1000 ms",
        "cpus": os.cpu_count(),
        "logs": str(servers.logs),
    }


async def measure_all(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    check_environment()
    if importlib.util.find_spec("homeassistant.components.llama_cpp") is None:
        raise DemoError("Home Assistant environment", "no llama_cpp integration (HA 2026.11)")
    load_start = os.getloadavg()
    log(f"starting the servers (logs in {servers.logs})")
    await servers.start()
    async with HomeAssistantClient(servers.url(Role.HASS)) as ha:
        log("setting up Home Assistant: onboarding, both stacks' entries and pipelines")
        stacks = await set_up(ha, servers, stock_via_proxy=args.stock_via_proxy)
        probe = LlamaProbe(servers.url(Role.LLAMA), servers.state.llama_key)
        room = InRoom(args.room, HOLDS[args.hold]) if args.room else None
        bench = Bench(ha, servers, stacks, probe, pacing=room.pacing if room else HOLDS[args.hold])
        texts = {WARM_UP, *(t for pair in (*QUESTIONS[: args.questions], *PAIRS) for t in pair)}
        speech = await utterances(servers, texts)
        if room is None:
            log("whisper transcribes every utterance once (fast mode answers with these)")
            await prime(servers.url(Role.SPEECH), [u.as_sent for u in speech.values()])
        else:
            log(f"every utterance in the room {args.room.name}; whisper transcribes each up to its"
                " first words, its end and 300 ms after (fast mode answers by prefix)")  # fmt: skip
            speech = room.utterances(speech)
            await match_by_prefix(servers.url(Role.SPEECH))
            room.primed = await prime(servers.url(Role.SPEECH), room.primes(speech.values()))
        modes = {}
        for mode in args.asr:
            run = ModeRun(mode, args.asr_delay_ms, QUESTIONS[: args.questions], args.rounds,
                          speech[WARM_UP])  # fmt: skip
            modes[mode] = await run_mode(bench, speech, run)
        await set_asr_mode(servers.url(Role.SPEECH), "real", args.asr_delay_ms)
        two = await phase_two(bench, speech, PAIRS, args.pairs) if args.pairs else None
        memo = await asr_state(servers.url(Role.SPEECH))
    setup = setup_facts(servers, args)
    if room is not None:
        setup |= {"room": room.facts(), "audio": ROOM_AUDIO}
    return {
        "setup": setup,
        "asr_modes": modes,
        "goals": {
            **{mode: report["goals"] for mode, report in modes.items()},
            "two_satellites_on_pool": two["goal"] if two else None,
        },
        "two_satellites": two,
        "browsers": bench.browser_figures(),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "asr_memo_at_end": {k: memo.get(k) for k in MEMO_COUNTS},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a minute or two")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the questions")
    parser.add_argument(
        "--questions", type=int, default=len(QUESTIONS), help=f"how many (max {len(QUESTIONS)})"
    )
    parser.add_argument(
        "--pairs", type=int, default=3, help="two-satellite pairs per variant (0: no phase 2)"
    )
    parser.add_argument(
        "--hold",
        choices=sorted(HOLDS),
        default="ha",
        help="how the silence after the speech ends: as a satellite streams, until HA's VAD or the"
        " transcript ends it (ha), or after exactly 0.7 s (fixed)",
    )
    parser.add_argument(
        "--room",
        type=parse_heard,
        default=None,
        metavar="ROOM/NOISE@SNR",
        help=f"hear every request in a room under a noise at an SNR in dB (the headline: {HEADLINE}"
        "; rooms and noises as bench/voice_stack_bench/room names them); default: digital silence",
    )
    add_mode_arguments(parser)
    parser.add_argument(
        "--stock-via-proxy",
        action="store_true",
        help="point stock at the auth proxy with the general key instead of llama-server itself",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.questions, args.pairs = 1, 1, 1
    args.questions = max(1, min(args.questions, len(QUESTIONS)))
    return args


async def _until_stopped(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    """measure_all, cancelled by SIGTERM as asyncio.run cancels it on Ctrl-C: every open
    request and stream unwinds before the servers are stopped."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await measure_all(args, servers)


def main() -> int:
    args = parse_args()
    # Ctrl-C even when started in the background (where SIGINT arrives ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    servers = Servers(Path(tempfile.mkdtemp(prefix="voice-e2e-")))
    started = time.monotonic()
    try:
        report = asyncio.run(_until_stopped(args, servers))
    except DemoError as err:
        print(f"voice_e2e failed: {err.describe()}", file=sys.stderr)
        return 1
    except HomeAssistantApiError as err:
        log_path = servers.stack.log(Role.HASS) if Role.HASS in servers.stack.services else None
        print(f"voice_e2e failed: Home Assistant: {err} (log: {log_path})", file=sys.stderr)
        return 1
    except KeyboardInterrupt, asyncio.CancelledError:
        print("\nvoice_e2e: interrupted, stopping the servers", file=sys.stderr)
        return 130
    finally:
        servers.stop()
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
