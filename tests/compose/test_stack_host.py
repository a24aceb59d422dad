"""compose/stack's host and image checks (stack-host.sh), with stand-in docker programs on PATH
since no Docker engine runs here; compose itself is the real Compose v2 binary."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose.stack_helpers import (
    COMPOSE_BIN,
    OLD_COMPOSE,
    STAND_IN_DOCKER,
    stack,
    stand_in,
    write_env_file,
)

NVIDIA = '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}'
GOOD_HOST = {"FAKE_ENGINE": "28.2.2", "FAKE_BUILDX": "0.17.1", "FAKE_RUNTIMES": NVIDIA}


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return write_env_file(tmp_path / ".env")


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """The environment of a run with the stand-in docker first on PATH (its calls logged)."""
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "docker", STAND_IN_DOCKER)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DOCKER_LOG": str(tmp_path / "docker.log"),
        "LLM_PROXY_PORT": "0",  # a port nothing listens on, unless a test says otherwise
        "GATEWAY_PORT": "0",
        "GATEWAY_HTTP_PORT": "0",
        **GOOD_HOST,
    }


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
    inspected = docker_calls(host, "manifest inspect ")
    assert len(inspected) == 5
    assert any(image.startswith("ghcr.io/ggml-org/llama.cpp:server-cuda-b") for image in inspected)
    assert any(image.startswith("ghcr.io/voice-stack/voice-stack-gateway:") for image in inspected)


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
    assert f"not found in their registries (check the tag, or your access to it): {gone}" in (
        result.stderr
    )


def test_built_images_are_not_looked_up(
    env_file: Path, host: dict[str, str], tmp_path: Path
) -> None:
    env = host | {"COMPOSE_PROFILES": "gateway", "GATEWAY_BUILD_CONTEXT": str(tmp_path)}
    result = stack(env_file, "images", extra_env=env)
    assert result.returncode == 0, result.stderr
    assert not [i for i in docker_calls(host, "manifest inspect ") if "voice-stack-gateway" in i]


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
    result = stack(env_file, "check", extra_env=host | {"FAKE_BUILDX": ""})
    assert result.returncode == 0, result.stderr


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


@pytest.mark.parametrize("name", ["LLM_PROXY_PORT", "GATEWAY_HTTP_PORT"])
def test_a_taken_port_is_named(
    env_file: Path, host: dict[str, str], busy_port: int, name: str
) -> None:
    env = host | {name: str(busy_port), "COMPOSE_PROFILES": "gateway"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert f"port {busy_port} ({name}) is in use by another program" in result.stderr


def test_the_stacks_own_port_is_not_a_conflict(
    env_file: Path, host: dict[str, str], busy_port: int
) -> None:
    """After `up`, the proxy's own container holds its port: check must still pass."""
    own = f"0.0.0.0:{busy_port}->11434/tcp"
    env = host | {"LLM_PROXY_PORT": str(busy_port), "FAKE_PS": own}
    assert stack(env_file, "check", extra_env=env).returncode == 0


def test_up_checks_the_host_before_compose_runs(env_file: Path, host: dict[str, str]) -> None:
    result = stack(env_file, "up", "-d", extra_env=host | {"FAKE_ENGINE": "20.10.24"})
    assert result.returncode == 2
    assert "older than 25.0.0" in result.stderr


def test_without_an_engine_the_checks_are_skipped(env_file: Path, host: dict[str, str]) -> None:
    result = stack(env_file, "check", extra_env=host | {"FAKE_ENGINE": ""})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("host and image checks skipped") == 1
    assert docker_calls(host, "manifest inspect ") == []
