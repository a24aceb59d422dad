"""heap.py: free heap pages go back to the OS when the gateway falls idle."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from wyoming.info import Describe

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.heap import HeapTrimmer, glibc_trim

from .conftest import Clients, GatewayFactory


def test_trims_at_most_once_per_interval() -> None:
    calls: list[int] = []
    now = [100.0]

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    trimmer = HeapTrimmer(trim, interval_s=30.0, clock=lambda: now[0])
    trimmer.idle()
    now[0] += 29.0
    trimmer.idle()
    now[0] += 1.0
    trimmer.idle()
    assert calls == [0, 0]
    assert trimmer.trims == 2


def test_without_malloc_trim_nothing_happens() -> None:
    trimmer = HeapTrimmer(None)
    trimmer.idle()
    assert trimmer.trims == 0


def test_glibc_gives_a_fragmented_heap_back() -> None:
    # Blocks of a few kB come from the heap, not their own mappings; keeping every seventh
    # leaves most of it free but unreturnable until it is trimmed.
    script = textwrap.dedent("""
        from voice_stack_gateway.heap import glibc_trim

        def rss_kb():
            with open("/proc/self/status") as status:
                return next(int(l.split()[1]) for l in status if l.startswith("VmRSS"))

        blocks = [bytes(4000) for _ in range(5000)]
        kept = blocks[::7]
        del blocks
        before = rss_kb()
        glibc_trim()(0)
        print(before - rss_kb())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert glibc_trim() is not None  # this suite runs on glibc
    assert int(out.stdout) > 10_000  # of the ~20 MB freed, most goes back


async def test_the_gateway_trims_when_its_last_connection_closes(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    before = gw.heap.trims
    async with client(gw) as c:
        await c.send(Describe().event())
        assert (await c.read_until("info"))[-1].type == "info"
    async with asyncio.timeout(10):
        while gw.connections:  # noqa: ASYNC110 (no event marks a connection's end)
            await asyncio.sleep(0.01)
    assert gw.heap.trims == before + 1
