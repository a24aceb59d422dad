"""The gateways a bench runs side by side: one voice-stack-gateway process per setting, on the
one speech server; shared by bench/endpoint_bench.py and bench/room_bench.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.procs import Service, free_port

from ..asr_server import AsrServer, asr_env
from .ha_hold import HOLDS_S

DEFAULT_HOLD_S = HOLDS_S["default"]


@dataclass(frozen=True)
class Setting:
    """A gateway configuration, and the HA hold that backs it (None: the gateway's own VAD)."""

    name: str
    env: dict[str, str]
    hold_s: float | None
    about: str


GATEWAY_SETTINGS = (
    Setting("gateway_400", {"STT_ENDPOINT_MS": "400"}, DEFAULT_HOLD_S,
            "gateway end of turn at STT_ENDPOINT_MS=400 and STT_ENDPOINT_WEAK_MS=700 (the"
            " defaults: 700 ms for words that read complete only weakly), HA's 0.7 s hold behind"),
    Setting("gateway_400_one_tier", {"STT_ENDPOINT_MS": "400", "STT_ENDPOINT_WEAK_MS": "0"},
            DEFAULT_HOLD_S,
            "STT_ENDPOINT_MS=400 with STT_ENDPOINT_WEAK_MS=0: every complete verdict at 400 ms"
            " (the default before 2026-12-02's two tiers), HA's 0.7 s hold behind"),
    Setting("gateway_700", {"STT_ENDPOINT_MS": "700"}, DEFAULT_HOLD_S,
            "gateway end of turn at STT_ENDPOINT_MS=700, HA's 0.7 s hold behind"),
    Setting("gateway_off", {"STT_ENDPOINT_MS": "0"}, DEFAULT_HOLD_S,
            "STT_ENDPOINT_MS=0: early transcription only, HA's 0.7 s hold ends every turn"),
    Setting("gateway_own_vad", {"STT_OWN_VAD": "1"}, None,
            "STT_OWN_VAD=1: the gateway ends the stream itself, no audio-stop before the 15 s cap"),
)  # fmt: skip


async def own_vad_offered(port: int) -> bool:
    """The gateway's describe answer: does its STT say requires_external_vad: false?"""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 10)
            if event is None:
                raise RuntimeError("the gateway closed the connection without info")
            if Info.is_type(event.type):
                asr = Info.from_event(event).asr
                return bool(asr) and not asr[0].requires_external_vad


@dataclass
class Gateways:
    """The gateways under test, by setting: (the Service, its Wyoming port)."""

    running: dict[str, tuple[Service, int]]
    skipped: dict[str, str]

    def stop(self) -> None:
        for service, _port in self.running.values():
            service.stop()


def start_gateways(
    speech: Service,
    logs: Path,
    gateway_src: Path | None,
    stop: Callable[[Service], None],
    *,
    settings: tuple[Setting, ...] = GATEWAY_SETTINGS,
    lane: str = "",
    asr: AsrServer | None = None,
) -> Gateways:
    """A gateway per setting (one that fails to start, or without the own VAD it was asked
    for, is skipped and said so), its debug log `<setting><lane>.log`; `stop` is handed each
    started one. Its STT is `asr` (default: the speech server's)."""
    gateways = Gateways({}, {})
    asr = asr or AsrServer.speech_server(speech.url)
    env = ({"PYTHONPATH": str(gateway_src)} if gateway_src else {}) | asr_env(asr)
    for setting in settings:
        extra = ["--stt-models", asr.model, "--log-level", "DEBUG"]
        port = free_port()
        try:
            service = start_gateway(
                speech.url, logs / f"{setting.name}{lane}.log", port=port, extra_args=extra,
                env=env | setting.env, name=f"gateway ({setting.name}{lane})", stt_v1=asr.v1,
            )  # fmt: skip
        except RuntimeError as err:
            gateways.skipped[setting.name] = f"the gateway did not start with {setting.env}: {err}"
            continue
        stop(service)
        gateways.running[setting.name] = (service, port)
        if setting.hold_s is None and not asyncio.run(own_vad_offered(port)):
            service.stop()
            del gateways.running[setting.name]
            gateways.skipped[setting.name] = (
                f"the gateway started with {setting.env} still says requires_external_vad: true"
                " in its describe answer (no gateway-owned end of speech yet)"
            )
    return gateways
