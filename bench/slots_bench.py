"""Dedicated-slot benchmark: a Home Assistant-style voice request vs three browser-like clients.

    PYTHONPATH=dev .cache/venv/ha/bin/python bench/slots_bench.py [--rounds 2] [--only SECTION...]

Real llama-server (SmolLM2-135M Q4_1, -np 4, -t 1). Each round, three browser-like clients
(own ~1,500-token prompts, new question each round) speak, then a *new* voice conversation
(~3,100-token HA 2026.11-style prompt: instructions, 64 exposed entities, 11 tools rendered
Hermes-style after the system text) asks something. One warm-up round, then --rounds measured
rounds; medians of the voice request's time to first token (client-side, streaming) and of its
prompt reuse (cache_n / (cache_n + prompt_n)).

Each browser turn is a chat request plus the short title-generation request Open WebUI sends
after it (a prompt with a new prefix): seven distinct prompts per round on four slots, so
llama-server's LRU choice keeps moving clients between slots.

Variants, side by side in one run:
- slots: unpinned (no id_slot, llama-server picks), pinned_only (voice sends id_slot 0, others
  unpinned, direct), pinned_reserved (voice pinned; everything through the real llm-auth nginx
  proxy with LLM_RESERVED_SLOTS=0, so the browsers are routed off slot 0): with the host
  prompt cache on (default --cache-ram) and off (--cache-ram 0).
- unified_kv (--kv-unified, host cache on): unpinned vs pinned only; idle-slot clearing makes
  every pinned request re-process its prompt (the case the integration's repair issue catches).
- layout (voice pinned and reserved, host cache off, browsers idle so only the layout matters):
  the changing time line at the start of the system prompt, at the end of the system text
  before the tools (HA's default when no LLM API gives the time), moved into the user message
  (Voice Stack's cache-stable layout), and no volatile line at all.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from voice_stack_bench.browser_chats import Result, browser_round, stream
from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.nginx import NginxProxy, start_proxy

PROXY_KEY = "bench-proxy-key_Slots01"
VOICE_SLOT = 0
AREAS = ["Kitchen", "Living Room", "Bedroom", "Office", "Hallway", "Garage", "Bathroom", "Garden"]
KINDS = [
    ("light", "Ceiling Light"), ("light", "Lamp"), ("switch", "Coffee Maker"),
    ("cover", "Blinds"), ("climate", "Thermostat"), ("media_player", "Speaker"),
    ("sensor", "Temperature"), ("binary_sensor", "Motion"),
]  # fmt: skip
TOOLS = [
    ("HassTurnOn", "Turns on/opens/presses a device or entity."),
    ("HassTurnOff", "Turns off/closes a device or entity."),
    ("HassCancelAllTimers", "Cancels all timers."),
    ("HassLightSet", "Sets the brightness percentage or color of a light."),
    ("HassClimateSetTemperature", "Sets the target temperature of a climate device."),
    ("HassMediaPause", "Pauses a media player."),
    ("HassMediaUnpause", "Resumes a media player."),
    ("HassMediaNext", "Skips a media player to the next item."),
    ("HassSetVolume", "Sets the volume percentage of a media player."),
    ("GetLiveContext", "Provides real-time information about the CURRENT state of devices."),
    ("HassListAddItem", "Add item to a todo list."),
]
QUESTIONS = [
    "turn on the kitchen light", "is the garage door open", "set the thermostat to 21",
    "pause the speaker", "what is the temperature in the office", "turn off all lights",
]  # fmt: skip


def tool_block() -> str:
    """11 tools with schemas, rendered the way Hermes/Qwen templates do after the system text."""
    lines = []
    for name, desc in TOOLS:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "area": {"type": "string"},
                "floor": {"type": "string"},
                "domain": {"type": "array", "items": {"type": "string"}},
                "device_class": {"type": "array", "items": {"type": "string"}},
            },
        }
        fn = {"name": name, "description": desc, "parameters": schema}
        lines.append(json.dumps({"type": "function", "function": fn}))
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + "\n".join(lines)
        + "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags."
    )


def static_context() -> str:
    """64 exposed entities as HA's state-less YAML overview."""
    rows = []
    for i in range(64):
        domain, kind = KINDS[i % len(KINDS)]
        area = AREAS[(i // len(KINDS)) % len(AREAS)]
        rows.append(
            f"- names: {area} {kind}\n  domain: {domain}\n  areas: {area}\n"
            f"  aliases: {area.lower()} {kind.lower()} {i}"
        )
    return "\n".join(rows)


INSTRUCTIONS = (
    "You are a voice assistant for Home Assistant.\nAnswer questions about the world "
    "truthfully.\nRespond simply and to the point in plain text.\nYou ARE equipped to answer "
    "questions about the current state of the home by retrieving live context with the "
    "GetLiveContext tool.\nStatic Context: An overview of the areas and the devices in this "
    "smart home:\n"
)


def voice_messages(layout: str, now: datetime, question: str) -> list[dict[str, str]]:
    """The voice request; `layout` places the changing time line."""
    time_line = f"Current time is {now:%H:%M:%S}. Today's date is {now:%Y-%m-%d}."
    body = (
        INSTRUCTIONS
        + static_context()
        + "\nWhen a user asks to turn on all devices of a specific type, ask the user to"
        " specify an area."
    )
    if layout == "start":
        system = time_line + "\n" + body + tool_block()
    elif layout == "before_tools":
        system = body + "\n" + time_line + tool_block()
    else:
        system = body + tool_block()
    user = f"{time_line}\n\n{question}" if layout == "late" else question
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass
class Setup:
    """Where each client sends its requests."""

    llama: LlamaServer
    proxy: NginxProxy | None = None
    voice_pinned: bool = True
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def target(self) -> tuple[str, dict[str, str]]:
        if self.proxy is not None:
            return self.proxy.url, self.proxy.headers
        return self.llama.url, self.llama.headers

    def voice_headers(self) -> dict[str, str]:
        """The voice agent holds the proxy's agent key: only it may pin the reserved slot."""
        return self.proxy.agent_headers if self.proxy is not None else self.llama.headers


def run_rounds(
    setup: Setup, rounds: int, layout: str, browsers: bool, clock: list[datetime]
) -> dict[str, Any]:
    """Warm-up round plus measured rounds; medians of the voice request."""
    url, headers = setup.target()
    voice: list[Result] = []
    browser: list[Result] = []
    for n in range(rounds + 1):
        got = browser_round(url, headers, n) if browsers else []
        clock[0] += timedelta(seconds=37)  # a new conversation a little later
        body: dict[str, Any] = {
            "messages": voice_messages(layout, clock[0], QUESTIONS[n % len(QUESTIONS)])
        }
        if setup.voice_pinned:
            body |= {"id_slot": VOICE_SLOT, "cache_prompt": True}
        result = stream(url, setup.voice_headers(), body)
        if n:  # round 0 warms every cache
            voice.append(result)
            if browsers:
                browser.extend(got)
        print(
            f"  round {n}: voice ttft {result.ttft_ms:.0f} ms reuse {result.reuse:.1f}%",
            file=sys.stderr,
        )
    return {
        "voice_ttft_ms": round(statistics.median(r.ttft_ms for r in voice), 1),
        "voice_reuse_pct": round(statistics.median(r.reuse for r in voice), 1),
        "voice_prompt_tokens": voice[0].cache_n + voice[0].prompt_n,
        "browser_ttft_ms": round(statistics.median(r.ttft_ms for r in browser), 1)
        if browser
        else None,
    }


def with_server(extra: list[str], log_dir: Path, fn: Any) -> Any:
    """Run fn(llama) on a fresh server (empty caches), then stop it."""
    llama = start_llama(
        "smollm2", n_parallel=4, ctx_per_slot=4096, extra_args=extra, log_dir=log_dir
    )
    try:
        return fn(llama)
    finally:
        llama.stop()


def slot_variants(
    name: str, extra: list[str], rounds: int, log_dir: Path, variants: tuple[str, ...]
) -> dict[str, Any]:
    """unpinned / pinned_only / pinned_reserved on one server configuration."""
    out: dict[str, Any] = {}
    for variant in variants:
        print(f"{name} / {variant}", file=sys.stderr)

        def run(llama: LlamaServer, variant: str = variant) -> dict[str, Any]:
            proxy = None
            if variant == "pinned_reserved":
                proxy = start_proxy(
                    llama.url,
                    PROXY_KEY,
                    llama.api_key or "",
                    reserved_slots=(VOICE_SLOT,),
                    log_dir=log_dir,
                )
            try:
                setup = Setup(llama, proxy, voice_pinned=variant != "unpinned")
                return run_rounds(setup, rounds, "none", True, [datetime(2026, 11, 30, 8, 0, 0)])
            finally:
                if proxy:
                    proxy.stop()

        out[variant] = with_server(extra, log_dir, run)
    base = out.get("unpinned", {}).get("voice_ttft_ms")
    for variant, figures in out.items():
        if base and variant != "unpinned":
            figures["ttft_vs_unpinned"] = round(figures["voice_ttft_ms"] / base, 3)
            figures["speedup_vs_unpinned"] = round(base / figures["voice_ttft_ms"], 1)
    return out


def layout_variants(rounds: int, log_dir: Path) -> dict[str, Any]:
    """Where the changing time line goes, on a pinned slot, host cache off."""
    out: dict[str, Any] = {}

    def run(llama: LlamaServer) -> None:
        for layout in ("start", "before_tools", "late", "none"):
            print(f"layout / {layout}", file=sys.stderr)
            setup = Setup(llama, None, voice_pinned=True)
            out[layout] = run_rounds(
                setup, rounds, layout, False, [datetime(2026, 11, 30, 8, 0, 0)]
            )

    with_server(["--cache-ram", "0"], log_dir, run)
    none = out["none"]
    for figures in out.values():
        figures["reuse_gap_vs_none_pts"] = round(
            none["voice_reuse_pct"] - figures["voice_reuse_pct"], 1
        )
        figures["ttft_vs_ha_default"] = round(
            figures["voice_ttft_ms"] / out["before_tools"]["voice_ttft_ms"], 3
        )
    return out


SECTIONS = ("host_cache_off", "host_cache_on", "layout_pinned_cache_off", "unified_kv")


def run_section(name: str, rounds: int, log_dir: Path) -> dict[str, Any]:
    """One section of the report."""
    all_three = ("unpinned", "pinned_only", "pinned_reserved")
    if name == "host_cache_off":
        return slot_variants(name, ["--cache-ram", "0"], rounds, log_dir, all_three)
    if name == "host_cache_on":
        return slot_variants(name, [], rounds, log_dir, ("unpinned", "pinned_reserved"))
    if name == "unified_kv":  # idle-slot clearing needs the host cache, on by default
        return slot_variants(name, ["--kv-unified"], rounds, log_dir, ("unpinned", "pinned_only"))
    return layout_variants(rounds, log_dir)


def main() -> None:
    """Run every variant and print one JSON document."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on kill
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per variant")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="slots-bench-"))
    started = time.monotonic()
    report: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct Q4_1",
        "server": "llama-server b11669, -np 4, -c 16384, -t 1",
        "rounds": args.rounds,
    }
    for name in args.only:
        report[name] = run_section(name, args.rounds, log_dir)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
