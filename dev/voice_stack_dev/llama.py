"""A real llama-server (Debian llama.cpp b11669, CPU) on loopback."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .paths import LLAMA_SERVER, model_path
from .procs import Service, free_port


def llama_argv(
    model: str,
    port: int,
    *,
    api_key: str | None,
    n_parallel: int = 4,
    ctx_per_slot: int = 2048,
    threads: int = 1,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line: explicit -np (unified KV off, so slot pinning works) and --metrics."""
    argv = [
        str(LLAMA_SERVER),
        "-m", str(model_path(model)),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-np", str(n_parallel),
        "-c", str(ctx_per_slot * n_parallel),
        "-t", str(threads),
        "--metrics",
        "--no-webui",
    ]  # fmt: skip
    if api_key:
        argv += ["--api-key", api_key]
    return argv + list(extra_args)


def start_llama(
    model: str = "tiny-text",
    *,
    api_key: str | None = "llama-server-key",
    n_parallel: int = 4,
    ctx_per_slot: int = 8192,
    threads: int = 1,
    extra_args: Sequence[str] = (),
    log_dir: Path | None = None,
    port: int | None = None,
    start: bool = True,
) -> LlamaServer:
    """Start llama-server and wait for /health 200 (the model is loaded)."""
    port = port or free_port()
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="llama-"))
    server = LlamaServer(
        name=f"llama-server ({model})",
        argv=llama_argv(
            model,
            port,
            api_key=api_key,
            n_parallel=n_parallel,
            ctx_per_slot=ctx_per_slot,
            threads=threads,
            extra_args=extra_args,
        ),
        port=port,
        log_path=log_dir / f"llama-{Path(model).stem}-{port}.log",  # a name or a .gguf path
        api_key=api_key,
        n_parallel=n_parallel,
        model=model,
    )
    return server.start() if start else server


@dataclass
class LlamaServer(Service):
    """A Service that also remembers its key, slot count and model."""

    api_key: str | None = None
    n_parallel: int = 4
    model: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
