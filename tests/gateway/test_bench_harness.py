"""The gateway benchmark's own measuring parts, against the real synthetic backend and a real
gateway: a benchmark whose bookkeeping silently broke would report wrong figures."""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Iterator

import aiohttp
import pytest

from bench import gateway_bench as bench
from voice_stack_dev.paths import REPO
from voice_stack_dev.procs import Service, free_port

from .conftest import GatewayFactory


@pytest.fixture(scope="module")
def synthetic_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    service = Service(
        name="synthetic backend",
        port=port,
        log_path=tmp_path_factory.mktemp("bench") / "backend.log",
        argv=[sys.executable, str(REPO / "bench" / "synthetic_backend.py"), str(port)],
    ).start()
    yield f"{service.url}/v1"
    service.stop()


async def test_held_time_is_recorded_per_tagged_request(
    synthetic_backend: str, make_gateway: GatewayFactory
) -> None:
    gateway = await make_gateway(synthetic_backend)
    direct_texts, gateway_texts = bench.tagged("direct-1"), bench.tagged("ours-1")
    async with aiohttp.ClientSession() as session:
        barrier = asyncio.Barrier(8)
        direct = await asyncio.gather(
            *(bench.direct_tts(session, synthetic_backend, t, "pcm", barrier) for t in direct_texts)
        )
        held_direct = await bench.backend_held(session, synthetic_backend)
        barrier = asyncio.Barrier(8)
        pairs = await asyncio.gather(
            *(bench.wyoming_tts(gateway.port, t, barrier) for t in gateway_texts)
        )
        held_gateway = await bench.backend_held(session, synthetic_backend)
        assert await bench.backend_held(session, synthetic_backend) == {}  # read clears
        # the tag is neither spoken nor counted: as much audio as for the untagged text
        lengths = []
        for text in (bench.TEXT, direct_texts[0]):
            body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
            async with session.post(f"{synthetic_backend}/audio/speech", json=body) as resp:
                lengths.append(len(await resp.read()))
        await bench.backend_held(session, synthetic_backend)

    assert set(held_direct) == set(direct_texts)
    assert set(held_gateway) == set(gateway_texts)
    # the backend holds each request for its 150 ms first-byte delay, never less
    assert all(150 <= ms < 1000 for ms in [*held_direct.values(), *held_gateway.values()])
    assert all(event.type == "audio-chunk" for _ms, event in pairs)
    assert lengths[0] == lengths[1] == 100_800  # 6 words x 0.35 s x 24 kHz x 2 bytes
    transit = [d - held_direct[t] for d, t in zip(direct, direct_texts, strict=True)]
    assert 0 < statistics.median(transit) < 100


def test_block_p95_spread() -> None:
    values = [1.0] * 80 + [2.0] * 70 + [9.0] * 10 + [100.0] * 5  # a partial block is left out
    assert bench.block_p95(values, 80) == {"min": 1.0, "median": 5.0, "max": 9.0, "blocks": 2}


def test_tagged_texts_are_distinct() -> None:
    texts = bench.tagged("x-0")
    assert len(set(texts)) == 8
    assert all(t.startswith(bench.TEXT) for t in texts)
