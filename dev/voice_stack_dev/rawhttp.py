"""Plain HTTP with exact headers (duplicates, odd whitespace) for proxy tests and benchmarks."""

from __future__ import annotations

import http.client
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def open_request(
    url: str,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
) -> http.client.HTTPResponse:
    """Send one request (headers verbatim, duplicates allowed) and return the open response."""
    host = url.split("://", 1)[1]
    conn = http.client.HTTPConnection(host, timeout=TIMEOUT)
    conn.putrequest(method, path, skip_accept_encoding=True)
    for name, value in headers:
        conn.putheader(name, value)
    if body is not None:
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    return conn.getresponse()


def call(
    url: str,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]] = (),
    payload: Any = None,
    *,
    raw_body: bytes | None = None,
) -> Reply:
    """One complete request; payload is sent as JSON."""
    body = raw_body if raw_body is not None else None
    if payload is not None:
        body = json.dumps(payload).encode()
    response = open_request(url, method, path, headers, body)
    try:
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        response.close()


def bearer(key: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {key}")]
