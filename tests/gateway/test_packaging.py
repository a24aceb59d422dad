"""The image (gateway/Dockerfile): reproducible, and it never shadows the user's settings."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from voice_stack_gateway.config import FLAGS

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"


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


def runtime_closure(name: str) -> dict[str, str]:
    """Every distribution `name` needs at run time on this platform, with its installed version."""
    found: dict[str, str] = {}
    todo = [name]
    while todo:
        for raw in metadata.requires(todo.pop()) or []:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = canonicalize_name(req.name)
            if key not in found:
                found[key] = metadata.version(req.name)
                todo.append(req.name)
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
    assert pins == runtime_closure("voice-stack-gateway")
