"""The slot warm-up, driven by what the llama-server coordinator observes: at setup, after a
restart (within one poll), when another client ran a task on our slot; not after an outage of
the same process; failed warm-ups retried less and less often; user requests first."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory
from homeassistant.components import conversation
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import intent
from homeassistant.util import dt as dt_util
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.voice_stack.const import (
    CONF_MODEL,
    CONF_PROMPT,
    CONF_REASONING,
    CONF_TIMEOUT,
    REASONING_DISABLED,
)
from custom_components.voice_stack.coordinator import RECOVERY_INTERVAL
from custom_components.voice_stack.observation import (
    Observation,
    is_new_process,
    observe,
    slots_to_warm,
)
from custom_components.voice_stack.payloads import (
    Counters,
    LlamaData,
    ServerProps,
    SlotInfo,
    SlotsSummary,
)
from custom_components.voice_stack.slots import SlotScheduler
from tests.integration.conftest import RealLlama
from tests.integration.helpers import (
    agent,
    agent_entity,
    poll,
    settle,
    setup_entry,
    slot_state,
    stack_entry,
)
from voice_stack_dev.fakes.integration import FakeLlama, ForwardingProxy, chunk, sse, streaming
from voice_stack_dev.llama import LlamaServer

LOADING = '{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'


def _seen(
    process: str | None = "p",
    tasks: dict[int, int | None] | None = None,
    sent: int = 1,
    started: str | None = None,
    counters: Counters | None = None,
) -> Observation:
    tasks = tasks if tasks is not None else {0: 5}
    return Observation(
        True, process, tasks, dict.fromkeys(tasks, sent), frozenset(), started, counters
    )


def _counters(prompt: float) -> Counters:
    return Counters(0.0, prompt, 0.0, 0.0, prompt, 0.0, 0.0, 0.0)


def test_a_restart_is_told_by_evidence_never_by_a_missing_field() -> None:
    """Each signal a build may have proves a new process when both polls have it and it moved;
    a field that is missing (a build without media_marker, no --metrics, a proxy hiding the
    header) says nothing, so a steady server is never taken for a new one."""
    assert not is_new_process(_seen(None), _seen(None)), "no marker on either poll"
    assert not is_new_process(_seen("p"), _seen(None))
    assert not is_new_process(_seen(started="100"), _seen(started="100"))
    assert not is_new_process(_seen(started="100"), _seen(started=None))
    assert is_new_process(_seen(None, started="100"), _seen(None, started="200"))
    assert not is_new_process(_seen(counters=_counters(50)), _seen(counters=_counters(60)))
    assert not is_new_process(_seen(counters=_counters(50)), _seen(counters=None))
    assert is_new_process(_seen(None, counters=_counters(50)), _seen(None, counters=_counters(7)))
    assert not is_new_process(_seen(None, {0: 5}), _seen(None, {0: 9}))
    assert not is_new_process(_seen(None, {0: None}), _seen(None, {0: None}))
    assert is_new_process(_seen(None, {0: 5, 1: 6}), _seen(None, {0: 9, 1: None}))
    assert not is_new_process(_seen(None, {0: 5}), _seen(None, {}))  # /slots switched off


def test_a_slot_that_never_ran_a_task_in_an_older_build() -> None:
    """Older builds show id_task -1 on a slot that ran nothing: that is no task, and a slot
    going back to it is a new process."""
    props = ServerProps("m", "b1", 2, 1024, None)

    def data(task: int) -> LlamaData:
        slot = SlotInfo(id=0, n_ctx=1024, is_processing=False, id_task=task, tokens=0)
        return LlamaData(loading=False, latency_ms=1.0, props=props, slots=SlotsSummary((slot,)))

    scheduler = SlotScheduler()
    fresh, used = observe(data(-1), True, scheduler, {0}), observe(data(3), True, scheduler, {0})
    assert fresh.tasks == {0: None}
    assert is_new_process(used, fresh)
    assert not is_new_process(fresh, used)


def test_which_slots_need_warming() -> None:
    """First sight and a new process warm all; a foreign task warms its slot only; the same
    process seen again after an outage keeps its cache."""
    slots = {0, 1}
    down = Observation(False, None, {}, {}, frozenset())
    assert slots_to_warm(None, _seen(), slots) == slots
    assert slots_to_warm(_seen(), down, slots) == set()
    assert slots_to_warm(_seen("p"), _seen("q"), slots) == slots
    assert is_new_process(_seen("p"), _seen("q"))
    assert not is_new_process(_seen("p"), _seen("p"))
    assert slots_to_warm(_seen("p"), _seen("p"), slots) == set()  # back after an outage
    assert slots_to_warm(_seen(tasks={0: 5, 1: 7}), _seen(tasks={0: 5, 1: 7}), slots) == set()
    foreign = _seen(tasks={0: 5, 1: 9})
    assert slots_to_warm(_seen(tasks={0: 5, 1: 7}), foreign, slots) == {1}
    ours = _seen(tasks={0: 6, 1: 7}, sent=2)  # we sent a request in between
    assert slots_to_warm(_seen(tasks={0: 5, 1: 7}), ours, slots) == set()


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    """An agent that names a model and turns thinking off (both sent with the warm-up)."""
    return [agent(0, **{CONF_MODEL: "m", CONF_REASONING: REASONING_DISABLED})]


async def test_warm_up_follows_what_the_coordinator_sees(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """Setup warms; a steady server is left alone; a new process and a task that Voice Stack
    did not send each warm again, at the next poll; an outage of the same process does not."""
    entry = init_integration
    probe = [r for r in fake.warm_requests if "unified KV" in r["messages"][0]["content"]]
    assert [r["id_slot"] for r in probe] == [0, 1, 0]  # the agent's slot, the next, again
    (warm,) = [r for r in fake.warm_requests if r not in probe]
    assert warm["id_slot"] == 0
    assert (warm["model"], warm["chat_template_kwargs"]) == ("m", {"enable_thinking": False})
    fake.slots[0]["id_task"] = 5
    await poll(hass, entry)  # our warm-up explains the new task
    count = len(fake.warm_requests)
    await poll(hass, entry)
    assert len(fake.warm_requests) == count, "steady: nothing sent"
    # From here on the unified-KV verdict is known: each warm-up is one request.

    fake.props = {**fake.props, "media_marker": "<__new_process__>"}
    await poll(hass, entry)
    assert len(fake.warm_requests) == count + 1

    fake.overrides["/health"] = (503, '{"error": {"type": "unavailable_error"}}')
    await poll(hass, entry)
    del fake.overrides["/health"]
    await poll(hass, entry)
    assert len(fake.warm_requests) == count + 1, "the same process kept its cache"

    fake.slots[0]["id_task"] = 99  # another client ran a task on the agent's slot
    await poll(hass, entry)
    assert len(fake.warm_requests) == count + 2


async def test_a_restart_is_warmed_seconds_after_the_server_is_ready(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """While llama-server is down or still loading it is polled every 3 s, not every 15 s: a
    restarted server's slot is primed at the first scheduled poll that finds it ready, and a
    ready server is polled every 15 s again."""
    entry = init_integration
    llm = entry.runtime_data.coordinators.llm
    fake.slots[0]["id_task"] = 5
    await poll(hass, entry)
    count = len(fake.warm_requests)
    fake.overrides["/health"] = (503, LOADING)
    await poll(hass, entry)
    del fake.overrides["/health"]
    fake.props = {**fake.props, "media_marker": "<__new_process__>"}
    async_fire_time_changed(hass, dt_util.utcnow() + RECOVERY_INTERVAL + timedelta(seconds=1))
    await settle(hass)
    assert len(fake.warm_requests) == count + 1, "primed at the next poll, 3 s on"
    assert llm.update_interval == llm.interval


async def test_a_turn_that_lost_the_server_polls_at_once(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A reply cut off by the server (killed mid-reply, and already back) polls at once:
    the new process's slot is primed without waiting for the next poll."""
    entry = init_integration
    fake.slots[0]["id_task"] = 5
    await poll(hass, entry)
    count = len(fake.warm_requests)
    fake.chat = streaming(sse(chunk({"content": "Hi"})), close_early=True)
    fake.props = {**fake.props, "media_marker": "<__new_process__>"}
    result = await conversation.async_converse(
        hass, "hi", None, Context(), agent_id=agent_entity(hass, entry)
    )
    assert result.response.response_type is intent.IntentResponseType.ERROR
    await settle(hass)
    assert len(fake.warm_requests) == count + 1


async def test_failed_warm_up_is_retried_less_often(
    freezer: FrozenDateTimeFactory,
    hass: HomeAssistant,
    fake: FakeLlama,
    mock_config_entry: MockConfigEntry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A warm-up the server refuses is tried again after 15 s, then 30 s, ...; its warning is
    logged once; once it works, nothing more is sent."""
    fake.overrides["/v1/chat/completions"] = (500, '{"error": {"code": 500, "message": "x"}}')
    await setup_entry(hass, mock_config_entry)
    tried = fake.chat_posts  # the probe (which failed too, and is not repeated) and the warm-up
    await poll(hass, mock_config_entry)
    assert fake.chat_posts == tried, "too early for a retry"
    for wait, retried in ((16, True), (16, False), (16, True)):
        freezer.tick(wait)
        await poll(hass, mock_config_entry)
        tried += retried
        assert fake.chat_posts == tried
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert sum("Could not warm slot 0" in r.getMessage() for r in records) == 1
    del fake.overrides["/v1/chat/completions"]
    freezer.tick(61)
    await poll(hass, mock_config_entry)
    assert "Warmed slot 0 for Agent slot 0 again" in caplog.text
    settled = fake.chat_posts
    freezer.tick(700)
    await poll(hass, mock_config_entry)
    assert fake.chat_posts == settled


async def test_a_waiting_user_request_goes_before_a_warm_up(hass: HomeAssistant) -> None:
    """A warm-up waiting for a slot gives way to a user request waiting for the same slot."""
    scheduler = SlotScheduler()
    order: list[str] = []
    release = asyncio.Event()

    async def hold() -> None:
        async with scheduler.lease((0,)):
            await release.wait()

    async def take(name: str, background: bool) -> None:
        async with scheduler.lease((0,), background=background):
            order.append(name)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    warm = asyncio.create_task(take("warm-up", True))
    await asyncio.sleep(0)
    user = asyncio.create_task(take("user", False))
    await asyncio.sleep(0)
    assert scheduler.wanted(0)
    release.set()
    await asyncio.gather(holder, warm, user)
    assert order == ["user", "warm-up"]


async def test_a_busy_pool_times_out_with_a_clear_error(
    hass: HomeAssistant, mock_config_entry: MockConfigEntry
) -> None:
    """Every slot of the agent held longer than its timeout: the user hears a timeout."""
    sub = next(iter(mock_config_entry.subentries.values()))
    hass.config_entries.async_update_subentry(
        mock_config_entry, sub, data={**sub.data, CONF_TIMEOUT: 0.2}
    )
    await setup_entry(hass, mock_config_entry)
    release = asyncio.Event()

    async def hold() -> None:
        async with mock_config_entry.runtime_data.scheduler.lease((0,)):
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    result = await conversation.async_converse(
        hass, "hi", None, Context(), agent_id=agent_entity(hass, mock_config_entry)
    )
    release.set()
    await holder
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert "did not answer within 0.2 seconds" in result.response.speech["plain"]["speech"]


async def test_bad_template_is_logged_and_the_turn_fails_clearly(
    hass: HomeAssistant,
    fake: FakeLlama,
    mock_config_entry: MockConfigEntry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broken instructions template: logged (once), and a turn answers with an error."""
    subentry = next(iter(mock_config_entry.subentries.values()))
    hass.config_entries.async_update_subentry(
        mock_config_entry, subentry, data={**subentry.data, CONF_PROMPT: "{{ broken"}
    )
    await setup_entry(hass, mock_config_entry)
    await poll(hass, mock_config_entry)
    assert caplog.text.count("Could not render the prompt") == 1
    result = await conversation.async_converse(
        hass, "hi", None, Context(), agent_id=agent_entity(hass, mock_config_entry)
    )
    assert result.response.response_type is intent.IntentResponseType.ERROR


class TestRealServer(RealLlama):
    """Against a real llama-server that the test restarts."""

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(1, 2)]

    async def test_restart_is_warmed_within_one_poll(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, llama: LlamaServer
    ) -> None:
        """Both pool slots are primed at setup; after llama-server restarts, one poll primes
        them again, so the first request finds its prefix cached."""
        for slot in (1, 2):
            assert (await hass.async_add_executor_job(slot_state, llama, slot))[
                "n_prompt_tokens"
            ] > 0
        started = init_integration.runtime_data.coordinators.llm.data.started
        assert started, "llama-server's /metrics names its process start"
        await hass.async_add_executor_job(llama.restart)
        for slot in (1, 2):
            assert "id_task" not in await hass.async_add_executor_job(slot_state, llama, slot)

        await poll(hass, init_integration)
        assert init_integration.runtime_data.coordinators.llm.data.started not in (None, started)
        for slot in (1, 2):
            assert (await hass.async_add_executor_job(slot_state, llama, slot))[
                "n_prompt_tokens"
            ] > 0
        result = await conversation.async_converse(
            hass, "hello", None, Context(), agent_id=agent_entity(hass, init_integration)
        )
        assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
        timings = next(iter(init_integration.runtime_data.timings.values()))
        assert timings.cached_tokens > 0, "the first request after the restart hit the warm slot"


class TestServerWithoutMarker(RealLlama):
    """A real llama-server whose /props carries no `media_marker` (builds before 2026-04 serve
    none, and LLAMA_MEDIA_MARKER pins it), reached through a proxy that leaves it out and that
    passes on no response header either (so no Process-Start-Time-Unix)."""

    async def test_a_steady_server_is_never_primed_again_and_a_restart_is_seen(
        self, hass: HomeAssistant, llama: LlamaServer
    ) -> None:
        """Many polls of the same process send nothing; a restart is primed at the next poll."""
        proxy = await ForwardingProxy(llama, "client-key").start()
        proxy.drop["/props"] = ("media_marker",)
        try:
            entry = stack_entry(hass, proxy.url, "client-key", agent(1, 2))
            await setup_entry(hass, entry)

            async def tasks() -> dict[int, Any]:
                states = [await hass.async_add_executor_job(slot_state, llama, s) for s in (1, 2)]
                return {s["id"]: s.get("id_task") for s in states}

            primed = await tasks()
            assert None not in primed.values(), "both pool slots primed at setup"
            for _ in range(6):
                await poll(hass, entry)
            assert await tasks() == primed, "a steady server is never primed again"

            await hass.async_add_executor_job(llama.restart)
            await poll(hass, entry)
            for slot in (1, 2):
                assert (await hass.async_add_executor_job(slot_state, llama, slot))[
                    "n_prompt_tokens"
                ] > 0, f"slot {slot} primed again after the restart"
            again = await tasks()
            for _ in range(3):
                await poll(hass, entry)
            assert await tasks() == again
        finally:
            await proxy.stop()
