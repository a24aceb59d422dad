"""First contact with a Home Assistant: the onboarding wizard or the login form, then RUNNING."""

from __future__ import annotations

import asyncio
import time

from ..ha_client import HomeAssistantClient, Json
from .errors import DemoError
from .state import DemoState

LANGUAGE = "en"
ENTRIES = "/api/config/config_entries"
RUNNING_TIMEOUT = 120.0
ONBOARDING_EXTRAS = ("google_translate", "met", "radio_browser")
_STEPS = ("user", "core_config", "analytics", "integration")


async def onboard_or_login(ha: HomeAssistantClient, state: DemoState) -> None:
    """Create the owner on a fresh HA (the onboarding wizard), else log in with the form."""
    # Once every step is done HA stops serving /api/onboarding (404).
    listing = await ha.request("GET", "/api/onboarding", auth=False, ok=(200, 404)) or []
    steps = {s["step"]: s["done"] for s in listing} or dict.fromkeys(_STEPS, True)
    if not steps.get("user"):
        created = await ha.request(
            "POST",
            "/api/onboarding/users",
            json={
                "client_id": ha.client_id,
                "name": "Demo Owner",
                "username": state.username,
                "password": state.password,
                "language": LANGUAGE,
            },
            auth=False,
        )
        await ha.token_from_code(created["auth_code"])
    else:
        await ha.login(state.username, state.password)
    if not steps.get("core_config"):
        await ha.request("POST", "/api/onboarding/core_config", json={})
    if not steps.get("analytics"):
        await ha.request("POST", "/api/onboarding/analytics", json={})
    if not steps.get("integration"):
        await ha.request(
            "POST",
            "/api/onboarding/integration",
            json={"client_id": ha.client_id, "redirect_uri": ha.redirect_uri},
        )
    state.onboarded = True


async def remove_failed_onboarding_extras(ha: HomeAssistantClient) -> None:
    """Onboarding also adds Google Translate TTS, Met and Radio Browser; their packages are not
    installed here (and they would go online), so delete whatever of them failed to set up."""
    entries: list[Json] = await ha.request("GET", f"{ENTRIES}/entry")
    for entry in entries:
        if entry["domain"] in ONBOARDING_EXTRAS and entry["state"] != "loaded":
            await ha.request("DELETE", f"{ENTRIES}/entry/{entry['entry_id']}")


async def wait_running(ha: HomeAssistantClient) -> None:
    """HA serves HTTP before every integration is set up; wait for state RUNNING."""
    deadline = time.monotonic() + RUNNING_TIMEOUT
    while time.monotonic() < deadline:
        config = await ha.request("GET", "/api/config")
        if config.get("state") == "RUNNING":
            return
        await asyncio.sleep(0.5)
    raise DemoError("Home Assistant", f"not RUNNING after {RUNNING_TIMEOUT:.0f} s")
