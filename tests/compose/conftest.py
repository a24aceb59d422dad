"""The proxy fixtures: every real-nginx test runs once per nginx build (bookworm's njs 0.7,
sid's njs 1.x with its njs engine and with QuickJS)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose.recording_upstream import RecordingUpstream
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import BUILDS, NginxBuild, NginxProxy, start_proxy

PROXY_KEY = "test-proxy-key_0123456789"


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
    proxy = start_proxy(
        llama_text.url,
        PROXY_KEY,
        llama_text.api_key,
        total_slots=llama_text.n_parallel,
        reserved_slots=(0,),
        log_dir=service_logs,
        build=nginx_build,
    )
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def recorder() -> Iterator[RecordingUpstream]:
    upstream = RecordingUpstream().start()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="session")
def recorded_proxy(
    recorder: RecordingUpstream, service_logs: Path, nginx_build: NginxBuild
) -> Iterator[NginxProxy]:
    """The same proxy in front of the recording upstream (what exactly it forwards)."""
    proxy = start_proxy(
        recorder.url, PROXY_KEY, "recorded-upstream-key_0123", log_dir=service_logs,
        build=nginx_build,
    )  # fmt: skip
    try:
        yield proxy
    finally:
        proxy.stop()
