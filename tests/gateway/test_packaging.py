"""Packaging: the image (gateway/Dockerfile) is reproducible and never shadows the user's
settings; `pip install ./gateway` works on the host's Python 3.11 and leaves the tree as it was."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.info import Describe
from wyoming.tts import Synthesize

from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.paths import REPO, venv_bin
from voice_stack_dev.procs import Service, free_port
from voice_stack_gateway.flags import FLAGS

from .conftest import Client, audio_of

GATEWAY = REPO / "gateway"
HOST_VENV = "gw-host"  # made by scripts/provision-gateway-host


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (GATEWAY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out: list[tuple[str, str]] = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def runtime_closure() -> dict[str, str]:
    """Every distribution the gateway (as gateway/pyproject.toml declares it) needs at run time
    on this Python, with the version installed here."""
    project = tomllib.loads((GATEWAY / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    todo: list[str] = list(project["dependencies"])
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key not in found:
            found[key] = metadata.version(req.name)
            todo += metadata.requires(req.name) or []
    return found


def test_image_sets_no_gateway_variables() -> None:
    """An ENV for any setting would win over a drop-in user's variable (GATEWAY_URI is read
    before WYOMING_URI), so the image leaves them all to the built-in defaults."""
    names = {name for flag in FLAGS for name in flag.env}
    env_args = " ".join(args for word, args in dockerfile_instructions() if word in ("ENV", "ARG"))
    set_here = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", env_args))
    assert set_here, "expected at least PYTHONUNBUFFERED"
    assert not set_here & names


def test_image_is_pinned() -> None:
    instructions = dockerfile_instructions()
    bases = [args.split()[0] for word, args in instructions if word == "FROM"]
    assert bases
    for base in bases:  # an exact Python release and Debian release, not a moving tag
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", base), base
    lock = GATEWAY / "requirements.lock"
    assert any(word == "COPY" and "requirements.lock" in args for word, args in instructions)
    runs = [args for word, args in instructions if word == "RUN" and re.search(r"\bpip\b", args)]
    installs = [r for r in runs if re.search(r"\bpip (install|wheel|download)\b", r)]
    assert installs
    for run in installs:  # resolved under the lock, or only from wheels built under it
        assert re.search(r"(--constraint|-c) requirements\.lock\b", run) or "--no-index" in run, run
    pins: dict[str, str] = {}
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
            assert match, f"not an exact pin: {raw!r}"
            pins[canonicalize_name(match.group(1))] = match.group(2)
    # every runtime dependency, transitive ones included, at the version this venv tests
    assert pins == runtime_closure()


def test_dependencies_are_pinned_for_every_python() -> None:
    project = tomllib.loads((GATEWAY / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    for raw in project["dependencies"]:
        req = Requirement(raw)
        assert str(req.specifier).startswith("=="), raw
    audioop = next(Requirement(r) for r in project["dependencies"] if r.startswith("audioop"))
    assert audioop.marker is not None
    assert not audioop.marker.evaluate({"python_version": "3.12"})  # the stdlib's until 3.12
    assert audioop.marker.evaluate({"python_version": "3.13"})


def host_python() -> Path:
    python = venv_bin(HOST_VENV, "python")
    if not python.exists():
        pytest.skip("no host-Python install of the gateway: run scripts/provision-gateway-host")
    return python


def test_pip_install_leaves_the_tree_as_it_was(tmp_path: Path) -> None:
    """pip builds in the source folder itself: the build backend must write nothing there."""
    python = host_python()
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "gateway"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tree = tmp_path / "tree"
    for name in tracked:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tree / name)
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"),
         str(tree / "gateway")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    assert (tmp_path / "site" / "voice_stack_gateway" / "stt" / "early.py").exists()


@pytest.fixture(scope="module")
def host_gateway(speech_server: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The pip-installed gateway on the host's Python (not this tree: no PYTHONPATH); its port."""
    python = host_python()
    code = "import sys, voice_stack_gateway as g; print(sys.version_info >= (3, 11), g.__file__)"
    where = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, env={}
    ).stdout.split()
    assert where[0] == "True"
    assert "/site-packages/" in where[1]
    port = free_port()
    log = tmp_path_factory.mktemp("gw-host") / "gateway.log"
    service = start_gateway(
        speech_server.url, log, port=port, venv=HOST_VENV, env={"PYTHONPATH": ""}
    )
    yield port
    service.stop()


async def test_host_python_install_serves_describe_tts_and_stt(host_gateway: int) -> None:
    async with Client(host_gateway) as c:
        await c.send(Describe().event())
        info = (await c.read_until("info"))[-1]
        await c.send(Synthesize(text="Turn on the kitchen light.").event())
        events = await c.read_until("audio-stop")
    assert info.data["tts"][0]["voices"][0]["name"] == "joe"
    pcm = audio_of(events)
    rate = events[0].data["rate"]
    assert len(pcm) > rate  # over half a second of speech
    async with Client(host_gateway) as c:
        await c.send(
            AudioStart(rate, 2, 1).event(), AudioChunk(rate, 2, 1, pcm).event(), AudioStop().event()
        )
        transcript = (await c.read_until("transcript"))[-1]
    assert transcript.type == "transcript"
    assert "kitchen light" in transcript.data["text"].lower()
