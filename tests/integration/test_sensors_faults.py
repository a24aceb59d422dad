"""Server-side problems the sensors must surface: a proxy that lets requests without the key
through, a model still loading, endpoints switched off by flags, a slot-count mismatch.

Real llama-server and nginx wherever they can show the fault; a small forwarding fake only for
an open proxy and a loading server (the tiny model loads too fast to catch it loading)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from homeassistant.const import STATE_OFF, STATE_ON, STATE_UNAVAILABLE
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import issue_registry as ir
from homeassistant.helpers.update_coordinator import UpdateFailed

from custom_components.voice_stack.const import DOMAIN
from custom_components.voice_stack.health_issues import (
    ISSUE_METRICS_DISABLED,
    ISSUE_PROXY_OPEN,
    ISSUE_PROXY_SLOT_COUNT,
    ISSUE_SERVER_OPEN,
    ISSUE_SLOTS_DISABLED,
    issue_id,
)
from voice_stack_dev.llama import LlamaServer, llama_argv
from voice_stack_dev.nginx import start_proxy
from voice_stack_dev.procs import Service, free_port

from .agent_helpers import setup_entry
from .stack_fixtures import coordinators_of, setup_stack_entry, stack_entry, start_fake

pytestmark = pytest.mark.usefixtures("socket_enabled")

OPEN = "binary_sensor.voice_stack_auth_proxy_accepts_requests_without_key"
LLM = "binary_sensor.voice_stack_llm_server_connectivity"
STATE = "sensor.voice_stack_llm_server_status"
KEY = "client-key"


class ForwardingFake:
    """Forwards to a real llama-server with its key; can check the client key, or not."""

    def __init__(self, upstream: LlamaServer) -> None:
        self.upstream = upstream
        self.check_key = True
        self.loading = False
        self.status: dict[str, int] = {}  # path -> forced status
        self.delay: dict[str, float] = {}  # path -> seconds before answering
        self.body: dict[str, str] = {}  # path -> forced 200 body

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if (delay := self.delay.get(request.path)) is not None:
            await asyncio.sleep(delay)
        if (body := self.body.get(request.path)) is not None:
            return web.Response(text=body, content_type="application/json")
        if (status := self.status.get(request.path)) is not None:
            return web.json_response({"error": {"code": status}}, status=status)
        if self.loading:
            return web.json_response(
                {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
                status=503,
            )
        if request.path == "/proxy/status":
            return web.json_response(
                {"reserved_slots": [0], "total_slots": 4, "service": "fake-open-proxy"}
            )
        guarded = request.path not in ("/health",)
        if guarded and self.check_key and request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": {"code": 401}}, status=401)
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                self.upstream.url + request.path_qs,
                data=await request.read(),
                headers={**self.upstream.headers, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as upstream,
        ):
            return web.Response(
                body=await upstream.read(),
                status=upstream.status,
                content_type=upstream.content_type,
            )


@pytest.fixture
async def fake_proxy(llama_text: LlamaServer) -> AsyncIterator[tuple[ForwardingFake, str]]:
    fake = ForwardingFake(llama_text)
    runner, url = await start_fake({"/{tail:.*}": fake.handle})
    yield fake, url
    await runner.cleanup()


def _issue(hass: HomeAssistant, key: str, entry_id: str) -> ir.IssueEntry | None:
    return ir.async_get(hass).async_get_issue(DOMAIN, f"{key}_{entry_id}")


async def test_open_proxy_is_flagged_with_a_repair(
    hass: HomeAssistant, fake_proxy: tuple[ForwardingFake, str]
) -> None:
    """A proxy that forwards requests without the key: problem on, repair issue raised."""
    fake, url = fake_proxy
    fake.check_key = False
    entry = await setup_stack_entry(hass, url, KEY)
    assert hass.states.get(OPEN).state == STATE_ON  # type: ignore[union-attr]
    issue = _issue(hass, ISSUE_PROXY_OPEN, entry.entry_id)
    assert issue is not None
    assert issue.severity is ir.IssueSeverity.ERROR
    assert issue.translation_placeholders == {"title": entry.title, "url": url}
    assert issue_id(ISSUE_PROXY_OPEN, entry) == f"{ISSUE_PROXY_OPEN}_{entry.entry_id}"

    fake.check_key = True
    coordinators = coordinators_of(entry)
    await coordinators.proxy.async_refresh()
    await hass.async_block_till_done()
    assert hass.states.get(OPEN).state == STATE_OFF  # type: ignore[union-attr]
    assert _issue(hass, ISSUE_PROXY_OPEN, entry.entry_id) is None

    # Removing the entry removes what is left of its issues.
    await hass.config_entries.async_remove(entry.entry_id)
    assert _issue(hass, ISSUE_PROXY_OPEN, entry.entry_id) is None


async def test_loading_server_is_up_but_not_ready(
    hass: HomeAssistant, fake_proxy: tuple[ForwardingFake, str]
) -> None:
    """503 "Loading model" keeps the connectivity on, with loading=true and state loading."""
    fake, url = fake_proxy
    entry = await setup_stack_entry(hass, url, KEY)
    coordinators = coordinators_of(entry)

    # Pretend the device still shows a model from before a restart.
    devices = dr.async_get(hass)
    llm_device = next(
        d
        for d in dr.async_entries_for_config_entry(devices, entry.entry_id)
        if d.name == "Voice Stack LLM server"
    )
    devices.async_update_device(llm_device.id, model="old-model")

    fake.loading = True
    await coordinators.llm.async_refresh()
    await hass.async_block_till_done()
    llm = hass.states.get(LLM)
    assert llm is not None
    assert (llm.state, llm.attributes["loading"]) == (STATE_ON, True)
    assert hass.states.get(STATE).state == "loading"  # type: ignore[union-attr]
    busy = hass.states.get("sensor.voice_stack_llm_server_busy_slots")
    assert busy is not None
    assert busy.state == STATE_UNAVAILABLE

    fake.loading = False
    await coordinators.llm.async_refresh()
    await hass.async_block_till_done()
    assert hass.states.get(STATE).state == "ready"  # type: ignore[union-attr]
    assert hass.states.get(LLM).attributes["loading"] is False  # type: ignore[union-attr]
    assert devices.async_get(llm_device.id).model == "tiny-text"  # type: ignore[union-attr]


def _llama_without(flag: str, extra: list[str], log_dir: Path) -> LlamaServer:
    """A real llama-server whose command line lacks `flag` (the harness always adds --metrics)."""
    port = free_port()
    argv = [a for a in llama_argv("tiny-text", port, api_key=KEY, extra_args=extra) if a != flag]
    server = LlamaServer(
        name="llama-server (flags)",
        argv=argv,
        port=port,
        log_path=log_dir / f"llama-flags-{port}.log",
        api_key=KEY,
        n_parallel=4,
        model="tiny-text",
    )
    server.start()
    return server


async def test_disabled_endpoints_raise_repairs(hass: HomeAssistant, service_logs: Path) -> None:
    """Without --metrics and with --no-slots: repairs name the flags; entities stay unknown."""
    server = await hass.async_add_executor_job(
        _llama_without, "--metrics", ["--no-slots"], service_logs
    )
    try:
        entry = await setup_stack_entry(hass, server.url, KEY)
        assert _issue(hass, ISSUE_METRICS_DISABLED, entry.entry_id) is not None
        assert _issue(hass, ISSUE_SLOTS_DISABLED, entry.entry_id) is not None
        throughput = hass.states.get("sensor.voice_stack_llm_server_generation_throughput")
        assert throughput is not None
        assert throughput.state == "unknown"
        assert hass.states.get(LLM).state == STATE_ON  # type: ignore[union-attr]
    finally:
        await hass.async_add_executor_job(server.stop)


async def test_proxy_slot_count_mismatch(
    hass: HomeAssistant, llama_text: LlamaServer, service_logs: Path
) -> None:
    """The real nginx proxy set to LLM_PARALLEL=2 in front of a 4-slot server."""
    assert llama_text.api_key is not None
    proxy: Service = await hass.async_add_executor_job(
        lambda: start_proxy(
            llama_text.url, KEY, llama_text.api_key or "", total_slots=2, log_dir=service_logs
        )
    )
    try:
        entry = await setup_stack_entry(hass, proxy.url, KEY)
        issue = _issue(hass, ISSUE_PROXY_SLOT_COUNT, entry.entry_id)
        assert issue is not None
        assert issue.translation_placeholders == {
            "title": entry.title,
            "proxy_slots": "2",
            "server_slots": "4",
        }
        assert hass.states.get(OPEN).state == STATE_OFF  # type: ignore[union-attr]
    finally:
        await hass.async_add_executor_job(proxy.stop)


async def test_direct_llama_server_without_proxy(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """Pointed at llama-server itself: no /proxy/status, still reachable, still keyed."""
    entry = await setup_stack_entry(hass, llama_text.url, llama_text.api_key or "")
    coordinators = coordinators_of(entry)
    assert coordinators.proxy.data.status is None
    assert hass.states.get("binary_sensor.voice_stack_auth_proxy_connectivity").state == STATE_ON  # type: ignore[union-attr]
    assert hass.states.get(OPEN).state == STATE_OFF  # type: ignore[union-attr]


async def test_llama_server_without_api_key(hass: HomeAssistant, llama_factory: Any) -> None:
    """llama-server itself, started without --api-key: the repair names the server, not a proxy."""
    server = llama_factory("tiny-text", api_key=None, ctx_per_slot=512)
    entry = await setup_stack_entry(hass, server.url, "")
    assert hass.states.get(OPEN).state == STATE_ON  # type: ignore[union-attr]
    assert _issue(hass, ISSUE_PROXY_OPEN, entry.entry_id) is None
    issue = _issue(hass, ISSUE_SERVER_OPEN, entry.entry_id)
    assert issue is not None
    assert issue.severity is ir.IssueSeverity.ERROR
    assert issue.translation_key == ISSUE_SERVER_OPEN
    assert issue.translation_placeholders == {"title": entry.title, "url": server.url}


async def test_rejected_key_while_polling_starts_reauth(
    hass: HomeAssistant, fake_proxy: tuple[ForwardingFake, str]
) -> None:
    """A 401 on /metrics after setup means the key changed: HA starts the reauth flow."""
    fake, url = fake_proxy
    entry = await setup_stack_entry(hass, url, KEY)
    fake.status["/metrics"] = 401
    coordinators = coordinators_of(entry)
    await coordinators.llm.async_refresh()
    await hass.async_block_till_done()
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert [f["context"]["source"] for f in flows] == ["reauth"]


async def test_timeouts_and_server_errors_make_entities_unavailable(
    hass: HomeAssistant,
    fake_proxy: tuple[ForwardingFake, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hung /slots (timeout) and a 500 on /metrics: the server counts as down for the poll."""
    fake, url = fake_proxy
    entry = await setup_stack_entry(hass, url, KEY)
    coordinators = coordinators_of(entry)
    monkeypatch.setattr("custom_components.voice_stack.coordinator.PROBE_TIMEOUT", 0.2)
    fake.delay["/slots"] = 2.0
    await coordinators.llm.async_refresh()
    await hass.async_block_till_done()
    assert hass.states.get(LLM).state == STATE_OFF  # type: ignore[union-attr]
    assert hass.states.get(STATE).state == "unreachable"  # type: ignore[union-attr]
    fake.delay.clear()
    fake.status["/metrics"] = 500
    await coordinators.llm.async_refresh()
    assert not coordinators.llm.last_update_success
    fake.status.clear()
    await coordinators.llm.async_refresh()
    await hass.async_block_till_done()
    assert hass.states.get(STATE).state == "ready"  # type: ignore[union-attr]


async def test_broken_gateway_replies(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """A gateway URL that answers 500, then something that is not the gateway's JSON."""
    replies = [web.Response(status=500), web.Response(text="<html>not json</html>")]
    # Then a reply whose ASR the gateway has not probed yet, and without any TTS.
    unprobed = {"status": "ok", "backends": {"asr": {"status": "unknown", "models": []}}}

    async def gateway(_request: web.Request) -> web.StreamResponse:
        return replies.pop(0) if replies else web.json_response(unprobed)

    runner, gw_url = await start_fake({"/health": gateway})
    try:
        entry = await setup_stack_entry(hass, llama_text.url, llama_text.api_key or "", gw_url)
        gateway_state = "binary_sensor.voice_stack_gateway_connectivity"
        assert hass.states.get(gateway_state).state == STATE_OFF  # type: ignore[union-attr]
        coordinators = coordinators_of(entry)
        assert coordinators.gateway is not None
        await coordinators.gateway.async_refresh()
        assert not coordinators.gateway.last_update_success
        await coordinators.gateway.async_refresh()
        await hass.async_block_till_done()
        assert hass.states.get(gateway_state).state == STATE_ON  # type: ignore[union-attr]
        # Not probed yet is unknown; a backend the gateway does not report is unavailable.
        asr = "binary_sensor.voice_stack_speech_to_text_connectivity"
        tts = "binary_sensor.voice_stack_text_to_speech_connectivity"
        assert hass.states.get(asr).state == "unknown"  # type: ignore[union-attr]
        assert hass.states.get(tts).state == STATE_UNAVAILABLE  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_malformed_replies(
    hass: HomeAssistant, fake_proxy: tuple[ForwardingFake, str]
) -> None:
    """Replies that are not what the APIs promise never raise out of the pollers."""
    fake, url = fake_proxy
    fake.body["/proxy/status"] = '{"reserved_slots": "0"}'
    fake.status["/v1/models"] = 404  # neither refused nor served: cannot tell
    fake.body["/props"] = "[]"
    entry = stack_entry(url, KEY, None, [])
    fake.body.pop("/props")  # the agent's own setup needs real props
    await setup_entry(hass, entry)
    coordinators = coordinators_of(entry)
    assert coordinators.proxy.data.status is None
    assert hass.states.get(OPEN).state == "unknown"  # type: ignore[union-attr]

    fake.body["/props"] = "[]"
    fake.loading = True  # a restart forgets the props...
    await coordinators.llm.async_refresh()
    fake.loading = False  # ...and the malformed ones that follow are ignored
    await coordinators.llm.async_refresh()
    assert coordinators.llm.data.props is None
    assert coordinators.llm.last_update_success

    fake.body["/slots"] = '{"not": "a list"}'
    await coordinators.llm.async_refresh()
    assert not coordinators.llm.last_update_success
    error = coordinators.llm.last_exception
    assert isinstance(error, UpdateFailed)
    assert error.translation_key == "slots_malformed"
    assert error.translation_placeholders == {"url": f"{url}/slots"}
