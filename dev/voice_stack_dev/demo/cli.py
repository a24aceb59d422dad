"""`scripts/demo`: the whole voice pipeline on this machine, then one spoken request through it."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ..paths import REPO
from . import audio, observe
from .assist_run import run_pipeline
from .errors import DemoError
from .ha_client import HomeAssistantClient
from .ha_config import DASHBOARD_URL, ffmpeg_binary, write_config
from .preflight import check_environment
from .provision import PIPELINE_NAME, Provisioned, provision
from .report import DemoResult, ServiceInfo, render
from .services import N_PARALLEL, Stack, start_backends, start_home_assistant
from .state import DEFAULT_DIR, DemoState

REQUEST = "Turn on the kitchen light"
OUTPUT = REPO / "demo-output"
LABELS = {
    "llama": f"llama-server (SmolLM2-135M, -np {N_PARALLEL})",
    "proxy": "auth proxy (nginx, compose template)",
    "speech": "speech server (piper + faster-whisper)",
    "gateway": "Voice Stack gateway (Wyoming)",
    "hass": "Home Assistant 2026.11",
}
HEALTH_PATHS = {
    "llama": "/health",
    "proxy": "/proxy/status",
    "speech": "/health",
    "gateway": "/health",
    "hass": "/manifest.json",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave everything running and print how to open Home Assistant",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--text", default=REQUEST, help=f"what to say (default: {REQUEST!r})")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_DIR,
        help="keys, HA config and logs (reused by the next run)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where reply.wav goes")
    return parser.parse_args(argv)  # fmt: skip


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C even when started in the background (where SIGINT arrives ignored), and SIGTERM
    # the same way: both unwind through `finally`, which stops every service.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _forget_orphan_config(args.state_dir)
    state = DemoState.load(args.state_dir)
    state.assign_ports()
    state.save(args.state_dir)
    stack = Stack(args.state_dir / "logs")
    result = DemoResult()
    code = 0
    try:
        asyncio.run(run(args, state, stack, result))
        result.ok = True
        _emit(args, result)
        if args.keep:
            _keep(args, state, stack, result)
    except DemoError as err:
        result.error = {"service": err.service, "reason": err.reason, "log": err.log_path}
        _emit(args, result)
        code = 1
    except KeyboardInterrupt:
        print("\nstopping...", file=sys.stderr)
        code = 130
    finally:
        state.save(args.state_dir)
        stack.stop()
    return code


def _forget_orphan_config(state_dir: Path) -> None:
    """An HA config without the state file that holds its owner's password cannot be logged
    into: start that HA over rather than fail on the login form."""
    config_dir = state_dir / "ha-config"
    if config_dir.is_dir() and not (state_dir / "state.json").is_file():
        _log(f"{state_dir / 'state.json'} is missing: starting Home Assistant's config over")
        shutil.rmtree(config_dir)


def _emit(args: argparse.Namespace, result: DemoResult) -> None:
    print(result.to_json() if args.json else render(result), flush=True)


def _log(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace, state: DemoState, stack: Stack, result: DemoResult) -> None:
    """Start, provision, speak, observe."""
    check_environment()
    config_dir = args.state_dir / "ha-config"
    has_dashboard = write_config(config_dir, state.ports["hass"])
    _log(f"starting services (logs in {stack.logs})")
    # HA boots while the backends load their models; entries it already has retry until ready.
    try:
        await asyncio.gather(
            asyncio.to_thread(start_backends, stack, state),
            asyncio.to_thread(start_home_assistant, stack, state, config_dir),
        )
    finally:
        _record_services(stack, result)
    result.ha_url = stack.url("hass")
    if has_dashboard:
        result.dashboard_url = f"{result.ha_url}/{DASHBOARD_URL}"
    async with HomeAssistantClient(result.ha_url, str(stack.services["hass"].log_path)) as ha:
        began = time.monotonic()
        result.reused = state.onboarded
        _log("setting up Home Assistant (onboarding, config flows, Assist pipeline)")
        setup = await provision(
            ha,
            state,
            proxy_url=stack.url("proxy"),
            gateway_port=state.ports["gateway"],
            gateway_http_url=stack.url("gateway"),
        )
        state.save(args.state_dir)
        result.provision_s = time.monotonic() - began
        result.pipeline_id, result.voice_stack_entry = setup.pipeline_id, setup.voice_stack_entry
        await _speak(args, ha, stack, setup, result, llama_key=state.llama_key)
        result.sensors = await observe.read_our_entities(ha)
    await _probe_health(stack, result)
    if result.reply_type == "error":  # the agent answered with its error sentence
        raise DemoError(
            "conversation agent (voice_stack -> auth proxy -> llama-server)",
            result.reply,
            stack.services["llama"].log_path,
        )


async def _speak(
    args: argparse.Namespace,
    ha: HomeAssistantClient,
    stack: Stack,
    setup: Provisioned,
    result: DemoResult,
    *,
    llama_key: str,
) -> None:
    """Synthesize the request, run the pipeline, save the reply audio, read the slot used."""
    speech_log = str(stack.services["speech"].log_path)
    pcm = await audio.synthesize_request(stack.url("speech"), args.text, speech_log)
    result.request_text, result.request_audio_s = args.text, len(pcm) / 2 / audio.RATE
    args.output.mkdir(parents=True, exist_ok=True)
    audio.write_wav(args.output / "request.wav", pcm)
    result.agent_entity, result.agent_slot = setup.agent_entity, setup.agent_slot
    result.light_entity = setup.light_entity
    result.light_before = await _state_of(ha, setup.light_entity)
    _log(f'speaking "{args.text}" into the pipeline')
    run_result = await run_pipeline(ha, setup.pipeline_id, pcm, ha.log_path)
    result.transcript, result.reply = run_result.transcript, run_result.reply
    result.reply_type = run_result.reply_type
    result.processed_locally = run_result.processed_locally
    result.stage_ms, result.pipeline_ms = run_result.stage_ms, run_result.wall_ms
    slots = await observe.llama_slots(stack.url("llama"), llama_key)
    result.slot_used = observe.last_used_slot(slots)
    if run_result.tts_url:
        began = time.monotonic()
        reply_audio = await ha.download(run_result.tts_url)
        result.reply_fetch_ms = (time.monotonic() - began) * 1000
        wav = args.output / "reply.wav"
        result.reply_audio_s = await audio.to_wav(ffmpeg_binary(), reply_audio, wav)
        result.reply_wav = _display(wav)
    result.light_after = await _state_of(ha, setup.light_entity)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


async def _state_of(ha: HomeAssistantClient, entity_id: str) -> str:
    state = await ha.request("GET", f"/api/states/{entity_id}")
    return str(state.get("state"))


def _record_services(stack: Stack, result: DemoResult) -> None:
    for role, service in stack.services.items():
        result.services[role] = ServiceInfo(
            label=LABELS.get(role, role),
            url=service.url,
            log=str(service.log_path),
            startup_s=round(stack.startup_s.get(role, 0.0), 2),
        )


async def _probe_health(stack: Stack, result: DemoResult) -> None:
    roles = [r for r in HEALTH_PATHS if r in stack.services]
    probes = await asyncio.gather(*(observe.probe(stack.url(r) + HEALTH_PATHS[r]) for r in roles))
    for role, (status, detail) in zip(roles, probes, strict=True):
        # HA's manifest.json says nothing more useful than that the frontend is served.
        shown = "frontend served" if role == "hass" and status == "ok" else detail
        result.services[role].health, result.services[role].detail = status, shown


def _keep(args: argparse.Namespace, state: DemoState, stack: Stack, result: DemoResult) -> None:
    """Stay up until Ctrl-C; say so if a service dies meanwhile."""
    print(
        f"\nEverything is running. Open {result.ha_url} and log in as "
        f"{state.username!r} with password {state.password!r}.",
        file=sys.stderr,
    )
    if result.dashboard_url:
        print(f"Dashboard: {result.dashboard_url}", file=sys.stderr)
    print(
        f'The preferred Assist pipeline is "{PIPELINE_NAME}": use the Assist button to talk or '
        "type to the agent.",
        file=sys.stderr,
    )
    print(f"Logs: {stack.logs}. Press Ctrl-C to stop everything.", file=sys.stderr, flush=True)
    while True:
        time.sleep(2)
        for role, service in stack.services.items():
            if not service.running:
                raise DemoError(LABELS.get(role, role), "exited while kept running",
                                service.log_path)  # fmt: skip
