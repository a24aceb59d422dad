"""Backend URLs as shown (Wyoming info, /health, error texts): never with their credentials."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def public_url(url: str) -> str:
    """`url` without user:password@, query string or fragment, which may carry credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")


def redact_urls(text: str) -> str:
    """`text` (an exception's message, say) with every URL in it passed through `public_url`."""
    return _URL_IN_TEXT.sub(lambda m: public_url(m.group(0)), text)
