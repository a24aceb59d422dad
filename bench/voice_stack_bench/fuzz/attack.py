"""Running the cases against a gateway on loopback: each bad client from its own loopback address
(so the per-host limit meets it, not the witness), what it was answered, and whether the gateway
ended the connection or the client had to give up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import Counter
from dataclasses import dataclass, field

from wyoming.event import async_read_event

from .cases import Case

# a client still connected then gives up: the gateway neither answered nor closed (one that reads
# nothing waits longer: the gateway must first fill its socket buffers, at the backend's pace)
GIVE_UP_S = 15.0
GIVE_UP_UNREAD_S = 40.0


@dataclass(frozen=True)
class Target:
    port: int  # Wyoming
    http_port: int
    source: str  # the bad clients' loopback address


@dataclass
class Outcome:
    codes: Counter[str] = field(default_factory=Counter)  # error codes (HTTP: status codes)
    closed: int = 0  # connections the gateway ended
    gave_up: int = 0  # connections the client had to end (nothing ended them in GIVE_UP_S)
    refused: int = 0  # connections refused before they were served (busy, not-allowed)


async def run_case(target: Target, case: Case) -> Outcome:
    outcome = Outcome()
    results = await asyncio.gather(
        *(_one_client(target, case) for _ in range(case.connections)), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            outcome.codes[f"client-failed:{type(result).__name__}"] += 1
            continue
        codes, closed = result
        outcome.codes.update(codes)
        outcome.refused += bool({"busy", "not-allowed"} & set(codes))
        outcome.closed += closed
        outcome.gave_up += not closed and not case.hold
    return outcome


async def _one_client(target: Target, case: Case) -> tuple[list[str], bool]:
    port = target.http_port if case.http else target.port
    sock = socket.socket()
    if not case.reads:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((target.source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        answer = asyncio.create_task(_answers(reader, writer.transport, case))
        with contextlib.suppress(ConnectionError):
            for piece in case.sends:
                writer.write(piece)
                await writer.drain()
                if case.pause:
                    await asyncio.sleep(case.pause)
        if case.hold:
            done, _ = await asyncio.wait({answer}, timeout=case.hold)
            if not done:
                answer.cancel()
                return [], False
        return await answer
    finally:
        writer.close()


async def _answers(
    reader: asyncio.StreamReader, transport: asyncio.WriteTransport, case: Case
) -> tuple[list[str], bool]:
    """The error codes answered, and True if the gateway closed the connection."""
    if not case.reads:
        return await _until_closed(transport)
    try:
        async with asyncio.timeout(GIVE_UP_S):
            if case.http:
                return _statuses(await reader.read()), True
            codes = []
            while (event := await async_read_event(reader)) is not None:
                if event.type == "error":
                    codes.append(str(event.data.get("code")))
            return codes, True
    except TimeoutError:
        return [], False
    except ConnectionError, json.JSONDecodeError:
        return [], True


async def _until_closed(transport: asyncio.WriteTransport) -> tuple[list[str], bool]:
    """A client that reads nothing: wait (without reading) until the gateway drops it."""
    assert isinstance(transport, asyncio.Transport)
    transport.pause_reading()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_UNREAD_S
    while loop.time() < deadline:
        if transport.is_closing():
            return [], True
        with contextlib.suppress(OSError):
            sock = transport.get_extra_info("socket")
            if sock is not None and _peer_closed(sock):
                return [], True
        await asyncio.sleep(0.1)
    return [], False


def _peer_closed(sock: socket.socket) -> bool:
    """The gateway closed or reset the connection (a peek past what this client never reads
    is impossible, so the TCP state is asked)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return info[0] in (7, 8, 9)  # TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK


def _statuses(raw: bytes) -> list[str]:
    return [
        line.split()[1].decode()
        for line in raw.split(b"\r\n")
        if line.startswith(b"HTTP/") and len(line.split()) > 1
    ]
