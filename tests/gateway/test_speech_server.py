"""voice_stack_dev.speech_server: the real piper + faster-whisper server the suites run against."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import aiohttp

from voice_stack_dev.paths import REPO, venv_bin
from voice_stack_dev.procs import Service
from voice_stack_dev.speech_server import synthesis_pieces

TEXT = "This is the first sentence. Here is a second one. And a third follows."


async def _speak(session: aiohttp.ClientSession, url: str) -> int:
    body = {"model": "piper-joe", "voice": "joe", "input": TEXT, "response_format": "pcm"}
    async with session.post(f"{url}/v1/audio/speech", json=body) as resp:
        assert resp.status == 200
        return len(await resp.read())


async def test_more_concurrent_syntheses_than_worker_threads_all_finish(
    speech_server: Service,
) -> None:
    # Two gateway sessions fetch four sentences ahead each: eight requests at once, more than
    # the server's six executor threads (which a lock held across sentences once starved).
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        sizes = await asyncio.gather(*(_speak(session, speech_server.url) for _ in range(8)))
    assert len(set(sizes)) == 1  # the same text gives the same audio, whoever waited
    assert sizes[0] > 24000 * 2  # over a second of 24 kHz audio


def test_long_text_is_synthesized_in_bounded_pieces() -> None:
    # piper's arena keeps the peak of the longest piece it was given: a run-on answer is cut
    words = [f"word{i}" for i in range(70)]
    words[24] += ","  # a clause mark late in the first window is where it cuts
    pieces = synthesis_pieces(" ".join(words))
    assert [len(p.split()) for p in pieces] == [25, 30, 15]
    assert " ".join(pieces).split() == words  # nothing lost or reordered
    assert max(len(p.split()) for p in synthesis_pieces(" ".join(words[:30]) + ".")) == 30


def test_short_text_is_left_as_it_is() -> None:
    assert synthesis_pieces("  Turn on the light.  ") == ["  Turn on the light.  "]


async def test_a_run_on_sentence_is_spoken_whole(speech_server: Service) -> None:
    run_on = " ".join(["the kitchen light is on and the hall light is off"] * 8) + "."
    body = {"model": "piper-joe", "voice": "joe", "input": run_on, "response_format": "pcm"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
        session.post(f"{speech_server.url}/v1/audio/speech", json=body) as resp,
    ):
        assert resp.status == 200
        audio = await resp.read()
    # 88 words at piper's pace (about 5 words a second) are some 18 s of 24 kHz audio
    assert len(audio) > 15 * 24000 * 2


SPY = """
import json
from voice_stack_dev.speech_server import Engines
engines = Engines(1)
session = engines.voice.session
seen = []


class Spy:
    def run(self, names, feed, options):
        seen.append(options.get_run_config_entry("memory.enable_memory_arena_shrinkage"))
        return real.run(names, feed, options)


real, session._session = session._session, Spy()
list(engines.sentences("Turn on the light. The hall is dark.", 1.0))
print(json.dumps(seen))
"""


def test_every_synthesis_gives_the_arena_back() -> None:
    # the arena otherwise keeps the peak of the longest piece so far: RSS ratchets up for hours
    done = subprocess.run(
        [str(venv_bin("speech", "python")), "-c", SPY], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "dev")}, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout.splitlines()[-1]) == ["cpu:0", "cpu:0"]
