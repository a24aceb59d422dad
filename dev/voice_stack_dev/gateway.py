"""The Voice Stack Wyoming gateway on loopback (the gw venv's, or another install's), its STT and
TTS on one speech server."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .paths import CACHE, REPO, venv_bin
from .procs import Service, ServiceError, free_port, http_get


def start_gateway(
    speech_url: str,
    log_path: Path,
    *,
    port: int | None = None,
    http_port: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    name: str = "voice-stack-gateway",
    startup_timeout: float = 60.0,
    venv: str = "gw",
    stt_v1: str | None = None,
) -> Service:
    """Start voice-stack-gateway against `speech_url`/v1 and wait until its /health answers.

    `port` is the Wyoming port, `http_port` the side port of /health (the Service's own port);
    free ones are picked when not given; `venv` is the environment it is installed in;
    `stt_v1` another STT server's base URL.
    """
    port, http_port = port or free_port(), http_port or free_port()
    speech_v1 = f"{speech_url}/v1"
    argv = [
        str(venv_bin(venv, "voice-stack-gateway")),
        "--uri", f"tcp://127.0.0.1:{port}",
        "--http-uri", f"tcp://127.0.0.1:{http_port}",
        "--stt-openai-url", stt_v1 or speech_v1,
        "--tts-openai-url", speech_v1,
        *extra_args,
    ]  # fmt: skip
    service = Service(
        name=name,
        argv=argv,
        port=http_port,
        log_path=log_path,
        env=dict(env or {}),
        startup_timeout=startup_timeout,
    ).start()
    wait_catalog(service, startup_timeout)
    return service


def wait_catalog(service: Service, timeout: float) -> None:
    """Wait for the gateway's first catalog refresh: until then describe answers from the
    configuration alone. /health reports a backend's status only once its lists are in (up or
    down: a test may start the gateway with a backend down on purpose)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = http_get(service.url + "/health")
        if reply is not None and reply[0] == 200:
            backends = json.loads(reply[1])["backends"].values()
            if all(b["status"] != "unknown" for b in backends):
                return
        time.sleep(0.05)
    service.stop()
    raise ServiceError(
        f"{service.name}: no catalog refresh in {timeout:.0f} s; log: "
        f"{service.log_path}\n{service.log_tail()}"
    )


def start_wyoming_openai(
    stt_url: str,
    tts_url: str,
    log_path: Path,
    *,
    stt_model: str = "whisper-1",
    tts_model: str = "tts-1",
    voice: str = "alloy",
    env: Mapping[str, str] | None = None,
) -> Service:
    """wyoming-openai 0.8.0, the anchor (bench/setup-anchors installs it), streaming TTS on, its
    backend detection off; Service.port is its Wyoming port (no health endpoint: TCP check).
    `env` with STT_OPENAI_KEY sets the STT server's key (else "x")."""
    python = CACHE / "venv" / "bench-wyoming-openai" / "bin" / "python"
    if not python.exists():
        setup = [str(REPO / "bench" / "setup-anchors")]
        python = Path(
            subprocess.run(setup, check=True, capture_output=True, text=True).stdout.strip()
        )
    port = free_port()
    argv = [
        str(python), "-m", "wyoming_openai", "--uri", f"tcp://127.0.0.1:{port}",
        "--log-level", "WARNING",
        "--stt-openai-url", stt_url, "--stt-models", stt_model,
        "--stt-backend", "OPENAI",
        "--tts-openai-url", tts_url, "--tts-openai-key", "x", "--tts-models", tts_model,
        "--tts-streaming-models", tts_model, "--tts-voices", voice, "--tts-backend", "OPENAI",
    ]  # fmt: skip
    env = {"STT_OPENAI_KEY": "x", **(env or {})}
    return Service(
        name="wyoming-openai 0.8.0",
        argv=argv,
        port=port,
        log_path=log_path,
        health_path=None,
        env=env,
    ).start()
