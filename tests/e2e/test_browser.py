"""What a person sees of the kept demo in a real browser: the Voice Stack dashboard, the
integration and its device pages, and the Assist dialog answering a typed question.

Screenshots (1280x900, full pages) go to demo-output/screenshots/. HA's own API is used only to
find the device pages and to name what a failing page shows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient

from .browser import PLACEHOLDER, chromium_page, deep_text, log_in, shoot, visit
from .demo_process import kept_demo

QUESTION = "What is the capital of Italy?"
REPLY_WAIT_S = 120

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Demo:
    url: str
    username: str
    password: str
    report: dict[str, Any]

    def api[T](self, call: Callable[[HomeAssistantClient], Coroutine[Any, Any, T]]) -> T:
        """Run one API call as the demo owner (in a thread: Playwright's sync API owns this one)."""

        async def run() -> T:
            async with HomeAssistantClient(self.url) as ha:
                await ha.login(self.username, self.password)
                await ha.connect_ws()
                return await call(ha)

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, run()).result()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    base = tmp_path_factory.mktemp("browser-demo")
    with kept_demo(base / "state", base / "out") as (report, _proc):
        login = json.loads((base / "state" / "state.json").read_text())
        yield Demo(report["ha_url"], login["username"], login["password"], report)


@pytest.fixture(scope="module")
def page(demo: Demo) -> Iterator[Page]:
    with chromium_page() as page:
        log_in(page, demo.url, demo.username, demo.password, "/voice-stack")
        yield page


def _placeholders(page: Page) -> list[str]:
    found = page.get_by_text(PLACEHOLDER)
    return [deep_text(found.nth(i)) for i in range(found.count())]


async def _not_reporting(ha: HomeAssistantClient, device_id: str) -> list[str]:
    """Our entities of one device that are unknown or unavailable (to name them in a failure)."""
    registry: list[dict[str, Any]] = await ha.ws("config/entity_registry/list")
    ids = {e["entity_id"] for e in registry if e.get("device_id") == device_id}
    states: list[dict[str, Any]] = await ha.request("GET", "/api/states")
    return [f"{s['entity_id']}={s['state']}" for s in states
            if s["entity_id"] in ids and s["state"] in ("unknown", "unavailable")]  # fmt: skip


def test_dashboard_shows_every_figure_and_no_empty_chart(page: Page, demo: Demo) -> None:
    visit(page, "/voice-stack/voice-stack")
    expect(page.get_by_text("Voice agent, latest reply", exact=True)).to_be_visible()
    expect(page.get_by_text("Generation throughput").first).to_be_visible()  # a chart legend
    expect(page.get_by_text("Connected").first).to_be_visible()
    shot = shoot(page, "dashboard")
    assert page.get_by_text("No statistics found").count() == 0, shot
    assert page.get_by_text("No reply yet").count() == 0, shot  # the demo's agent answered
    assert _placeholders(page) == [], shot


def _our_devices(demo: Demo) -> list[dict[str, Any]]:
    entry = demo.report["provisioning"]["setup"]["voice_stack_entry"]

    async def devices(ha: HomeAssistantClient) -> list[dict[str, Any]]:
        listing: list[dict[str, Any]] = await ha.ws("config/device_registry/list")
        return [d for d in listing if entry in d.get("config_entries", [])]

    return demo.api(devices)


def test_integration_page_and_every_device_page_show_values(page: Page, demo: Demo) -> None:
    visit(page, "/config/integrations/integration/voice_stack")
    expect(page.get_by_text("Voice Stack LLM server").first).to_be_visible()
    shoot(page, "integration")
    devices = _our_devices(demo)
    assert len(devices) >= 6  # the server's five services and the conversation agent
    blank: dict[str, list[str]] = {}
    for device in devices:
        name = device.get("name_by_user") or device["name"]
        visit(page, f"/config/devices/device/{device['id']}")
        expect(page.get_by_text(name).first).to_be_visible()
        expect(
            page.get_by_text("Sensors").first.or_(page.get_by_text("Controls").first)
        ).to_be_visible()
        shot = shoot(page, f"device-{name.lower().replace(' ', '-')}")
        if shown := _placeholders(page):
            named = demo.api(partial(_not_reporting, device_id=device["id"]))
            blank[f"{name} ({shot.name})"] = [*shown, *named]
    assert blank == {}


def _agent_reply_time(demo: Demo) -> str | None:
    setup = demo.report["provisioning"]["setup"]

    async def received(ha: HomeAssistantClient) -> str | None:
        dump = await ha.request(
            "GET", f"/api/diagnostics/config_entry/{setup['voice_stack_entry']}"
        )
        timings = dump["data"]["timings"].get(setup["agent"]["subentry_id"]) or {}
        return timings.get("received_at")

    return demo.api(received)


def _settled(page: Page, bubble: Locator, deadline: float) -> str:
    """The bubble's text once the last streamed words are in (two reads alike)."""
    text = deep_text(bubble)
    while True:
        page.wait_for_timeout(300)
        if (again := deep_text(bubble)) == text:
            return text
        assert time.monotonic() < deadline, "the reply kept changing"
        text = again


HA_FALLBACK = "Sorry, I couldn't understand"  # conversation/default_agent.py


def _finished(reply: str) -> bool:
    """The dialog shows "..." while the agent is still thinking."""
    return bool(reply.strip(" .\u2026"))


def test_assist_dialog_shows_our_agents_reply(page: Page, demo: Demo) -> None:
    visit(page, "/voice-stack/voice-stack")
    expect(page.get_by_text("Health", exact=True)).to_be_visible()
    before = _agent_reply_time(demo)
    page.keyboard.press("a")  # HA's shortcut for the Assist dialog (the chat icon)
    box = page.locator("ha-assist-chat input")
    box.fill(QUESTION)
    box.press("Enter")
    replies = page.locator("ha-assist-chat .message.hass ha-markdown")
    deadline = time.monotonic() + REPLY_WAIT_S
    # "How can I assist?", then the reply; our agent has answered when its timings moved on.
    while (
        replies.count() < 2
        or not _finished(deep_text(replies.nth(1)))
        or _agent_reply_time(demo) == before
    ):
        assert time.monotonic() < deadline, shoot(page, "assist-no-reply", full_page=False)
        page.wait_for_timeout(500)
    reply = _settled(page, replies.nth(1), deadline)
    shot = shoot(page, "assist", full_page=False)
    assert _finished(reply), shot
    assert reply != QUESTION, shot
    # HA's own agent's fallback; the model's words are its own and may say "sorry" too (one
    # clean-clone run's reply did: "I'm sorry for any confusion")
    assert not reply.startswith(HA_FALLBACK), reply


def test_a_session_renews_its_access_token_when_due(demo: Demo) -> None:
    """HA's access tokens live 30 minutes; the harness's sessions outlive several (a soak's
    satellites got HTTP 401 after 30 minutes without an HA restart). A due token is renewed with
    the refresh token before the call, which then succeeds."""

    async def call_when_due(ha: HomeAssistantClient) -> tuple[float, Any]:
        ha._expires = time.monotonic()  # as 30 minutes after the login
        config = await ha.request("GET", "/api/config")
        return ha._expires - time.monotonic(), config

    left_s, config = demo.api(call_when_due)
    assert left_s > 25 * 60  # a new token's 30 minutes (a JWT issued in the same second as the
    # first is the same string, so the expiry, not the text, shows the renewal)
    assert config["location_name"] == "Voice Stack demo"


def test_leaving_a_subscription_unsubscribes_it(demo: Demo) -> None:
    """HA keeps a subscription (a pipeline run's too) for the connection's life unless the
    client unsubscribes, as the frontend does: a soak's one connection held thousands. Once the
    harness leaves one, HA no longer knows its id (it handles a connection's messages in order)."""

    async def subscribe_then_leave(ha: HomeAssistantClient) -> str:
        async with ha.subscribe("subscribe_events", event_type="voice_stack_probe") as sub:
            assert (await sub.next(30))["success"]
        with pytest.raises(HomeAssistantApiError) as err:
            await ha.ws("unsubscribe_events", subscription=sub.msg_id)
        return err.value.why

    assert demo.api(subscribe_then_leave).startswith("not_found")
