"""llama-server's own endpoints: typed reads, typed errors for foreign replies and for each
status, one resend on a dead keep-alive, nothing else resent."""

from __future__ import annotations

import asyncio
from unittest.mock import ANY, AsyncMock, MagicMock

import aiohttp
import pytest
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from custom_components.voice_stack.client import (
    GatewayClient,
    Health,
    LlamaClient,
    error_from_reply,
)
from custom_components.voice_stack.errors import (
    ContextFullError,
    KeyRejectedError,
    ModelLoadingError,
    NotTheServiceError,
    ServiceError,
    ServiceResponseError,
    ServiceUnreachableError,
)
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeLlama, FakeOllama
from voice_stack_dev.llama import LlamaServer


async def test_real_server(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """Health, typed props, slots and metrics and the model list of a real server; a wrong key
    is refused."""
    client = LlamaClient(async_get_clientsession(hass), llama_text.url, llama_text.api_key or "")
    await client.check_health()
    health = await client.health()
    assert (health.status, health.loading) == (200, False)
    props = await client.props()
    assert (props.total_slots, props.model_file, props.tool_calling) == (4, "tiny-text", True)
    slots = await client.slots()
    assert slots is not None
    assert slots.total == 4
    metrics = await client.metrics()
    assert metrics is not None
    assert metrics.started
    assert await client.models()
    assert not await client.is_ollama()  # its root is its web UI, it has no /api/version
    with pytest.raises(KeyRejectedError):
        await LlamaClient(async_get_clientsession(hass), llama_text.url, "wrong").props()


async def test_is_ollama(
    hass: HomeAssistant,
    fake_ollama: FakeOllama,
    fake: FakeLlama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ollama is told by its root's banner, or by its /api/version when something else serves
    its root; a server that does not answer the question in time is not taken for it."""
    session = async_get_clientsession(hass)
    assert await LlamaClient(session, fake_ollama.url, "k").is_ollama()
    fake_ollama.banner = None
    assert await LlamaClient(session, fake_ollama.url, "k").is_ollama()
    monkeypatch.setattr("custom_components.voice_stack.client.PROBE_TIMEOUT", 0.1)
    fake.delays["/"] = 1.0
    assert not await LlamaClient(session, fake.url, FAKE_KEY).is_ollama()


@pytest.mark.parametrize(
    ("path", "code", "body", "call", "error"),
    [
        ("/props", 200, "[]", "props", NotTheServiceError),
        ("/health", 200, "<html>", "check_health", NotTheServiceError),
        ("/props", 500, "{}", "props", ServiceResponseError),
        ("/slots", 200, '{"not": "a list"}', "slots", NotTheServiceError),
        ("/metrics", 401, "{}", "metrics", KeyRejectedError),
        ("/slots", 502, "", "slots", ServiceUnreachableError),
    ],
)
async def test_foreign_replies(
    hass: HomeAssistant,
    fake: FakeLlama,
    path: str,
    code: int,
    body: str,
    call: str,
    error: type[Exception],
) -> None:
    """Replies that are not llama-server's raise typed errors."""
    fake.overrides[path] = (code, body)
    client = LlamaClient(async_get_clientsession(hass), fake.url, FAKE_KEY)
    with pytest.raises(error):
        await getattr(client, call)()


async def test_lenient_model_list_and_slot_action(hass: HomeAssistant, fake: FakeLlama) -> None:
    """No model list is an empty one; a slot action answers its JSON; a dead server is named."""
    client = LlamaClient(async_get_clientsession(hass), fake.url, FAKE_KEY)
    fake.overrides["/v1/models"] = (200, "[]")
    assert await client.models() == []
    assert await client.slot_action(1, "save", "f.bin") == {"ok": True}
    await fake.stop()
    with pytest.raises(ServiceUnreachableError):
        await client.health()


async def test_what_a_poll_reads(hass: HomeAssistant, fake: FakeLlama) -> None:
    """/health says loading or ready whatever its status; endpoints a server flag switched off
    (501) are None; an error status stays on the error."""
    client = LlamaClient(async_get_clientsession(hass), fake.url, FAKE_KEY)
    fake.overrides["/health"] = (503, '{"error": {"message": "Loading model"}}')
    health = await client.health()
    assert (health.status, health.loading) == (503, True)
    fake.overrides["/health"] = (503, "{}")
    assert (await client.health()).loading is False
    fake.overrides["/slots"] = (501, '{"error": {"message": "This server does not support"}}')
    fake.overrides["/metrics"] = (501, "{}")
    assert (await client.slots(), await client.metrics()) == (None, None)
    fake.overrides["/metrics"] = (500, "{}")
    with pytest.raises(ServiceResponseError) as raised:
        await client.metrics()
    assert (raised.value.status, raised.value.url) == (500, f"{fake.url}/metrics")


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (401, None, KeyRejectedError),
        (403, {"message": "no"}, KeyRejectedError),
        (400, {"type": "exceed_context_size_error", "n_ctx": 9}, ContextFullError),
        (503, {"type": "unavailable_error", "message": "Loading model"}, ModelLoadingError),
        (502, None, ServiceUnreachableError),  # the proxy cannot reach llama-server
        (503, {"message": "Service Unavailable"}, ServiceUnreachableError),
        (504, None, ServiceUnreachableError),
        (500, {"message": "boom"}, ServiceResponseError),
    ],
)
def test_error_from_reply(status: int, error: object, kind: type[ServiceError]) -> None:
    """Each status (and llama-server's error type) has its own exception, which keeps it."""
    err = error_from_reply(status, error)
    assert (type(err), err.status) == (kind, status)


async def test_closed_keepalive_is_resent_once() -> None:
    """A write to a keep-alive connection the server closed is sent again; nothing else is."""
    ok = MagicMock(status=200)
    ok.text = AsyncMock(return_value='{"status": "ok"}')
    session = MagicMock()
    session.request = AsyncMock(
        side_effect=[aiohttp.ClientConnectionResetError("closing transport"), ok]
    )
    client = LlamaClient(session, "http://x", "")
    assert await client.health() == Health(200, ANY, loading=False)
    assert session.request.await_count == 2

    session.request = AsyncMock(side_effect=[aiohttp.ServerDisconnectedError(), ok])
    assert await client.slot_action(0, "save", "f.bin") == {"status": "ok"}
    assert session.request.await_count == 2  # saving a slot twice is harmless: resent
    session.request = AsyncMock(side_effect=[aiohttp.ServerDisconnectedError(), ok])
    with pytest.raises(ServiceUnreachableError, match="disconnected"):
        # a request that may have run is not resent
        await client._request("POST", "/x", timeout_s=1).__aenter__()
    assert session.request.await_count == 1


async def test_a_poll_holds_no_connection_open(hass: HomeAssistant) -> None:
    """A GET (every poll) says `Connection: close`, and once the server agrees (any HTTP/1.1
    server does) the connection is gone: a kept one sat idle until HA's pool dropped it (15 s,
    the poll's own interval) and held the gateway's handler task meanwhile (soaks L and M)."""
    heads: list[bytes] = []
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(head := (await reader.readuntil(b"\r\n\r\n")).lower())
        agreed = b"connection: close\r\n" if b"connection: close" in head else b""
        writer.write(b"HTTP/1.1 200 OK\r\n%sContent-Length: 2\r\n\r\n{}" % agreed)
        await writer.drain()
        if await reader.read() == b"":  # the client closed its end (kept, it would wait)
            closed.set()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = GatewayClient(async_get_clientsession(hass), f"http://127.0.0.1:{port}")
        assert (await client.get("/health", auth=False)).status == 200
        assert b"connection: close" in heads[0]
        async with asyncio.timeout(5):  # closed in milliseconds; kept, it stays for 15 s
            await closed.wait()
    finally:
        server.close()
