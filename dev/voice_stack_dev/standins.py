"""Images that stand in for the upstream ones the compose bundle pulls (no registry is reachable
here), built on this machine from Debian packages (dev/standins/*.Dockerfile), and the gateway's
own Dockerfile's Python base (Compose builds gateway/Dockerfile itself, unchanged).

Every image is tagged with a hash of what it is built from, so a second run finds it in the
engine's data root and builds nothing.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .docker_engine import DOCKER, DockerEngine, run
from .paths import CACHE, REPO, venv_bin
from .procs import ServiceError

STANDINS = REPO / "dev" / "standins"
SID_ROOT = CACHE / "py314root"
SPEECH_REQUIREMENTS = REPO / "requirements" / "speech.txt"
BUILD_TIMEOUT = 1200.0
HOST_CERTS = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Images:
    """The image each compose service runs in the tests."""

    llm: str
    llm_auth: str
    speech: str


def _digest(parts: Iterable[bytes]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(hashlib.sha256(part).digest())
    return sha.hexdigest()[:16]


def _files(*paths: Path) -> list[bytes]:
    found: list[Path] = []
    for path in paths:
        found += (
            sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if path.is_dir()
            else [path]
        )
    return [str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes() for p in found]


def _exists(engine: DockerEngine, tag: str) -> bool:
    return engine.docker("image", "inspect", tag, check=False).returncode == 0


def _base(engine: DockerEngine) -> str:
    """The project's debootstrapped sid root (python3.14, llama.cpp-tools) as an image."""
    tag = f"voice-stack-standin/base:{_digest([(SID_ROOT / 'var/lib/dpkg/status').read_bytes()])}"
    if _exists(engine, tag):
        return tag
    tar = subprocess.Popen(
        ["tar", "-C", str(SID_ROOT), "-c", "--exclude=./tmp/*", "--exclude=./proc/*",
         "--exclude=./sys/*", "--exclude=./dev/*", "--exclude=./var/cache/apt/*", "."],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        imported = subprocess.run(
            [str(DOCKER / "root/usr/bin/docker"), "import", "-", tag],
            stdin=tar.stdout,
            env=engine.env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    finally:
        if tar.stdout:
            tar.stdout.close()
        tar.wait(60)
    if imported.returncode != 0 or tar.returncode != 0:
        raise ServiceError(f"docker import of {SID_ROOT} failed: {imported.stderr}")
    return tag


def _build(
    engine: DockerEngine,
    name: str,
    dockerfile: Path,
    context: Path,
    inputs: list[bytes],
    *,
    base: str | None = None,
    tag: str | None = None,
    contexts: dict[str, Path] | None = None,
) -> str:
    tag = tag or f"voice-stack-standin/{name}:{_digest([*inputs, (base or '').encode()])}"
    if _exists(engine, tag):
        return tag
    argv = ["build", "--network", "host", "--file", str(dockerfile), "--tag", tag]
    if base:
        argv += ["--build-arg", f"BASE={base}"]
    for key, path in (contexts or {}).items():
        argv += ["--build-context", f"{key}={path}"]
    engine.docker(*argv, str(context), timeout=BUILD_TIMEOUT)
    return tag


def _speech_wheels() -> Path:
    """Wheels of the speech server's requirements for the image's Python (the host's 3.14)."""
    stamp_value = _digest([SPEECH_REQUIREMENTS.read_bytes()])
    wheels = DOCKER / "wheels" / "speech"
    stamp = wheels / ".stamp"
    if stamp.is_file() and stamp.read_text() == stamp_value:
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    run([str(venv_bin("speech", "python")), "-m", "pip", "wheel", "-q", "--wheel-dir",
         str(wheels), "-r", str(SPEECH_REQUIREMENTS)], {}, timeout=BUILD_TIMEOUT)  # fmt: skip
    stamp.write_text(stamp_value)
    return wheels


def gateway_base_tag() -> str:
    """The image gateway/Dockerfile starts FROM (a stand-in of it is built under that name)."""
    text = (REPO / "gateway" / "Dockerfile").read_text()
    match = re.search(r"^FROM\s+(\S+)", text, re.MULTILINE)
    if match is None:
        raise ServiceError("gateway/Dockerfile has no FROM line")
    return match.group(1)


def build_images(engine: DockerEngine) -> Images:
    """Build (or find) every image the compose tests run."""
    base = _base(engine)
    python = _build(
        engine, "python", STANDINS / "python.Dockerfile", STANDINS,
        [*_files(STANDINS / "python.Dockerfile"), HOST_CERTS.read_bytes()], base=base,
        contexts={"hostcerts": HOST_CERTS.parent},
    )  # fmt: skip
    # gateway/Dockerfile is built by Compose itself, unchanged, FROM its usual base: the
    # stand-in goes under that base's name.
    engine.docker("tag", python, gateway_base_tag())
    llm = _build(engine, "llm", STANDINS / "llm.Dockerfile", STANDINS,
                 _files(STANDINS / "llm.Dockerfile"), base=base)  # fmt: skip
    auth_files = [STANDINS / "llm-auth.Dockerfile", STANDINS / "nginx-entrypoint.sh"]
    llm_auth = _build(engine, "llm-auth", auth_files[0], STANDINS, _files(*auth_files), base=base)
    speech_files = [STANDINS / "speech.Dockerfile", STANDINS / "speech-start.sh",
                    SPEECH_REQUIREMENTS, REPO / "dev" / "voice_stack_dev"]  # fmt: skip
    speech = _build(
        engine, "speech", speech_files[0], STANDINS, _files(*speech_files), base=python,
        contexts={"wheels": _speech_wheels(), "harness": REPO / "dev" / "voice_stack_dev"},
    )  # fmt: skip
    return Images(llm=llm, llm_auth=llm_auth, speech=speech)
