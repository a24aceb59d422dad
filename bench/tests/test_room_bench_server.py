"""bench/room_bench.py --asr-server for real: the --quick grid measured with an ASR server of
your own (here the speech server's CPU whisper behind a bearer-key check, in place of a GPU
box's), so every request the run transcribes (the gateways', wyoming-openai's, HA's holds') goes
there, with the key, and the key is printed nowhere. Bad arguments are refused before anything
starts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.e2e.demo_process import run_stopping_cleanly
from voice_stack_bench.asr_server import KEY_ENV
from voice_stack_dev.paths import REPO, venv_bin
from voice_stack_dev.procs import free_port
from voice_stack_dev.speech_server import STT_MODEL, start_speech_server

BENCH = REPO / "bench" / "room_bench.py"
LIMIT_S = 8 * 60
KEY = "room-bench-test-key"
HOLD_ROWS = 6  # HA's three holds, enhancements off and on

type Json = dict[str, Any]


def _argv(*extra: str) -> list[str]:
    return [str(venv_bin("ha11", "python")), str(BENCH), *extra]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'dev'}:{REPO / 'bench'}", **extra}


class KeyedAsr:
    """An ASR server that wants a bearer key: forwards /v1/models and transcriptions to the
    speech server and counts what came, with the key and without (refused: 401)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: Counter[str] = Counter()
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _forward(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            self.seen["refused"] += 1
            return web.json_response({"error": "bad key"}, status=401)
        self.seen[request.path] += 1
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "")}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
            session.request(
                request.method, self.upstream + request.path_qs, data=body, headers=headers
            ) as resp,
        ):
            return web.Response(
                body=await resp.read(), status=resp.status, content_type=resp.content_type
            )

    async def _start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/v1/models", self._forward)
        app.router.add_post("/v1/audio/transcriptions", self._forward)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner

    def __enter__(self) -> KeyedAsr:
        self._thread.start()
        self._runner = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


@pytest.fixture(scope="module")
def served(service_logs: Path) -> Iterator[tuple[Json, str, KeyedAsr]]:
    """One --quick run against the keyed server, one lane; its JSON, stdout and stderr."""
    speech = start_speech_server(service_logs)
    try:
        with KeyedAsr(speech.url) as asr:
            url = f"http://127.0.0.1:{asr.port}/v1"
            argv = _argv("--quick", "--lanes", "1", "--asr-server", url, "--asr-model", STT_MODEL)
            logs = service_logs / "room_bench_server"  # its gateways' and wyoming-openai's logs
            logs.mkdir()
            env = _env(**{KEY_ENV: KEY, "TMPDIR": str(logs)})
            code, stdout, stderr = run_stopping_cleanly(argv, env, LIMIT_S)
            (service_logs / "room_bench_server.stderr").write_text(stderr)
            assert code == 0, stderr[-4000:]
            (service_logs / "room_bench_server.json").write_text(stdout)
            yield json.loads(stdout), stdout + stderr, asr
    finally:
        speech.stop()


pytestmark = pytest.mark.timeout(LIMIT_S + 180)


@pytest.mark.slow
def test_every_transcript_of_the_run_came_from_the_server_given(
    served: tuple[Json, str, KeyedAsr],
) -> None:
    bench, _printed, asr = served
    assert list(bench["asr_modes"]) == ["server"]
    run = bench["asr_modes"]["server"]
    assert run["asr"]["mode"] == "server"
    assert run["asr"]["modelled"] is False
    assert f"127.0.0.1:{asr.port}/v1" in run["asr"]["asr"]
    assert run["primed"] == 0
    scenes = run["scenes"]
    assert len(scenes) == 6
    errors = [(s["name"], n) for s in scenes for n, r in s["results"].items() if "error" in r]
    assert errors == []
    # HA's six holds alone on each scene, and at least one request per streamed turn
    streamed = sum(1 for s in scenes for n in s["results"] if not n.startswith("ha_"))
    assert asr.seen["/v1/audio/transcriptions"] >= len(scenes) * HOLD_ROWS + streamed
    assert asr.seen["refused"] == 0  # the gateways and wyoming-openai sent the key too
    # a GPU box's goal (fast mode's), in quiet and at 10 dB alike
    assert (
        run["goals"]["complete_last_word_to_transcript"]["gateway_medium"]["worst"]["limit"] == 0.6
    )


@pytest.mark.slow
def test_the_key_is_printed_nowhere(served: tuple[Json, str, KeyedAsr], service_logs: Path) -> None:
    _bench, printed, _asr = served
    assert KEY not in printed
    logs = list((service_logs / "room_bench_server").rglob("*.log"))
    assert any(log.name.startswith("gateway_medium") for log in logs)  # debug logs
    for log in logs:
        assert KEY not in log.read_text(errors="replace"), log


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--asr-server", "gpu-box:8000/v1"], "an http(s) URL ending in /v1"),
        (["--asr-server", "http://gpu-box:8000/"], "an http(s) URL ending in /v1"),
        (["--asr", "fast", "--asr-server", "http://gpu-box:8000/v1"], "leave out --asr"),
    ],
)
def test_a_bad_server_argument_is_refused_before_anything_starts(
    extra: list[str], why: str
) -> None:
    done = subprocess.run(
        _argv(*extra), env=_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert why in done.stderr
