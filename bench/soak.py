"""A soak with faults: the demo's real servers and a real Home Assistant 2026.11 for `--minutes`,
two satellites speaking through `assist_pipeline/run` and three browser-like clients on the
general key, while the services are killed, restarted and reconfigured on a schedule (issue 20).

    PYTHONPATH=dev .cache/venv/ha11/bin/python bench/soak.py --minutes 60 [--out FILE]

Servers (127.0.0.1 only, all stopped on exit, Ctrl-C or SIGTERM): llama-server (SmolLM2-135M,
-np 4, --cache-ram 512) behind the auth proxy, the speech server behind the Voice Stack
gateway, `hass` with the demo's config (recorder on). Each satellite speaks a question as a new
conversation, then its follow-up, in real time (20 ms chunks), every `--gap` s; the browsers
chat (each chat followed by its title request) every `--browser-gap` s. Faults, in this order,
each `--rounds` times (default 2 from 20 minutes on, else 1), evenly over the first
`--fault-minutes` (default: the first sixth of the run): llama-server killed (SIGKILL) and
restarted, the speech server restarted, the gateway restarted, the proxy reloaded with a new
general key (the browsers switch to it), the proxy down for 30 s, Home Assistant restarted. The
rest of the run is load alone, so each process that came back from a fault is then watched for
the last five sixths (50 minutes of a 60-minute run) without being restarted: growth there is
growth, not a restart's warm-up. A fault's window is from its start until the service is back
plus GRACE_S. Inside HA, a probe (dev/ha_probe, linked into this run's HA config only, loaded
by one restart of HA before the run begins) counts the event loop's tasks and those running our
integration's code; the gateway's /metrics gives its own. One JSON document to stdout (and
`--out`); progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from voice_stack_bench.e2e.phases import utterances
from voice_stack_bench.e2e.servers import Servers
from voice_stack_bench.e2e.stacks import provision_voice_stack
from voice_stack_bench.e2e.turns import Utterance
from voice_stack_bench.soak.faults import FAULTS, faults, restart_ha, timer
from voice_stack_bench.soak.load import QUESTIONS, browsers, satellite
from voice_stack_bench.soak.primes import watch_primes
from voice_stack_bench.soak.readings import install_probe, read_at_rest, watch
from voice_stack_bench.soak.recorder import our_entities, recorder_rows
from voice_stack_bench.soak.report import report
from voice_stack_bench.soak.state import Soak, log
from voice_stack_dev.demo.ha_config import check_environment
from voice_stack_dev.demo.services import DemoError, Role
from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient


async def run(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    check_environment()
    log(f"starting the servers (logs in {servers.logs})")
    await servers.start(stock=False)
    soak = Soak(servers, time.monotonic(), time.monotonic() + args.minutes * 60)
    soak.general_key = servers.state.proxy_key
    soak.ha = HomeAssistantClient(servers.url(Role.HASS))
    try:
        setup = await provision_voice_stack(soak.ha, servers)
        soak.pipeline_id = setup.pipeline_id
        ours = await our_entities(soak.ha)
        texts = {t for pair in QUESTIONS for t in pair}
        speech = await utterances(servers, texts)
        # HA, set up and onboarded (its database written), restarted once to load the probe
        install_probe(servers)
        await restart_ha(soak)
        began_unix = time.time()
        soak.began = time.monotonic()
        soak.stop_at = soak.began + args.minutes * 60
        log(f"soaking for {args.minutes} min: {args.rounds} round(s) of {len(FAULTS)} faults")
        await _load_and_faults(soak, args, speech)
        await read_at_rest(soak)
        kinds = recorder_rows(servers.config_dir, ours, began_unix)
        return report(soak, kinds, args)
    finally:
        if soak.ha is not None:
            await soak.ha.close()


async def _load_and_faults(
    soak: Soak, args: argparse.Namespace, speech: dict[str, Utterance]
) -> None:
    """The satellites and browsers, the readings and the faults, until the timer ends the run."""
    async with asyncio.TaskGroup() as group:
        fault_task = group.create_task(
            faults(soak, args.rounds, args.fault_minutes * 60, args.tail)
        )
        group.create_task(timer(soak, fault_task))
        group.create_task(watch(soak, args.sample))
        group.create_task(watch_primes(soak))
        group.create_task(browsers(soak, args.browser_gap))
        for n in range(2):
            group.create_task(satellite(soak, n, speech, args.gap))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument(
        "--rounds", type=int, default=None, help="of every fault (default 2 from 20 min on)"
    )
    parser.add_argument(
        "--fault-minutes", type=float, default=None,
        help="the faults are spread over the run's first this many minutes (default: minutes/6)",
    )  # fmt: skip
    parser.add_argument("--gap", type=float, default=4.0, help="s between a satellite's turns")
    parser.add_argument("--browser-gap", type=float, default=10.0, help="s between browser rounds")
    parser.add_argument("--sample", type=float, default=10.0, help="s between /proc readings")
    parser.add_argument("--tail", type=float, default=30.0, help="s run after the last fault")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.minutes >= 20 else 1
    if args.fault_minutes is None:
        args.fault_minutes = args.minutes / 6
    return args


async def _until_stopped(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    """run(), cancelled by SIGTERM as asyncio.run cancels it on Ctrl-C, and bounded: faults that
    run late push the end back, never past an hour beyond the planned end."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    async with asyncio.timeout(args.minutes * 60 + 3600):
        return await run(args, servers)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    servers = Servers(Path(tempfile.mkdtemp(prefix="voice-soak-")))
    try:
        result = asyncio.run(_until_stopped(args, servers))
    except DemoError as err:
        print(f"soak failed: {err.describe()}", file=sys.stderr)
        return 1
    except (HomeAssistantApiError, TimeoutError) as err:
        print(f"soak failed: {err} (logs: {servers.logs})", file=sys.stderr)
        return 1
    except KeyboardInterrupt, asyncio.CancelledError:
        print("\nsoak: interrupted, stopping the servers", file=sys.stderr)
        return 130
    finally:
        servers.stop()
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
