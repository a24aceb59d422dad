"""URLs as the user typed them, as they may be shown, and as the entry keys them."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

# The OpenAI API's prefix. OpenAI clients (Home Assistant's own llama_cpp integration among them)
# are given the base URL with it, e.g. http://gpu-box:11434/v1; llama-server's own endpoints
# (/health, /props, /slots, /metrics) and the proxy's /proxy/status are at the root.
OPENAI_PREFIX: Final = "/v1"


def normalize_url(url: str) -> str:
    """Canonical base URL: scheme and host lower case (not user:pass@), no trailing slash and
    no trailing /v1 (the endpoints are at the root; the chat client adds /v1 itself)."""
    parts = urlsplit(url.strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    path = parts.path.rstrip("/")
    if path.lower().endswith(OPENAI_PREFIX):
        path = path[: -len(OPENAI_PREFIX)].rstrip("/")
    return f"{parts.scheme.lower()}://{userinfo}{at}{host.lower()}{path}"


def without_userinfo(url: str) -> str:
    """The URL without user:pass@ (for ids, titles and messages)."""
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}{query}"


def host_of(url: str) -> str:
    """The host name of a URL, never its user:pass@ or port (IPv6 in brackets)."""
    host = urlsplit(url).hostname or ""
    return f"[{host}]" if ":" in host else host


def shown_url(url: str) -> str:
    """The URL fit for a log line or a message: no user:pass@, no query string."""
    return without_userinfo(url).split("?", 1)[0]
