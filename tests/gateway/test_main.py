"""__main__.py: the entry point runs, freezes its startup heap, and stops."""

from __future__ import annotations

import asyncio
import gc

import pytest

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.__main__ import main


async def test_print_env_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        await main(["--print-env-table"])
    assert "TTS_OPENAI_URL" in capsys.readouterr().out


async def test_main_runs_and_stops(fake_speech: FakeSpeech) -> None:
    url = fake_speech.url
    task = asyncio.create_task(
        main(["--uri", "tcp://127.0.0.1:0", "--http-uri", "",
                  "--stt-openai-url", url, "--tts-openai-url", url])
    )  # fmt: skip
    # once started, the startup heap is kept out of the cyclic GC's passes (they stalled the loop)
    async with asyncio.timeout(10):
        while not (gc.get_freeze_count() or task.done()):  # noqa: ASYNC110
            await asyncio.sleep(0.025)
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
