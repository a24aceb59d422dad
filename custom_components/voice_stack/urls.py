"""URLs as the user typed them, as they may be shown, and as the entry keys them."""

from __future__ import annotations

from urllib.parse import urlsplit


def normalize_url(url: str) -> str:
    """Canonical base URL: scheme and host lower case (not user:pass@), no trailing slash."""
    parts = urlsplit(url.strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    path = parts.path.rstrip("/")
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
