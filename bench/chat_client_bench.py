"""Time to first token: the integration's openai-SDK chat client against a hand-written one.

    PYTHONPATH=dev:. .cache/venv/ha11/bin/python bench/chat_client_bench.py [--rounds 40]

Real llama-server (-np 2, -t 1), one warm slot: every request repeats the same cached prompt
pinned to slot 0, so what differs between the two clients is only the client side. Each round
sends the request once with each client, alternating which goes first. Reported per client:
median and p90 of the time from the call to the first content delta and to the end of the
stream; and the SDK's extra median cost in ms. The hand client is the plain aiohttp SSE reader
the integration used before it moved to the SDK (kept here as the baseline only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import httpx2
import openai

from custom_components.voice_stack.chat import ChatClient
from voice_stack_dev.llama import LlamaServer, start_llama

SLOT = 0
SYSTEM = "You are a voice assistant in a smart home. Answer in one short sentence. " * 20

type Timed = Callable[[dict[str, Any]], Awaitable[tuple[float, float]]]


def request(max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is a kitchen?"},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "id_slot": SLOT,
        "cache_prompt": True,
    }


async def hand_stream(
    session: aiohttp.ClientSession, url: str, key: str, body: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The baseline: POST, then parse `data:` lines by hand."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}

    async def post() -> aiohttp.ClientResponse:
        return await session.post(
            f"{url}/v1/chat/completions",
            json=payload,
            headers={"Authorization": f"Bearer {key}"},
            timeout=aiohttp.ClientTimeout(total=60),
        )

    try:
        resp = await post()
    except aiohttp.ServerDisconnectedError:  # a keep-alive llama-server closed (~5 s idle)
        resp = await post()
    async with resp:
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            yield json.loads(line[5:])


def hand_client(session: aiohttp.ClientSession, server: LlamaServer) -> Timed:
    async def timed(body: dict[str, Any]) -> tuple[float, float]:
        started = time.perf_counter()
        first = None
        async for chunk in hand_stream(session, server.url, str(server.api_key), body):
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            if first is None and delta.get("content"):
                first = time.perf_counter()
        end = time.perf_counter()
        return ((first or end) - started) * 1000, (end - started) * 1000

    return timed


def sdk_client(chat: ChatClient) -> Timed:
    async def timed(body: dict[str, Any]) -> tuple[float, float]:
        started = time.perf_counter()
        first = None
        async for chunk in chat.stream(body, 60):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
        end = time.perf_counter()
        return ((first or end) - started) * 1000, (end - started) * 1000

    return timed


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 2), "p90_ms": round(p90, 2)}


async def run(server: LlamaServer, rounds: int, max_tokens: int) -> dict[str, Any]:
    http = httpx2.AsyncClient()
    sdk = openai.AsyncOpenAI(
        api_key=str(server.api_key), base_url=f"{server.url}/v1", http_client=http
    )
    async with aiohttp.ClientSession() as session:
        clients = {"hand": hand_client(session, server), "sdk": sdk_client(ChatClient(sdk))}
        body = request(max_tokens)
        for timed in clients.values():  # warm the slot and both connection pools
            await timed(body)
        results: dict[str, dict[str, list[float]]] = {
            name: {"ttft": [], "total": []} for name in clients
        }
        for n in range(rounds):
            order = list(clients) if n % 2 == 0 else list(reversed(clients))
            for name in order:
                ttft, total = await clients[name](body)
                results[name]["ttft"].append(ttft)
                results[name]["total"].append(total)
    await http.aclose()
    report: dict[str, Any] = {
        name: {"ttft": summary(r["ttft"]), "total": summary(r["total"])}
        for name, r in results.items()
    }
    sdk_ttft, hand_ttft = report["sdk"]["ttft"]["median_ms"], report["hand"]["ttft"]["median_ms"]
    report["sdk_extra_ttft_median_ms"] = round(sdk_ttft - hand_ttft, 2)
    report["ttft_ratio_sdk_over_hand"] = round(sdk_ttft / hand_ttft, 3) if hand_ttft else None
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--model", default="smollm2", help="tiny-text, tiny-tool or smollm2")
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    server = start_llama(args.model, n_parallel=2, ctx_per_slot=4096)
    try:
        report = asyncio.run(run(server, args.rounds, args.max_tokens))
    finally:
        server.stop()
    json.dump(
        {"model": args.model, "rounds": args.rounds, "openai": openai.__version__, **report},
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
