"""http_side.py: /health and /metrics over HTTP."""

from __future__ import annotations

import aiohttp

from voice_stack_dev.fakes.speech import FakeSpeech

from .conftest import GatewayFactory


async def test_health_and_metrics(fake_speech: FakeSpeech, make_gateway: GatewayFactory) -> None:
    gw = await make_gateway(fake_speech.url, tts_key="sk-secret-1")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{gw.http_port}/health") as resp:
            assert resp.status == 200
            health = await resp.json()
        async with session.get(f"http://127.0.0.1:{gw.http_port}/metrics") as resp:
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            text = await resp.text()
    assert health["backends"]["asr"]["status"] == "ok"
    assert health["backends"]["tts"]["voices"][0] == "af_heart"
    assert "gateway_active_sessions 0" in text
    assert "sk-secret-1" not in str(health) + text
