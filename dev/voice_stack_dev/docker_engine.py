"""A real Docker engine for the compose tests: Debian sid's dockerd (scripts/provision-docker) with
its own data root under .cache/docker, loopback only (no bridge, no iptables), stopped by PID.

Clients reach it through `DockerEngine.env`: DOCKER_HOST names its socket, DOCKER_CONFIG holds
the compose and buildx plugins, and its bin folders come first on PATH, so `docker`,
`docker compose` and `./stack` run exactly as on a user's host.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from .paths import CACHE
from .procs import ServiceError

DOCKER = CACHE / "docker"
ROOT = DOCKER / "root"
PLUGINS = ROOT / "usr" / "libexec" / "docker" / "cli-plugins"


def _run_dir() -> Path:
    """A short folder for the sockets (a unix socket path has at most 107 bytes), one per cache."""
    tag = hashlib.sha256(str(DOCKER).encode()).hexdigest()[:10]
    return Path("/run") / f"voice-stack-docker-{tag}"


@dataclass
class DockerEngine:
    """One dockerd process and the environment its clients need."""

    log_path: Path
    data_root: Path = DOCKER / "data"
    startup_timeout: float = 60.0
    run_dir: Path = field(default_factory=_run_dir)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def env(self) -> dict[str, str]:
        """What a docker client (docker, docker compose, ./stack) needs to reach this engine."""
        bins = f"{ROOT / 'usr' / 'bin'}:{ROOT / 'usr' / 'sbin'}"
        return {
            "DOCKER_HOST": f"unix://{self.socket}",
            "DOCKER_CONFIG": str(DOCKER / "config"),
            "PATH": f"{bins}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "DOCKER_BUILDKIT": "1",
        }

    def start(self) -> Self:
        if not (ROOT / "usr" / "sbin" / "dockerd").is_file():
            raise ServiceError("no dockerd under .cache/docker: run scripts/setup")
        self._link_plugins()
        self.data_root.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            str(ROOT / "usr" / "sbin" / "dockerd"),
            "--data-root", str(self.data_root),
            "--exec-root", str(self.run_dir / "exec"),
            "--pidfile", str(self.run_dir / "dockerd.pid"),
            "--host", f"unix://{self.socket}",
            # Loopback only: no bridge network, no NAT rules; containers use host networking.
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--userland-proxy=false",
            "--storage-driver", "overlay2",
            # Its own containerd namespaces, apart from any other engine on the machine.
            "--containerd-namespace", "voice-stack",
            "--containerd-plugins-namespace", "voice-stack-plugins",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,  # containerd and the shims in its group: stop() ends all
            )
        self._wait_ready()
        return self

    def _link_plugins(self) -> None:
        target = DOCKER / "config" / "cli-plugins"
        target.mkdir(parents=True, exist_ok=True)
        for plugin in PLUGINS.iterdir():
            link = target / plugin.name
            if not link.is_symlink() or link.readlink() != plugin:
                link.unlink(missing_ok=True)
                link.symlink_to(plugin)

    def _stop_leftover(self) -> None:
        """A dockerd of an earlier run that was killed before it could stop its own."""
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.run_dir / "dockerd.pid").read_text().strip())
            if Path(f"/proc/{pid}/exe").resolve() == ROOT / "usr" / "sbin" / "dockerd":
                os.kill(pid, signal.SIGTERM)
                _wait_gone(pid, 30.0)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise ServiceError(f"dockerd exited during startup; log: {self.log_path}")
            if (
                self.docker("version", "--format", "{{.Server.Version}}", check=False).returncode
                == 0
            ):
                return
            time.sleep(0.2)
        self.stop()
        raise ServiceError(f"dockerd not ready after {self.startup_timeout:.0f} s: {self.log_path}")

    def docker(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `docker ARGS` against this engine (a timeout on every call)."""
        return run([str(ROOT / "usr" / "bin" / "docker"), *args], self.env | dict(env or {}),
                   check=check, timeout=timeout, cwd=cwd)  # fmt: skip

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (dockerd stops its containers and containerd), then SIGKILL the group."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # containerd or a shim left behind
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        # dockerd leaves the bind mount of its host network namespace behind when it stops.
        for mount in (self.run_dir / "exec" / "netns").glob("*"):
            umount = ["umount", "-l", str(mount)]
            subprocess.run(umount, capture_output=True, timeout=30, check=False)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    check: bool = True,
    timeout: float = 120.0,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """A client command with the engine's environment; a failure names the command and output."""
    result = subprocess.run(
        list(argv),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and result.returncode != 0:
        raise ServiceError(
            f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
