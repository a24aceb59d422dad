"""Start, watch and stop real server processes on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from .paths import JEMALLOC

# Captured at import: pytest-socket (loaded by phcc) swaps socket.socket while tests run, but
# waiting for a subprocess to come up is the harness's business, not the test's.
_SOCKET = socket.socket


def jemalloc_env() -> dict[str, str]:
    """The environment that preloads jemalloc, as Home Assistant's container image runs `hass`
    (its run script sets LD_PRELOAD); empty if scripts/provision-jemalloc has not run."""
    return {"LD_PRELOAD": str(JEMALLOC)} if JEMALLOC.is_file() else {}


class ServiceError(RuntimeError):
    """A service failed to start; the message names it and points at its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with _SOCKET(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes] | None:
    """Status code and body of a plain GET, or None when nothing answers (HTTP/1.0, loopback)."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    request = f"GET /{path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n".encode()
    chunks: list[bytes] = []
    try:
        with _SOCKET(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect((host, int(port or 80)))
            sock.sendall(request)
            while chunk := sock.recv(65536):  # HTTP/1.0: the server closes after the body
                chunks.append(chunk)
    except OSError:
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    parts = head.decode("latin-1").split(" ", 2)
    return (int(parts[1]), body) if len(parts) > 1 and parts[1].isdigit() else None


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """Status code of a plain GET, or None when nothing answers (HTTP/1.0, loopback only)."""
    reply = http_get(url, timeout)
    return reply[0] if reply else None


def wait_tcp(port: int, timeout: float = 30.0) -> bool:
    """Wait until something accepts TCP connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _SOCKET(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


@dataclass
class Service:
    """One server process: started detached, logged to a file, stopped for sure."""

    name: str
    argv: Sequence[str]
    port: int
    log_path: Path
    health_path: str | None = "/health"
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    startup_timeout: float = 60.0
    stop_timeout: float = 10.0  # SIGTERM to SIGKILL
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Self:
        """Start the process and wait until its health URL answers 200 (or its port opens)."""
        if self.running:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            list(self.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            cwd=self.cwd,
            start_new_session=True,  # its own process group: stop() kills children too
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise ServiceError(
                    f"{self.name} exited with code {self.proc.returncode if self.proc else '?'}"
                    f" during startup; log: {self.log_path}\n{self.log_tail()}"
                )
            if self.health_path is None:
                if wait_tcp(self.port, timeout=0.2):
                    return
            elif http_status(self.url + self.health_path) == 200:
                return
            time.sleep(0.05)
        self.stop()
        raise ServiceError(
            f"{self.name} not ready after {self.startup_timeout:.0f} s; log: {self.log_path}\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the process group, escalating to SIGKILL (said in its log)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(self.stop_timeout)
            with self.log_path.open("a") as log:
                log.write(
                    f"[voice-stack] {self.name} ignored SIGTERM for {self.stop_timeout:g} s:"
                    " killed\n"
                )

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Usage:
    """What a process group holds, from /proc: resident memory and open descriptors."""

    pids: tuple[int, ...]
    rss_kb: int
    fds: int
    sockets: int


def _members(pgid: int) -> Iterator[tuple[Path, list[str]]]:
    """Each process of the group, with where its descriptors point (gone ones skipped)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command (which may hold spaces) end at its closing ")".
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) != pgid:
                continue
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError, IndexError, ValueError:
            continue  # gone meanwhile, or not ours to read
        yield entry, links


def _rss_kb(status: str) -> int | None:
    """VmRSS from a /proc/PID/status text (None where the kernel gives none: a zombie)."""
    return next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None
    )


def rss_mb(pid: int) -> float:
    """One process's resident memory in MB (NaN where the kernel gives none). Linux only."""
    kb = _rss_kb(Path(f"/proc/{pid}/status").read_text())
    return float("nan") if kb is None else round(kb / 1024, 1)


def group_usage(pgid: int) -> Usage | None:
    """Summed over every process in the group (a Service starts one: nginx's master and its
    workers, a server and its children); None when none is left. Linux only."""
    pids, rss, fds, sockets = [], 0, 0, 0
    for entry, links in _members(pgid):
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        pids.append(int(entry.name))
        rss += _rss_kb(status) or 0
        fds += len(links)
        sockets += sum(link.startswith("socket:") for link in links)
    return Usage(tuple(sorted(pids)), rss, fds, sockets) if pids else None


def tcp_peer_ports(pgid: int) -> dict[int, int]:
    """Established TCP connections of the process group, counted by the port they connect to
    (from /proc/net/tcp and tcp6: which of our servers a process holds sockets to). Linux only."""
    inodes = {
        link[8:-1] for _, links in _members(pgid) for link in links if link.startswith("socket:[")
    }
    peers: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # remote "ADDR:PORT" in hex, state 01 = ESTABLISHED, the socket's inode
                if fields[3] == "01" and fields[9] in inodes:
                    port = int(fields[2].rsplit(":", 1)[1], 16)
                    peers[port] = peers.get(port, 0) + 1
    return peers
