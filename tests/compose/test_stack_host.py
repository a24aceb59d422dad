"""compose/stack's host and image checks (stack-host.sh), with stand-in docker and nvidia-smi
programs on PATH for the hosts this machine is not (test_stack_engine.py runs a real engine);
compose itself is the real Compose v2 binary, and the llama-server --help it reads is the real
one of the tested build."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose.stack_helpers import (
    COMPOSE_BIN,
    LOGGING_COMPOSE,
    OLD_COMPOSE,
    stack,
    stand_in,
    stand_in_host,
    write_env_file,
)
from voice_stack_dev.paths import LLAMA_SERVER

NVIDIA = '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}'
RTX_4090 = "NVIDIA GeForce RTX 4090, 575.64.03, 8.9"
GOOD_HOST = {
    "FAKE_ENGINE": "28.2.2",
    "FAKE_BUILDX": "0.17.1",
    "FAKE_RUNTIMES": NVIDIA,
    "FAKE_GPUS": RTX_4090,
}
GATEWAY_BASE = "python:3.14.10-slim-trixie"


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return write_env_file(tmp_path / ".env")


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    return stand_in_host(tmp_path, GOOD_HOST)


def logging_compose(host: dict[str, str]) -> str:
    directory = Path(host["FAKE_DOCKER_LOG"]).parent / "compose-bin"
    text = LOGGING_COMPOSE.replace("{real}", str(COMPOSE_BIN))
    return str(stand_in(directory, "compose", text))


def compose_ran(host: dict[str, str], command: str) -> bool:
    log = Path(host["FAKE_DOCKER_LOG"] + ".compose")
    lines = log.read_text().splitlines() if log.exists() else []
    return any(f" {command}" in f" {line} ".replace(" -d", "") for line in lines)


def docker_calls(host: dict[str, str], prefix: str) -> list[str]:
    log = Path(host["FAKE_DOCKER_LOG"])
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]


def test_a_good_host_passes_and_every_image_is_inspected(
    env_file: Path, host: dict[str, str]
) -> None:
    result = stack(env_file, "check", extra_env=host | {"COMPOSE_PROFILES": "speech,gateway"})
    assert result.returncode == 0, result.stderr
    assert "every image exists" in result.stderr
    assert "pinned by tag only" not in result.stderr  # every default GPU image is by digest
    inspected = docker_calls(host, "manifest inspect ")
    assert len(inspected) == 5  # four pulled, and the base the gateway is built from
    assert any(image.startswith("ghcr.io/ggml-org/llama.cpp:server-cuda-b") for image in inspected)
    assert GATEWAY_BASE in inspected
    assert not [image for image in inspected if "voice-stack-gateway" in image]


def test_only_the_selected_profiles_images(env_file: Path, host: dict[str, str]) -> None:
    result = stack(env_file, "images", extra_env=host | {"COMPOSE_PROFILES": ""})
    assert result.returncode == 0, result.stderr
    inspected = docker_calls(host, "manifest inspect ")
    assert len(inspected) == 2  # llm and llm-auth
    assert any(image.startswith("nginx:1.30.5-alpine@sha256:") for image in inspected)


def test_a_missing_image_is_named(env_file: Path, host: dict[str, str]) -> None:
    gone = "ghcr.io/example/never-published:1.0"
    env = host | {"COMPOSE_PROFILES": "speech", "TTS_IMAGE": gone, "FAKE_MISSING": gone}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert (
        f"image not found on this host or in its registry: {gone} (tts: check the tag, or set "
        "TTS_IMAGE; ./stack variants lists the ones that fit)"
    ) in result.stderr


def test_up_stops_at_a_missing_image_before_compose_runs(
    env_file: Path, host: dict[str, str]
) -> None:
    """Nothing is pulled, stopped or recreated: compose itself never runs."""
    gone = "ghcr.io/example/never-published:1.0"
    env = host | {"LLM_IMAGE": gone, "FAKE_MISSING": gone, "COMPOSE_BIN": logging_compose(host)}
    result = stack(env_file, "up", "-d", extra_env=env)
    assert result.returncode == 2
    assert f"image not found on this host or in its registry: {gone} (llm:" in result.stderr
    assert "nothing was pulled, stopped or recreated" in result.stderr
    assert docker_calls(host, "pull ") == []
    assert not compose_ran(host, "up")


def test_a_missing_gateway_base_is_named(env_file: Path, host: dict[str, str]) -> None:
    env = host | {"COMPOSE_PROFILES": "gateway", "FAKE_MISSING": GATEWAY_BASE}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert f"{GATEWAY_BASE} (the base that gateway is built from, here)" in result.stderr


def test_an_image_on_this_host_needs_no_registry(env_file: Path, host: dict[str, str]) -> None:
    local = "voice-stack-test/llm:only-here"
    env = host | {"LLM_IMAGE": local, "FAKE_MISSING": local, "FAKE_LOCAL": local}
    result = stack(env_file, "images", extra_env=env | {"COMPOSE_PROFILES": ""})
    assert result.returncode == 0, result.stderr
    assert local not in docker_calls(host, "manifest inspect ")


def test_a_published_gateway_image_must_be_pinned(env_file: Path, host: dict[str, str]) -> None:
    env = host | {"GATEWAY_IMAGE": "ghcr.io/voice-stack/voice-stack-gateway:0.1.0"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert "GATEWAY_IMAGE must be a published image pinned by digest" in result.stderr
    pinned = "ghcr.io/voice-stack/voice-stack-gateway:0.2.0@sha256:" + "ab" * 32
    env = host | {"GATEWAY_IMAGE": pinned, "COMPOSE_PROFILES": "gateway"}
    assert stack(env_file, "images", extra_env=env).returncode == 0
    assert pinned in docker_calls(host, "manifest inspect ")


def test_the_llm_flags_are_read_from_the_images_llama_server(
    env_file: Path, host: dict[str, str], tmp_path: Path
) -> None:
    image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11347@sha256:" + "d8" * 32
    env = host | {"LLM_IMAGE": image, "FAKE_LOCAL": image, "COMPOSE_PROFILES": ""}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 0, result.stderr
    assert f"llama-server in {image} knows every flag" in result.stderr
    assert docker_calls(host, "run --rm --network none --gpus all ") == [f"{image} --help"]
    # An older build: the same help without --no-ui (it had only --no-webui then).
    help_text = subprocess.run(
        [str(LLAMA_SERVER), "--help"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    old = tmp_path / "old-help.txt"
    old.write_text(help_text.replace("--no-ui", "--no-webui"))
    result = stack(env_file, "check", extra_env=env | {"FAKE_LLAMA_HELP": str(old)})
    assert result.returncode == 2
    assert f"llama-server in {image} does not know --no-ui" in result.stderr


def test_a_typo_in_the_extra_args_is_refused(env_file: Path, host: dict[str, str]) -> None:
    image = "voice-stack-test/llm:local-build"
    env = host | {"LLM_IMAGE": image, "FAKE_LOCAL": image, "COMPOSE_PROFILES": "",
                  "LLM_EXTRA_ARGS": "--cache-rame 0"}  # fmt: skip
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert "does not know --cache-rame" in result.stderr


def test_up_pulls_the_llm_image_and_checks_its_flags_first(
    env_file: Path, host: dict[str, str], tmp_path: Path
) -> None:
    old = tmp_path / "old-help.txt"
    old.write_text("  --port N   port\n  --host H  host\n")
    env = host | {"COMPOSE_PROFILES": "", "FAKE_LLAMA_HELP": str(old),
                  "COMPOSE_BIN": logging_compose(host)}  # fmt: skip
    result = stack(env_file, "up", "-d", extra_env=env)
    assert result.returncode == 2
    assert "does not know" in result.stderr
    assert len(docker_calls(host, "pull -q ")) == 1
    assert not compose_ran(host, "up")


def test_built_images_are_not_looked_up(
    env_file: Path, host: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text("FROM debian:13 AS build\nFROM build\n")
    env = host | {"COMPOSE_PROFILES": "gateway", "GATEWAY_BUILD_CONTEXT": str(tmp_path)}
    result = stack(env_file, "images", extra_env=env)
    assert result.returncode == 0, result.stderr
    inspected = docker_calls(host, "manifest inspect ")
    assert not [i for i in inspected if "voice-stack-gateway" in i]
    assert "debian:13" in inspected  # the base; the stage it names is not an image
    assert "build" not in inspected


@pytest.mark.parametrize(
    ("fake", "message"),
    [
        ({"FAKE_ENGINE": "24.0.7"}, "Docker Engine 24.0.7 is older than 25.0.0"),
        ({"FAKE_RUNTIMES": '{"runc":{}}'}, "install the NVIDIA Container Toolkit"),
        ({"FAKE_BUILDX": ""}, "install docker-buildx-plugin 0.17.0 or newer"),
        ({"FAKE_BUILDX": "0.16.2"}, "docker buildx 0.16.2 is older than 0.17.0"),
    ],
    ids=["old engine", "no NVIDIA runtime", "no buildx", "old buildx"],
)
def test_host_problems_say_what_to_install(
    env_file: Path, host: dict[str, str], tmp_path: Path, fake: dict[str, str], message: str
) -> None:
    env = host | {"GATEWAY_BUILD_CONTEXT": str(tmp_path), "COMPOSE_PROFILES": "gateway"} | fake
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert message in result.stderr
    assert "this host is not ready for ./stack up" in result.stderr
    assert docker_calls(host, "manifest inspect ") == []  # nothing looked up past a bad host


def test_buildx_only_matters_when_something_is_built(env_file: Path, host: dict[str, str]) -> None:
    pinned = "ghcr.io/voice-stack/voice-stack-gateway:0.2.0@sha256:" + "ab" * 32
    env = host | {"FAKE_BUILDX": "", "GATEWAY_IMAGE": pinned}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 0, result.stderr
    result = stack(env_file, "check", extra_env=host | {"FAKE_BUILDX": ""})
    assert result.returncode == 2  # the gateway is built from this checkout by default
    assert "install docker-buildx-plugin 0.17.0 or newer" in result.stderr


def test_gpu_check_can_be_skipped_for_cdi_setups(env_file: Path, host: dict[str, str]) -> None:
    env = host | {"FAKE_RUNTIMES": "{}", "VOICE_STACK_SKIP_GPU_CHECK": "1"}
    assert stack(env_file, "check", extra_env=env).returncode == 0


def test_old_compose_is_refused(env_file: Path, host: dict[str, str], tmp_path: Path) -> None:
    old = stand_in(tmp_path / "compose", "compose", OLD_COMPOSE.replace("{real}", str(COMPOSE_BIN)))
    env = host | {"COMPOSE_BIN": str(old), "FAKE_COMPOSE_VERSION": "2.20.2"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert "Docker Compose 2.20.2 is older than 2.24.4: upgrade docker-compose-plugin" in (
        result.stderr
    )


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "name", ["LLM_PROXY_PORT", "ASR_PORT", "TTS_PORT", "GATEWAY_PORT", "GATEWAY_HTTP_PORT"]
)
def test_a_taken_port_is_named(
    env_file: Path, host: dict[str, str], busy_port: int, name: str
) -> None:
    """Every port the selected services publish (docs/deploy.md's prerequisites)."""
    env = host | {name: str(busy_port), "COMPOSE_PROFILES": "speech,gateway"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert f"port {busy_port} ({name}) is in use by another program" in result.stderr


def test_only_the_selected_services_ports_are_checked(
    env_file: Path, host: dict[str, str], busy_port: int
) -> None:
    env = host | {"ASR_PORT": str(busy_port), "COMPOSE_PROFILES": "gateway"}
    assert stack(env_file, "check", extra_env=env).returncode == 0


# A stand-in `ss` that sees a listener on FAKE_LISTENING only (11434 may be taken here for real).
STAND_IN_SS = """#!/usr/bin/env bash
[[ "$*" != *":${FAKE_LISTENING:-none} )"* ]] || echo "LISTEN 0 4096 0.0.0.0:$FAKE_LISTENING *"
"""


def test_a_taken_11434_names_ollama_and_the_setting(env_file: Path, host: dict[str, str]) -> None:
    stand_in(Path(host["PATH"].split(":")[0]), "ss", STAND_IN_SS)
    env = host | {"LLM_PROXY_PORT": "11434", "FAKE_LISTENING": "11434"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert "port 11434 (LLM_PROXY_PORT) is in use by another program: 11434 is Ollama's" in (
        result.stderr
    )
    assert "or set LLM_PROXY_PORT in" in result.stderr


def test_the_stacks_own_port_is_not_a_conflict(
    env_file: Path, host: dict[str, str], busy_port: int
) -> None:
    """After `up`, the proxy's own container holds its port: check must still pass."""
    env = host | {"LLM_PROXY_PORT": str(busy_port), "FAKE_PS": "0123456789ab"}
    assert stack(env_file, "check", extra_env=env).returncode == 0
    asked = docker_calls(host, "ps --filter ")
    assert "label=com.docker.compose.service=llm-auth" in asked[0]


def test_up_checks_the_host_before_compose_runs(env_file: Path, host: dict[str, str]) -> None:
    result = stack(env_file, "up", "-d", extra_env=host | {"FAKE_ENGINE": "20.10.24"})
    assert result.returncode == 2
    assert "older than 25.0.0" in result.stderr


DENIED = (
    "permission denied while trying to connect to the Docker daemon socket at "
    'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.47/version": '
    "dial unix /var/run/docker.sock: connect: permission denied"
)


@pytest.mark.parametrize(
    ("fake", "message"),
    [
        ({}, "the Docker engine is not running (Cannot connect to the Docker daemon at"),
        ({}, "start it, 'sudo systemctl start docker'"),
        ({"FAKE_ENGINE_ERROR": DENIED}, f"no permission to reach the Docker engine ({DENIED})"),
        ({"FAKE_ENGINE_ERROR": DENIED}, "'sudo usermod -aG docker $USER', then log out and in"),
        ({"DOCKER_BIN": "/nonexistent/docker"}, "install Docker Engine"),
    ],
    ids=["not running", "start it", "permission denied", "docker group", "no docker"],
)
def test_without_an_engine_check_fails_saying_what_to_do(
    env_file: Path, host: dict[str, str], fake: dict[str, str], message: str
) -> None:
    """Not a pass with every host and image check skipped: the usual cause is a user outside
    the docker group."""
    result = stack(env_file, "check", extra_env=host | {"FAKE_ENGINE": ""} | fake)
    assert result.returncode == 2
    assert message in result.stderr
    assert "./stack config --quiet validates the files alone" in result.stderr
    assert docker_calls(host, "manifest inspect ") == []


def test_a_tag_only_pin_is_said(env_file: Path, host: dict[str, str]) -> None:
    """The CPU llama.cpp and Kokoro cu128 variants are pinned by tag only (stack-gpu.sh)."""
    image = "ghcr.io/ggml-org/llama.cpp:server-b11347"
    env = host | {"LLM_IMAGE": image, "LLM_AUTH_IMAGE": "nginx:1.30.5-alpine"}
    result = stack(env_file, "images", extra_env=env | {"COMPOSE_PROFILES": ""})
    assert result.returncode == 0, result.stderr
    assert f"{image} (llm) is pinned by tag only, not by digest" in result.stderr
    assert "to pin as LLM_AUTH_IMAGE=nginx:1.30.5-alpine@sha256:<digest>" in result.stderr


# A Compose that stops and lists nothing (no engine here) but still renders the project the
# command would act on, so a setting that leaves it unrenderable fails here too.
INSPECTING_COMPOSE = """#!/usr/bin/env bash
args=()
for arg in "$@"; do
  case "$arg" in
    down | ps | logs) echo "$*" >>"$FAKE_DOCKER_LOG.compose"
      exec "{real}" "${args[@]}" config --quiet ;;
  esac
  args+=("$arg")
done
exec "{real}" "$@"
"""


def inspecting_compose(host: dict[str, str]) -> str:
    directory = Path(host["FAKE_DOCKER_LOG"]).parent / "inspecting-compose"
    return str(
        stand_in(directory, "compose", INSPECTING_COMPOSE.replace("{real}", str(COMPOSE_BIN)))
    )


@pytest.mark.parametrize("command", [["down"], ["ps"], ["logs", "llm"], ["purge"]], ids=str)
def test_a_refused_setting_does_not_keep_a_stack_from_stopping(
    env_file: Path, host: dict[str, str], command: list[str]
) -> None:
    env = host | {"LLM_RESERVED_SLOTS": "0,1,2,3", "COMPOSE_BIN": inspecting_compose(host)}
    result = stack(env_file, *command, extra_env=env)
    assert result.returncode == 0, result.stderr
    assert "set LLM_PARALLEL=5 (and LLM_CTX_PER_SLOT to fit) or reserve fewer slots" in (
        result.stderr
    )
    assert "stack: warning: ./stack up would refuse" in result.stderr
    assert compose_ran(host, "down" if command == ["purge"] else command[0])
    result = stack(env_file, "up", "-d", extra_env=env)
    assert result.returncode == 2
    assert "reserves every slot of LLM_PARALLEL=4" in result.stderr
    assert not compose_ran(host, "up")


@pytest.mark.parametrize(
    ("flags", "said"),
    [([], "kept the named volumes"), (["-v"], "removed the named volumes"),
     (["--volumes"], "removed the named volumes"), (["--rmi", "all"], "removed the images")],
    ids=str,
)  # fmt: skip
def test_down_says_what_its_flags_removed(
    env_file: Path, host: dict[str, str], flags: list[str], said: str
) -> None:
    env = host | {"COMPOSE_BIN": inspecting_compose(host)}
    result = stack(env_file, "down", *flags, extra_env=env)
    assert result.returncode == 0, result.stderr
    assert said in result.stderr
    assert "./stack purge removes all but .env" in result.stderr


def test_purge_removes_the_images_built_here(env_file: Path, host: dict[str, str]) -> None:
    """Compose's `down --rmi local` skips a service with an image: key (all of ours) in some
    versions: the images built here that are on this host are removed by name."""
    here = ["voice-stack-gateway:local", "voice-stack-llm:local"]
    env = host | {"COMPOSE_BIN": inspecting_compose(host), "FAKE_LOCAL": " ".join(here)}
    result = stack(env_file, "purge", extra_env=env)
    assert result.returncode == 0, result.stderr
    assert len(docker_calls(host, "image inspect ")) == 4  # build/*.yaml, whatever .env says
    assert docker_calls(host, "image rm ") == here
    assert f"volumes and the images built here ({' '.join(here)})" in result.stderr
    result = stack(env_file, "purge", extra_env=env | {"FAKE_LOCAL": ""})
    assert "(no image built here was on this host)" in result.stderr
    assert docker_calls(host, "image rm ") == here  # nothing more asked


def test_a_missing_compose_plugin_is_named_before_compose_reads_the_files(
    env_file: Path, host: dict[str, str], tmp_path: Path
) -> None:
    """`docker compose` without the plugin: the friendly line, not Docker's raw error."""
    no_plugin = (
        "#!/usr/bin/env bash\necho \"docker: 'compose' is not a docker command.\" >&2\nexit 1\n"
    )
    missing = stand_in(tmp_path / "no-compose", "compose", no_plugin)
    result = stack(env_file, "check", extra_env=host | {"COMPOSE_BIN": str(missing)})
    assert result.returncode == 2
    assert "no Docker Compose v2" in result.stderr
    assert "install the docker-compose-plugin package" in result.stderr
    assert "is not a docker command" not in result.stderr
