"""Debian's Chromium driven by Playwright, set up for a closed network, logged into an HA.

Playwright's wheel ships only its driver; the browser is Debian's (scripts/provision-browser),
started headless with a fresh profile and without anything that would call out.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Locator, Page, expect, sync_playwright

from voice_stack_dev.paths import REPO

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
SCREENSHOTS = REPO / "demo-output" / "screenshots"  # git-ignored, for people to look at
TIMEOUT_MS = 60_000
PLACEHOLDER = re.compile(r"\b(Unknown|Unavailable)\b")  # a state HA shows for no value
expect.set_options(timeout=TIMEOUT_MS)  # a busy 2-core machine renders slowly

# What HA's frontend does for a click on one of its own links.
_NAVIGATE = """path => { history.pushState(null, "", path);
  window.dispatchEvent(new CustomEvent("location-changed", {detail: {replace: false}})); }"""
# The text of an element, its shadow roots included (HA's cards render inside them).
_DEEP_TEXT = """e => { const walk = n => n.nodeType === 3 ? n.textContent :
  [...(n.shadowRoot ? n.shadowRoot.childNodes : []), ...n.childNodes].map(walk).join("");
  return walk(e).replace(/\\s+/g, " ").trim(); }"""


@contextmanager
def chromium_page() -> Iterator[Page]:
    """One page in a fresh profile at 1280x900, closed with its browser afterwards."""
    with (
        tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile,
        sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=FLAGS,
            headless=True,
            viewport=VIEWPORT,  # type: ignore[arg-type]
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()


def log_in(page: Page, url: str, username: str, password: str, path: str) -> None:
    """Open `path` as a visitor does: HA sends the browser to its login form first."""
    page.goto(url + path, wait_until="domcontentloaded")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.keyboard.press("Enter")
    # Back on `path` (the login page's own URL names it too), with the tokens the frontend keeps
    # for the next page ("Keep me logged in" is on by default).
    page.wait_for_url(lambda url: "/auth/" not in url and path in url)
    page.wait_for_function("() => localStorage.getItem('hassTokens') !== null")


def visit(page: Page, path: str) -> None:
    """Go to another page of the running frontend as its own links do (no reload)."""
    page.evaluate(_NAVIGATE, path)
    page.wait_for_url(f"**{path}")


def deep_text(locator: Locator) -> str:
    text: str = locator.evaluate(_DEEP_TEXT)
    return text


def shoot(page: Page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
