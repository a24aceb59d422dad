"""The proxy fixtures: every real-nginx test runs once per nginx build (bookworm's njs 0.7,
sid's njs 1.x with its njs engine and with QuickJS)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.compose.recording_upstream import RecordingUpstream
from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.nginx import BUILDS, NginxBuild, NginxProxy, start_proxy
from voice_stack_dev.procs import Service

PROXY_KEY = "test-proxy-key_0123456789"


@contextmanager
def running[S: Service](service: S) -> Iterator[S]:
    """A started service, stopped when the block ends."""
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session", params=BUILDS, ids=[build.name for build in BUILDS])
def nginx_build(request: pytest.FixtureRequest) -> NginxBuild:
    build: NginxBuild = request.param
    build.check()
    return build


@pytest.fixture(scope="session")
def llm_proxy(
    llama_text: LlamaServer, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    """The compose bundle's proxy (slot 0 reserved) in front of the session llama_text.

    General clients send ``llm_proxy.headers``, agents ``llm_proxy.agent_headers``; the proxy
    swaps in ``llama_text.api_key``.
    """
    assert llama_text.api_key, "the proxy needs llama-server's own key"
    with running(
        start_proxy(
            llama_text.url,
            PROXY_KEY,
            llama_text.api_key,
            total_slots=llama_text.n_parallel,
            reserved_slots=(0,),
            log_dir=service_logs,
            build=nginx_build,
        )
    ) as proxy:
        yield proxy


@pytest.fixture
def proxy_factory(
    service_logs: Path, nginx_build: NginxBuild
) -> Iterator[Callable[..., NginxProxy]]:
    """Start proxies (general key PROXY_KEY, this run's nginx build); stopped after the test."""
    started: list[NginxProxy] = []

    def factory(upstream_url: str, upstream_key: str, **kwargs: Any) -> NginxProxy:
        kwargs.setdefault("log_dir", service_logs)
        kwargs.setdefault("build", nginx_build)
        proxy = start_proxy(
            upstream_url, kwargs.pop("proxy_key", PROXY_KEY), upstream_key, **kwargs
        )
        started.append(proxy)
        return proxy

    yield factory
    for proxy in started:
        proxy.stop()


@pytest.fixture(scope="session")
def slots_llama(
    tmp_path_factory: pytest.TempPathFactory, service_logs: Path
) -> Iterator[LlamaServer]:
    """A llama-server that can save and restore slots (--slot-save-path)."""
    slot_files = tmp_path_factory.mktemp("slot-files")
    with running(
        start_llama(
            "tiny-text",
            ctx_per_slot=1024,
            log_dir=service_logs,
            extra_args=["--slot-save-path", str(slot_files)],
        )
    ) as server:
        yield server


@pytest.fixture(scope="session")
def recorder() -> Iterator[RecordingUpstream]:
    upstream = RecordingUpstream().start()
    try:
        yield upstream
    finally:
        upstream.stop()


RECORDED_UPSTREAM_KEY = "recorded-upstream-key_0123"


@pytest.fixture(scope="session")
def recorded_proxy(
    recorder: RecordingUpstream, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    """The same proxy in front of the recording upstream (what exactly it forwards)."""
    with running(
        start_proxy(
            recorder.url, PROXY_KEY, RECORDED_UPSTREAM_KEY, log_dir=service_logs, build=nginx_build
        )
    ) as proxy:
        yield proxy
