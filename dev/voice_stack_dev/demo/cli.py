"""`scripts/demo`: the whole voice pipeline on this machine, then spoken requests through it."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ..ha_client import HomeAssistantApiError, HomeAssistantClient
from ..paths import MODEL_FILES, REPO
from . import ha_config, observe
from .ha_config import DASHBOARD_URL, check_environment, ffmpeg_binary, write_config
from .provision import PIPELINE_NAME, AgentPlan, provision
from .report import DemoReport, Provisioning, ServiceReport, render
from .services import (
    DEFAULT_DIR,
    DEFAULT_MODEL,
    N_PARALLEL,
    SERVICES,
    SPEC,
    DemoError,
    DemoState,
    Role,
    Stack,
    log,
    start_backends,
    start_home_assistant,
)
from .turns import AGENT_SERVICE, TurnContext, check_command, default_requests, run_turns

COMMAND = "Turn on the kitchen light"
QUESTION = "What is the capital of France?"
FOLLOW_UP = "And what is the capital of Germany?"
OUTPUT = REPO / "demo-output"


@dataclass(frozen=True)
class DemoOptions:
    keep: bool
    json: bool
    state_dir: Path
    output: Path
    model: Path | None
    commands_to_agent: bool
    command: str
    question: str
    follow_up: str

    @property
    def config_dir(self) -> Path:
        return self.state_dir / "ha-config"

    @property
    def llama_model(self) -> str:
        return str(self.model) if self.model else DEFAULT_MODEL

    @property
    def model_name(self) -> str:
        return self.model.name if self.model else MODEL_FILES[DEFAULT_MODEL]


def _gguf(value: str) -> Path:
    path = Path(value).expanduser().resolve()
    if not path.is_file() or path.suffix != ".gguf":
        raise argparse.ArgumentTypeError(f"{value}: no such .gguf file")
    return path


def parse_args(argv: Sequence[str] | None) -> DemoOptions:
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__)
    add = parser.add_argument
    add(
        "--keep",
        action="store_true",
        help="leave everything running and print how to open Home Assistant",
    )
    add("--json", action="store_true", help="print the result as JSON")
    add(
        "--model",
        type=_gguf,
        metavar="PATH.gguf",
        help="serve your own GGUF instead of SmolLM2-135M (a tool-calling model then "
        "controls devices itself)",
    )
    add(
        "--commands-to-agent",
        action="store_true",
        help="send commands to the agent too, not to Home Assistant's own intents",
    )
    add("--command", default=COMMAND, help=f"the spoken command (default: {COMMAND!r})")
    add("--question", default=QUESTION, help=f"the spoken question (default: {QUESTION!r})")
    add(
        "--follow-up",
        default=FOLLOW_UP,
        help=f"the follow-up in the same conversation (default: {FOLLOW_UP!r})",
    )
    add(
        "--state-dir",
        type=Path,
        default=DEFAULT_DIR,
        help="keys, HA config and logs (reused by the next run)",
    )
    add("--output", type=Path, default=OUTPUT, help="where the request and reply WAVs go")
    args = parser.parse_args(argv)
    return DemoOptions(
        keep=args.keep,
        json=args.json,
        state_dir=args.state_dir,
        output=args.output,
        model=args.model,
        commands_to_agent=args.commands_to_agent,
        command=args.command,
        question=args.question,
        follow_up=args.follow_up,
    )


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    # Ctrl-C even when started in the background (where SIGINT arrives ignored), and SIGTERM
    # the same way: both unwind through `finally`, which stops every service.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _forget_orphan_config(opts.state_dir)
    state = DemoState.load(opts.state_dir)
    state.assign_ports()
    state.save(opts.state_dir)
    stack = Stack(opts.state_dir / "logs")
    report = DemoReport()
    code = 0
    try:
        asyncio.run(run(opts, state, stack, report))
        report.ok = True
        _emit(opts, report)
        if opts.keep:
            _keep(state, stack, report)
    except DemoError as err:
        report.error = {"service": err.service, "reason": err.reason, "log": err.log_path}
        _emit(opts, report)
        code = 1
    except KeyboardInterrupt:
        print("\nstopping...", file=sys.stderr)
        code = 130
    finally:
        state.save(opts.state_dir)
        stack.stop()
    return code


def _forget_orphan_config(state_dir: Path) -> None:
    """An HA config without the state file that holds its owner's password cannot be logged
    into: start that HA over rather than fail on the login form."""
    config_dir = state_dir / "ha-config"
    if config_dir.is_dir() and not (state_dir / "state.json").is_file():
        log(f"{state_dir / 'state.json'} is missing: starting Home Assistant's config over")
        shutil.rmtree(config_dir)


def _emit(opts: DemoOptions, report: DemoReport) -> None:
    print(report.to_json() if opts.json else render(report), flush=True)


async def run(opts: DemoOptions, state: DemoState, stack: Stack, report: DemoReport) -> None:
    """Start, provision, speak, observe."""
    check_environment()
    hass_port = state.ports[Role.HASS]
    import_http = ha_config.needs_import(opts.config_dir, hass_port)
    has_dashboard = write_config(opts.config_dir, hass_port, http_block=import_http)
    log(f"starting services (logs in {stack.logs})")
    # HA boots while the backends load their models; entries it already has retry until ready.
    try:
        await asyncio.gather(
            asyncio.to_thread(start_backends, stack, state, opts.llama_model),
            asyncio.to_thread(start_home_assistant, stack, state, opts.config_dir),
        )
    finally:
        report.services = _service_reports(stack, opts)
    tools = await observe.can_call_tools(stack.url(Role.LLAMA), state.llama_key)
    report.plan = AgentPlan(
        opts.model_name, tools, opts.model is not None and tools, opts.commands_to_agent
    )
    report.ha_url = stack.url(Role.HASS)
    if has_dashboard:
        report.dashboard_url = f"{report.ha_url}/{DASHBOARD_URL}"
    async with HomeAssistantClient(report.ha_url) as ha:
        try:
            await _in_home_assistant(ha, opts, state, stack, report)
        except HomeAssistantApiError as err:
            raise DemoError("Home Assistant", str(err), stack.log(Role.HASS)) from err
        except DemoError as err:
            raise _with_log(err, stack) from err
        finally:
            if import_http:  # imported (and confirmed) or not: HA keeps it in its store now
                write_config(opts.config_dir, hass_port, http_block=False)
    await _probe_health(stack, report)


async def _in_home_assistant(
    ha: HomeAssistantClient, opts: DemoOptions, state: DemoState, stack: Stack, report: DemoReport
) -> None:
    began = time.monotonic()
    reused = state.onboarded
    assert report.plan is not None
    log("setting up Home Assistant (onboarding, HTTP settings, config flows, Assist pipeline)")
    setup = await provision(
        ha,
        state,
        report.plan,
        hass_port=state.ports[Role.HASS],
        proxy_url=stack.url(Role.PROXY),
        gateway_port=state.ports[Role.GATEWAY],
        gateway_http_url=stack.url(Role.GATEWAY),
    )
    state.save(opts.state_dir)
    report.provisioning = Provisioning(setup, time.monotonic() - began, reused)
    opts.output.mkdir(parents=True, exist_ok=True)
    ctx = TurnContext(
        ha=ha,
        setup=setup,
        speech_url=stack.url(Role.SPEECH),
        speech_log=str(stack.log(Role.SPEECH)),
        llama_url=stack.url(Role.LLAMA),
        llama_key=state.llama_key,
        output=opts.output,
        ffmpeg=ffmpeg_binary(),
        agent_controls_devices=report.plan.control,
    )
    requests = default_requests(opts.command, opts.question, opts.follow_up)
    async for turn in run_turns(ctx, requests):
        report.turns.append(turn)
    report.sensors = await observe.read_our_entities(ha)
    report.repairs = await observe.open_repairs(ha)
    for turn in report.turns:
        check_command(turn, prefer_local=setup.prefer_local_intents)


def _with_log(err: DemoError, stack: Stack) -> DemoError:
    """Point a failure without a log at the log of the part it names."""
    if err.log_path is not None:
        return err
    if err.service.startswith(("speech-to-text", "text-to-speech")):
        role = Role.GATEWAY
    elif err.service == AGENT_SERVICE:
        role = Role.LLAMA
    else:
        role = Role.HASS
    return DemoError(err.service, err.reason, stack.log(role) if role in stack.services else None)


def _service_reports(stack: Stack, opts: DemoOptions) -> list[ServiceReport]:
    labels = {Role.LLAMA: f"llama-server ({opts.model_name}, -np {N_PARALLEL})"}
    return [
        ServiceReport(
            role=spec.role.value,
            label=labels.get(spec.role, spec.label),
            url=stack.url(spec.role),
            log=str(stack.log(spec.role)),
            startup_s=round(stack.startup_s.get(spec.role, 0.0), 2),
        )
        for spec in SERVICES
        if spec.role in stack.services
    ]


async def _probe_health(stack: Stack, report: DemoReport) -> None:
    probes = await asyncio.gather(
        *(
            observe.probe(stack.url(Role(s.role)) + SPEC[Role(s.role)].health_path)
            for s in report.services
        )
    )
    for service, (status, detail) in zip(report.services, probes, strict=True):
        # HA's manifest.json says nothing more useful than that the frontend is served.
        shown = "frontend served" if service.role == Role.HASS and status == "ok" else detail
        service.health, service.detail = status, shown


def _keep(state: DemoState, stack: Stack, report: DemoReport) -> None:
    """Stay up until Ctrl-C; say so if a service dies meanwhile."""
    lines = [
        f"Everything is running. Open {report.ha_url} and log in as {state.username!r} with "
        f"password {state.password!r}.",
        f"Dashboard: {report.dashboard_url}" if report.dashboard_url else "",
        f'The preferred Assist pipeline is "{PIPELINE_NAME}": use the Assist button to talk or '
        "type to the agent.",
        f"Logs: {stack.logs}. Press Ctrl-C to stop everything.",
    ]
    print("\n" + "\n".join(line for line in lines if line), file=sys.stderr, flush=True)
    while True:
        time.sleep(2)
        if (role := stack.dead()) is not None:
            raise DemoError(SPEC[role].label, "exited while kept running", stack.log(role))
