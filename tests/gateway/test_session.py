"""session.py: the job queue that keeps a connection's answers in order."""

from __future__ import annotations

import asyncio

import pytest
from wyoming.event import Event

from voice_stack_gateway.errors import GatewayError
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.session import Jobs


class Recorder:
    """A sink that keeps what it was given."""

    def __init__(self) -> None:
        self.closed = False
        self.errors: list[tuple[str, Kind]] = []

    async def send(self, *events: Event | bytes) -> None:
        raise ConnectionResetError("client gone")

    async def send_error(self, err: GatewayError, kind: Kind) -> None:
        self.errors.append((err.code, kind))


async def test_jobs_run_one_at_a_time_and_report_failures(caplog: pytest.LogCaptureFixture) -> None:
    sink = Recorder()
    jobs = Jobs(sink)
    order: list[str] = []
    release = asyncio.Event()

    async def first() -> None:
        await release.wait()
        order.append("first")

    async def failing() -> None:
        raise GatewayError("backend-error", "nope")

    async def broken() -> None:
        raise LookupError("a bug")

    async def writing() -> None:
        await sink.send(b"")

    await jobs.run(Kind.TTS, first())
    assert jobs.busy
    waiter = asyncio.create_task(jobs.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    release.set()
    await waiter
    assert order == ["first"]
    for coro in (failing(), broken(), writing()):
        await jobs.run(Kind.STT, coro)
        await jobs.wait()
    assert sink.errors == [("backend-error", Kind.STT), ("internal-error", Kind.STT)]
    assert "Unexpected failure in stt" in caplog.text
    await jobs.run(Kind.STT, asyncio.sleep(3600))
    await jobs.cancel()
    assert not jobs.busy


async def test_a_job_starts_only_after_the_one_before() -> None:
    """A second request while the first is answered waits: nothing is orphaned or interleaved."""
    jobs = Jobs(Recorder())
    release = asyncio.Event()
    order: list[str] = []

    async def job(name: str, gate: asyncio.Event | None = None) -> None:
        order.append(f"{name} start")
        if gate is not None:
            await gate.wait()
        order.append(f"{name} end")

    await jobs.run(Kind.TTS, job("tts", release))
    second = asyncio.create_task(jobs.run(Kind.STT, job("stt")))
    await asyncio.sleep(0)
    assert not second.done()
    release.set()
    await second
    await jobs.wait()
    assert order == ["tts start", "tts end", "stt start", "stt end"]


async def test_a_job_started_while_a_request_waits_is_waited_for_too() -> None:
    """The end of a turn may start a job (the early transcript's answer) while a request waits
    for the job before it: the request then waits for that one as well, in order."""
    order: list[str] = []

    async def job(name: str, gate: asyncio.Event | None = None) -> None:
        order.append(f"{name} start")
        if gate is not None:
            await gate.wait()
        order.append(f"{name} end")

    async def until_done(task: asyncio.Task[None]) -> None:
        await asyncio.wait({task})
        if not started:  # what the end-of-turn watcher may do meanwhile
            started.append(True)
            jobs.start(Kind.STT, job("early answer"))

    started: list[bool] = []
    jobs = Jobs(Recorder(), until_done)
    release = asyncio.Event()
    await jobs.run(Kind.TTS, job("tts", release))
    second = asyncio.create_task(jobs.run(Kind.TTS, job("next tts")))
    await asyncio.sleep(0)
    release.set()
    await second
    await jobs.wait()
    assert order == [
        "tts start", "tts end", "early answer start", "early answer end", "next tts start",
        "next tts end",
    ]  # fmt: skip
