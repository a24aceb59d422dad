"""The Voice Stack Wyoming gateway on loopback (the gw venv's, or another install's), its STT and
TTS on one speech server."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .paths import CACHE, REPO, venv_bin
from .procs import Service, free_port


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
) -> Service:
    """Start voice-stack-gateway against `speech_url`/v1 and wait until its /health answers.

    `port` is the Wyoming port, `http_port` the side port of /health (the Service's own port);
    free ones are picked when not given; `venv` is the environment it is installed in.
    """
    port, http_port = port or free_port(), http_port or free_port()
    speech_v1 = f"{speech_url}/v1"
    argv = [
        str(venv_bin(venv, "voice-stack-gateway")),
        "--uri", f"tcp://127.0.0.1:{port}",
        "--http-uri", f"tcp://127.0.0.1:{http_port}",
        "--stt-openai-url", speech_v1,
        "--tts-openai-url", speech_v1,
        *extra_args,
    ]  # fmt: skip
    return Service(
        name=name,
        argv=argv,
        port=http_port,
        log_path=log_path,
        env=dict(env or {}),
        startup_timeout=startup_timeout,
    ).start()


def start_wyoming_openai(
    stt_url: str,
    tts_url: str,
    log_path: Path,
    *,
    stt_model: str = "whisper-1",
    tts_model: str = "tts-1",
    voice: str = "alloy",
) -> Service:
    """wyoming-openai 0.8.0, the anchor (bench/setup-anchors installs it), streaming TTS on, its
    backend detection off; Service.port is its Wyoming port (no health endpoint: TCP check)."""
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
        "--stt-openai-url", stt_url, "--stt-openai-key", "x", "--stt-models", stt_model,
        "--stt-backend", "OPENAI",
        "--tts-openai-url", tts_url, "--tts-openai-key", "x", "--tts-models", tts_model,
        "--tts-streaming-models", tts_model, "--tts-voices", voice, "--tts-backend", "OPENAI",
    ]  # fmt: skip
    return Service(
        name="wyoming-openai 0.8.0", argv=argv, port=port, log_path=log_path, health_path=None
    ).start()
