"""The slot pool: each request on an idle slot of its agent's pool, its conversation's slot
first, waiting (never straying) when every pool slot is busy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from homeassistant.components import conversation
from homeassistant.core import Context, HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.slots import _MAX_CONVERSATIONS, SlotScheduler
from tests.integration.conftest import Server
from tests.integration.helpers import agent, agent_entity, slot_state
from voice_stack_dev.llama import LlamaServer


async def test_lowest_idle_slot_then_the_conversation_s_own() -> None:
    scheduler = SlotScheduler()
    async with scheduler.lease((1, 0)) as first:
        assert first == 0
        async with scheduler.lease((0, 1), "b") as second:
            assert second == 1
            assert scheduler.busy(0)
            assert scheduler.busy(1)
    async with scheduler.lease((0, 1), "b") as again:
        assert again == 1, "the slot that last served conversation b, now idle"
    async with scheduler.lease((0, 1), "new") as other:
        assert other == 0
    assert scheduler.sent == {0: 2, 1: 2}


async def test_busy_pool_waits_for_its_own_slot() -> None:
    """With both pool slots busy, a request waits for one of them, never takes slot 2."""
    scheduler = SlotScheduler()
    release = asyncio.Event()
    three_held = asyncio.Event()
    got: list[int] = []

    async def hold(pool: tuple[int, ...]) -> None:
        async with scheduler.lease(pool) as slot:
            got.append(slot)
            if len(got) == 3:
                three_held.set()
            await release.wait()

    holders = [asyncio.create_task(hold((0, 1))) for _ in range(2)]
    other = asyncio.create_task(hold((2,)))
    waiting = asyncio.create_task(hold((0, 1)))
    await three_held.wait()
    await asyncio.sleep(0)  # let the fourth reach its wait
    assert sorted(got) == [0, 1, 2]
    assert not waiting.done()
    release.set()
    await asyncio.gather(*holders, other, waiting)
    assert got[3] in (0, 1)


async def test_only_the_latest_conversations_are_remembered() -> None:
    """The conversation -> slot memory is bounded: the oldest conversation is forgotten."""
    scheduler = SlotScheduler()
    async with scheduler.lease((0, 1), "oldest"):
        pass
    async with scheduler.lease((0, 1)) as held, scheduler.lease((0, 1), "oldest") as again:
        assert (held, again) == (0, 1)  # "oldest" now remembers slot 1
    for n in range(_MAX_CONVERSATIONS):
        async with scheduler.lease((0, 1), f"later {n}"):
            pass
    async with scheduler.lease((0, 1), "oldest") as forgotten:
        assert forgotten == 0  # the lowest idle slot, not its old slot 1


async def test_a_release_cancelled_again_still_frees_the_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn cancelled, then cancelled again while it lets go of its slot, still frees it: the
    next request (and the warm-up) gets the slot instead of waiting for ever.

    Every asyncio lock or condition the release might take is made contended, so that the second
    cancellation lands inside the release if the release awaits anything at all.
    """
    scheduler = SlotScheduler()
    held = asyncio.Event()
    gate = asyncio.Event()

    async def turn() -> None:
        async with scheduler.lease((0,)):
            held.set()
            await asyncio.Future()  # a reply that never ends, until the turn is cancelled

    async def enter(self: Any) -> None:
        await gate.wait()
        await self.acquire()

    task = asyncio.create_task(turn())
    await held.wait()
    for kind in (asyncio.Lock, asyncio.Condition):
        monkeypatch.setattr(kind, "__aenter__", enter)
    task.cancel()
    await asyncio.sleep(0)  # the turn unwinds to its release
    task.cancel()  # ... and is cancelled there once more (if it is still running)
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    gate.set()
    assert not scheduler.busy(0)
    async with asyncio.timeout(10), scheduler.lease((0,), background=True) as slot:
        assert slot == 0


async def test_an_empty_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        async with SlotScheduler().lease(()):
            pass


@pytest.fixture
def server(llama_text: LlamaServer) -> Server:
    """The real tiny model."""
    return Server.of(llama_text)


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    """One agent owning slots 0 and 1."""
    return [agent(0, 1, title="Pool")]


async def _say(hass: HomeAssistant, entry: MockConfigEntry, text: str, cid: str | None) -> Any:
    return await conversation.async_converse(
        hass, text, cid, Context(), agent_id=agent_entity(hass, entry)
    )


async def _last_task(hass: HomeAssistant, server: LlamaServer, slot: int) -> int:
    state = await hass.async_add_executor_job(slot_state, server, slot)
    return int(state.get("id_task", -1))


async def test_two_satellites_at_once_run_on_different_slots(
    hass: HomeAssistant, init_integration: MockConfigEntry, llama_text: LlamaServer
) -> None:
    """Two conversations in flight together: one on each pool slot (llama-server's /slots
    agrees); each follow-up returns to its own conversation's slot."""
    entry = init_integration
    chat = entry.runtime_data.chat
    original = chat.stream
    both_leased = asyncio.Event()
    slots_used: list[int] = []

    def stream(request: dict[str, Any], timeout_s: float) -> Any:
        slots_used.append(request["id_slot"])
        if len(slots_used) == 2:
            both_leased.set()

        async def gated() -> Any:
            await both_leased.wait()  # neither request runs before both hold a slot
            async for item in original(request, timeout_s):
                yield item

        return gated()

    chat.stream = stream  # type: ignore[method-assign]
    before = {s: await _last_task(hass, llama_text, s) for s in (0, 1)}
    first, second = await asyncio.gather(
        _say(hass, entry, "kitchen satellite", None), _say(hass, entry, "office satellite", None)
    )
    assert sorted(slots_used) == [0, 1]
    for slot in (0, 1):
        assert await _last_task(hass, llama_text, slot) > before[slot], f"slot {slot} ran it"

    chat.stream = original  # type: ignore[method-assign]
    by_conversation = dict(
        zip((first.conversation_id, second.conversation_id), slots_used, strict=True)
    )
    sent: list[int] = []

    def spy(request: dict[str, Any], timeout_s: float) -> Any:
        sent.append(request["id_slot"])
        return original(request, timeout_s)

    chat.stream = spy  # type: ignore[method-assign]
    for result in (second, first):
        again = await _say(hass, entry, "and again", result.conversation_id)
        assert again.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    assert sent == [by_conversation[second.conversation_id], by_conversation[first.conversation_id]]
