"""The release workflow that publishes the gateway image: linted offline by actionlint (it cannot
run here), and tied to the versions compose.yaml and the gateway package name."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.compose.stack_helpers import COMPOSE_DIR
from voice_stack_dev.paths import REPO, venv_bin

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"


def gateway_version() -> str:
    project = tomllib.loads((REPO / "gateway" / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def release() -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load(RELEASE.read_text())
    return data


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv_bin("ha", "actionlint")), "-no-color", *map(str, files)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


def test_actionlint_passes_every_workflow() -> None:
    result = actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    broken = RELEASE.read_text().replace("${{ steps.meta.outputs.tags }}", "${{ steps.nope.tags }}")
    (tmp_path / "release.yml").write_text(broken)
    result = actionlint(tmp_path / "release.yml")
    assert result.returncode == 1
    assert "steps.nope" in result.stdout


def test_publishes_both_architectures_on_a_version_tag() -> None:
    workflow = release()
    assert workflow[True]["push"]["tags"] == ["v*.*.*"]  # YAML 1.1 reads the key "on" as True
    steps = workflow["jobs"]["gateway-image"]["steps"]
    build = next(step for step in steps if step.get("uses", "").startswith("docker/build-push"))
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["context"] == "gateway"
    assert build["with"]["push"] is True
    meta = next(step for step in steps if step.get("id") == "meta")
    assert meta["with"]["images"].endswith("/voice-stack-gateway")
    assert workflow["jobs"]["gateway-image"]["permissions"]["packages"] == "write"


def test_compose_builds_the_gateway_unless_a_published_one_is_named() -> None:
    """No release has to exist for a first `./stack up`: the default is the local build."""
    defaults = re.findall(
        r"\$\{GATEWAY_IMAGE:-([^}]+)\}", (COMPOSE_DIR / "compose.yaml").read_text()
    )
    assert defaults == ["voice-stack-gateway:local"]
    example = (COMPOSE_DIR / ".env.example").read_text()
    assert "\nGATEWAY_IMAGE=\n" in example
    assert "ghcr.io/voice-stack/voice-stack-gateway:<version>@sha256:<digest>" in example


def test_the_version_check_step_passes_now_and_fails_on_a_mismatch() -> None:
    steps = release()["jobs"]["gateway-image"]["steps"]
    script = next(step["run"] for step in steps if "version" in step.get("name", ""))
    for tag, expected in ((f"v{gateway_version()}", 0), ("v9.9.9", 1)):
        result = subprocess.run(
            ["bash", "-e", "-c", script], env={"TAG": tag, "PATH": "/usr/bin:/bin"}, cwd=REPO,
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert result.returncode == expected, result.stdout
