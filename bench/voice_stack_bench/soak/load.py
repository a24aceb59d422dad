"""The load the soak drives: two satellites speaking conversations through HA's
`assist_pipeline/run` and three browser-like clients chatting on the proxy's general key, each
request recorded with the error its user saw, to be judged against the fault windows."""

from __future__ import annotations

import asyncio

from voice_stack_dev.assist import AssistError, run_utterance
from voice_stack_dev.demo.services import Role
from voice_stack_dev.demo.turns import clear_tts_cache
from voice_stack_dev.ha_client import HomeAssistantApiError

from ..browser_chats import browser_messages, stream, title_task
from ..e2e.phases import BROWSER_PARAGRAPHS, BROWSER_TITLE_WORDS
from ..e2e.turns import QUESTIONS as E2E_QUESTIONS
from ..e2e.turns import Utterance
from .state import Request, Soak, log, pause

TURN_LIMIT_S = 60.0  # HA's pipeline timeout for one run
HANG_S = TURN_LIMIT_S + 30.0  # a request still open after this is a hang
BROWSER_TIMEOUT_S = 60.0
QUESTIONS = E2E_QUESTIONS[:6]


async def satellite(soak: Soak, n: int, speech: dict[str, Utterance], gap: float) -> None:
    """Conversations (a question, then its follow-up) until the run ends, one every `gap` s."""
    k = n  # the two satellites start on different questions
    while not soak.done.is_set():
        question, follow_up = QUESTIONS[k % len(QUESTIONS)]
        k += 1
        conversation: str | None = None
        for kind, text in (("new", question), ("follow_up", follow_up)):
            if soak.done.is_set():
                return
            conversation = await _turn(soak, n, kind, speech[text], conversation)
            await pause(soak, gap)
            if conversation is None:
                break  # no conversation to follow up


async def _turn(
    soak: Soak, n: int, kind: str, utterance: Utterance, conversation: str | None
) -> str | None:
    start = soak.now()
    request = Request(f"satellite-{n}", kind, start, start, ok=False)
    soak.requests.append(request)
    try:
        ha = soak.ha
        if ha is None:  # HA restarting: the satellite cannot reach it
            request.error = "Home Assistant: restarting, no connection"
            return None
        async with asyncio.timeout(HANG_S):
            await clear_tts_cache(ha)
            run = await run_utterance(
                ha,
                soak.pipeline_id,
                utterance.pcm,
                conversation_id=conversation,
                limit_s=TURN_LIMIT_S,
            )
        if run.reply_type == "error":
            request.error = f"agent: {run.reply}"
        elif run.timings.to_first_audio_ms is None:
            request.error = "no reply audio arrived"
        else:
            request.ok = True
            request.first_audio_ms = round(run.timings.to_first_audio_ms, 1)
        return run.conversation_id if request.ok else None
    except TimeoutError:
        request.hang, request.error = True, f"no answer within {HANG_S:.0f} s"
    except AssistError as err:
        request.error = f"pipeline {err}"
    except (HomeAssistantApiError, OSError) as err:
        request.error = f"Home Assistant: {err}"
    finally:
        request.end = soak.now()
        if request.error:
            log(f"satellite-{n} {kind}: {request.error}")
    return None


async def browsers(soak: Soak, gap: float) -> None:
    """Each round: every client's chat, then its title request, on the current general key."""
    turn = 0
    while not soak.done.is_set():
        for client in range(3):
            for kind, messages in (
                ("chat", browser_messages(client, turn, BROWSER_PARAGRAPHS)),
                ("title", title_task(client, turn, BROWSER_TITLE_WORDS)),
            ):
                await asyncio.to_thread(_browser_request, soak, client, kind, messages)
        turn += 1
        await pause(soak, gap)


def _browser_request(soak: Soak, client: int, kind: str, messages: list[dict[str, str]]) -> None:
    start = soak.now()
    request = Request(f"browser-{client}", kind, start, start, ok=False)
    soak.requests.append(request)
    headers = {"Authorization": f"Bearer {soak.general_key}"}
    try:
        result = stream(soak.servers.url(Role.PROXY), headers, {"messages": messages},
                        timeout=BROWSER_TIMEOUT_S)  # fmt: skip
        request.ok, request.slot = True, result.slot
    except TimeoutError:
        request.hang, request.error = True, f"no answer within {BROWSER_TIMEOUT_S:.0f} s"
    except (OSError, RuntimeError, ValueError) as err:
        request.error = f"{type(err).__name__}: {err}"
    finally:
        request.end = soak.now()
